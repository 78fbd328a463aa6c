"""The interface every executor offers the search."""

from __future__ import annotations

from typing import Protocol

from ksearch.contracts.evaluation import Comparison, Evaluation
from ksearch.tools.evaluator.request import EvalRequest


class Executor(Protocol):
    """Runs evaluations somewhere; thread-safe, so parallel cycles may submit at once."""

    def evaluate(self, request: EvalRequest) -> Evaluation:
        """The verdict of one candidate on ``request.device`` (the executor may choose the device when it is
        ``cuda`` and it owns several)."""

    def compare(self, incumbent: EvalRequest, challenger: EvalRequest, *, rounds: int = 5) -> Comparison:
        """A paired, interleaved timing of two correct candidates on one GPU."""

    def close(self) -> None:
        """Stop every process the executor started."""
