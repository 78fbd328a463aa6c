"""The local executor: evaluations on this machine, one ``EvaluatorSession`` per device, made on first use.

A session keeps its device's trusted checker (and its cache of reference outputs) and one worker started ahead of
need, so consecutive evaluations on a GPU start at once. Which GPU an evaluation uses is the caller's lease
(``GpuPool``); two evaluations are never given the same device at once, so a session serves one at a time.
"""

from __future__ import annotations

import threading

from ksearch.contracts.evaluation import Comparison, Evaluation
from ksearch.tools.evaluator.compare import compare
from ksearch.tools.evaluator.evaluate import evaluate
from ksearch.tools.evaluator.request import EvalRequest
from ksearch.tools.evaluator.session import EvaluatorSession


class LocalExecutor:
    """Evaluations in sessions on this machine's devices (the CPU interpreter included)."""

    def __init__(self, *, prestart: bool = True, salt: int | None = None) -> None:
        self.prestart = prestart
        self.salt = salt
        self._sessions: dict[str, EvaluatorSession] = {}
        self._lock = threading.Lock()

    def session(self, device: str) -> EvaluatorSession:
        with self._lock:
            found = self._sessions.get(device)
            if found is None:
                found = self._sessions[device] = EvaluatorSession(device, prestart=self.prestart, salt=self.salt)
            return found

    def evaluate(self, request: EvalRequest) -> Evaluation:
        return evaluate(request, session=self.session(request.device))

    def compare(self, incumbent: EvalRequest, challenger: EvalRequest, *, rounds: int = 5) -> Comparison:
        return compare(incumbent, challenger, rounds=rounds, session=self.session(incumbent.device))

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.close()

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
