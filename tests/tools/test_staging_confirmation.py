"""A worker's "cannot open the checker's buffer" moves the session to host memory only once a fresh worker that loads
no candidate confirms it (``evaluate._buffer_unopenable``, worker mode ``staging``).

The buffer is opened before the candidate is imported, but the report is a file the candidate's process writes: a
candidate can write that report itself. Before 2026-12-07 the session then moved to host memory on its word (without
the timing rules' host allowance, so an honest evaluation whose worker genuinely could not open the buffer was
rejected for the time its crossings took)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Verdict
from ksearch.contracts.exchange import StagingHandle
from ksearch.tasks.registry import resolve_task
from ksearch.tools.evaluator import EvalRequest, EvaluatorSession, evaluate
from ksearch.tools.evaluator.parent import evaluate as evaluate_module
from ksearch.tools.evaluator.parent.outcome import staging_on_host

DATA = Path(__file__).resolve().parents[1] / "tasks" / "data"
OK = (DATA / "softmax_triton_ok.py").read_text()
FORGED = (
    "import gc, os\n"
    "from ksearch.contracts.evaluation import Verdict\n"
    "from ksearch.contracts.exchange import WorkerRequest, WorkerResult\n"
    "_request = next(o for o in gc.get_objects() if isinstance(o, WorkerRequest))\n"
    "_report = WorkerResult(verdict=Verdict.CRASHED, phase='load',\n"
    '                       error="harness: staging: cannot open the checker\'s buffer (forged)")\n'
    "with open(_request.result_path, 'w') as _file:\n"
    "    _file.write(_report.model_dump_json())\n"
    "os._exit(0)\n"
)
"""A candidate that reports, at import, what a worker reports when it cannot open the checker's buffer."""


def _request(code: str) -> EvalRequest:
    return EvalRequest(candidate=Candidate(task="softmax", language="triton", code=code))


def test_a_fresh_worker_opens_the_buffer_unless_it_cannot_be_opened() -> None:
    """Its own session: the buffer is taken away from under it."""
    task = resolve_task("softmax")
    with EvaluatorSession("cpu") as session:
        assert evaluate(_request(OK), session=session).verdict == Verdict.PASSED  # the session's buffer exists
        staging = session.staging
        assert staging is not None and staging.kind == "shm"
        assert not evaluate_module._buffer_unopenable(session, _request(OK), task, "robust")
        if staging.shm_path:
            os.unlink(staging.shm_path)
        else:
            from multiprocessing import shared_memory

            shared_memory.SharedMemory(name=staging.shm_name).unlink()
        assert evaluate_module._buffer_unopenable(session, _request(OK), task, "robust")


@pytest.mark.usefixtures("without_static_checks")
def test_a_candidate_saying_the_buffer_cannot_be_opened_does_not_move_the_session(
    cpu_session: EvaluatorSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    ask = cpu_session.ask_checker

    def recording(command, timeout):
        asked.append(command.op + (" to host memory" if command.shm else " renewed" if command.renew else ""))
        return ask(command, timeout)

    monkeypatch.setattr(cpu_session, "ask_checker", recording)
    evaluation = evaluate(_request(OK + "\n" + FORGED), session=cpu_session)
    assert evaluation.verdict == Verdict.CRASHED, evaluation.log
    assert "staging to host memory" not in asked  # the checker was never asked to move its buffer
    assert asked == ["begin", "finish", "staging renewed", "begin", "finish"]  # run again once a fresh worker opened it


def test_host_staging_is_the_parents_word() -> None:
    shm = StagingHandle(kind="shm", nbytes=1 << 20, generation=1, shm_name="x")
    assert staging_on_host(shm, "cuda:0") and not staging_on_host(shm, "cpu")


@pytest.fixture
def without_static_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ksearch.tools.integrity.check_source", lambda code, **kw: None)
