"""The local executor: evaluations on this machine, one ``EvaluatorSession`` per device, made on first use.

A session keeps its device's trusted checker (and its cache of reference outputs) and one worker started ahead of
need, so consecutive evaluations on a GPU start at once. A session serves one evaluation at a time: which GPU an
evaluation uses is the caller's lease (``GpuPool``), but the CPU interpreter is shared by every parallel cycle, so a
busy device gets a second session rather than two evaluations interleaving on one checker.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Self

from ksearch.contracts.counters import CounterReport
from ksearch.contracts.evaluation import Comparison, Evaluation
from ksearch.tools.counters.collect import collect_counters
from ksearch.tools.evaluator.parent.compare import compare
from ksearch.tools.evaluator.parent.evaluate import evaluate
from ksearch.tools.evaluator.parent.request import EvalRequest
from ksearch.tools.evaluator.parent.session import EvaluatorSession
from ksearch.tools.executors.base import Busy
from ksearch.tools.fingerprint import DeviceInfo, probe_device


class LocalExecutor:
    """Evaluations in sessions on this machine's devices (the CPU interpreter included)."""

    def __init__(self, *, prestart: bool = True, salt: int | None = None) -> None:
        self.prestart = prestart
        self.salt = salt if salt is not None else secrets.randbits(62)
        """One salt for every session, so all candidates of a run are checked on the same test inputs."""
        self._sessions: dict[str, list[EvaluatorSession]] = {}
        self._busy: set[EvaluatorSession] = set()
        self._lock = threading.Lock()
        self.busy: list[Busy] = []

    def device_info(self, device: str) -> DeviceInfo:
        return probe_device(device)

    @contextlib.contextmanager
    def session(self, device: str) -> Iterator[EvaluatorSession]:
        """A free session of ``device`` (made when all are busy), held for the duration of the block."""
        with self._lock:
            sessions = self._sessions.setdefault(device, [])
            found = next((s for s in sessions if s not in self._busy), None)
            if found is None:
                found = EvaluatorSession(device, prestart=self.prestart, salt=self.salt)
                sessions.append(found)
            self._busy.add(found)
        try:
            yield found
        finally:
            with self._lock:
                self._busy.discard(found)

    def evaluate(self, request: EvalRequest) -> Evaluation:
        with self.session(request.device) as session, self._timed("evaluate", request.device):
            return evaluate(request, session=session)

    def compare(self, incumbent: EvalRequest, challenger: EvalRequest, *, rounds: int = 5) -> Comparison:
        with self.session(incumbent.device) as session, self._timed("compare", incumbent.device):
            return compare(incumbent, challenger, rounds=rounds, session=session)

    def counters(self, request: EvalRequest, shapes: list[str]) -> CounterReport:
        """ncu around a contained worker of its own (no session's checker is needed: nothing is judged)."""
        with self._timed("counters", request.device):
            return collect_counters(request, shapes)

    def wait_ready(self, device: str, timeout: float = 120.0) -> bool:
        """Wait until the workers started ahead of need on ``device`` are ready (what the time of an LLM call gives
        them in a search); False if one died or the timeout passed first."""
        deadline = time.monotonic() + timeout
        with self._lock:
            idle = [
                w
                for s in self._sessions.get(device, [])
                for w in (s.idle, s.idle_scout, s.idle_profiler)
                if w is not None
            ]
        return all(worker.wait_ready(deadline) for worker in idle)

    @contextlib.contextmanager
    def _timed(self, kind: str, device: str) -> Iterator[None]:
        started = time.time()
        try:
            yield
        finally:
            self.busy.append(Busy(kind, device, started, time.time()))

    def close(self) -> None:
        with self._lock:
            sessions = [s for group in self._sessions.values() for s in group]
            self._sessions, self._busy = {}, set()
        for session in sessions:
            session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
