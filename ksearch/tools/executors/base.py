"""The interface every executor offers the search."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ksearch.contracts.counters import CounterReport
from ksearch.contracts.evaluation import Comparison, Evaluation
from ksearch.tools.evaluator.parent.request import EvalRequest
from ksearch.tools.fingerprint import DeviceInfo


@dataclass(frozen=True)
class Busy:
    """One stretch of time a device spent on the search's work, measured where the work ran."""

    kind: str
    """``evaluate``, ``compare`` or ``counters``."""
    where: str
    """The device (``cuda:0``, ``cpu``) or the Dask worker's address."""
    started: float
    """Epoch seconds, on the agent's clock (a worker's own duration, placed so that it ends when its answer came)."""
    ended: float


class Executor(Protocol):
    """Runs evaluations somewhere; thread-safe, so parallel cycles may submit at once."""

    busy: list[Busy]
    """Every evaluation and comparison done so far, in the order they ended (for throughput measurements)."""

    def device_info(self, device: str) -> DeviceInfo:
        """What ``device`` is where this executor runs evaluations (the evaluation cache key and the prompts'
        description of the hardware come from it)."""

    def evaluate(self, request: EvalRequest) -> Evaluation:
        """The verdict of one candidate on ``request.device`` (the executor may choose the device when it is
        ``cuda`` and it owns several)."""

    def compare(self, incumbent: EvalRequest, challenger: EvalRequest, *, rounds: int = 5) -> Comparison:
        """A paired, interleaved timing of two correct candidates on one GPU."""

    def counters(self, request: EvalRequest, shapes: list[str]) -> CounterReport:
        """Nsight Compute's hardware counters of the request's candidate on ``shapes`` (a trusted collector; a report
        that is not ``collected`` says why)."""

    def close(self) -> None:
        """Stop every process the executor started."""
