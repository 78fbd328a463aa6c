"""A worker's "cannot open the checker's buffer" moves the session to host memory only once a fresh worker that loads
no candidate confirms it (``evaluate._buffer_unopenable``, worker mode ``staging``).

The buffer is opened before the candidate is imported, but the report is a file the candidate's process writes: a
candidate can write that report itself. Before 2026-12-07 the session then moved to host memory on its word (without
the timing rules' host allowance, so an honest evaluation whose worker genuinely could not open the buffer was
rejected for the time its crossings took)."""

from __future__ import annotations

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


def test_a_fresh_worker_opens_the_buffer_unless_it_cannot_be_opened(cpu_session: EvaluatorSession) -> None:
    assert evaluate(_request(OK), session=cpu_session).verdict == Verdict.PASSED  # the session's buffer exists
    task = resolve_task("softmax")
    assert cpu_session.staging is not None
    assert not evaluate_module._buffer_unopenable(cpu_session, _request(OK), task, "robust")
    real = cpu_session.staging
    try:
        cpu_session.staging = StagingHandle(kind="shm", nbytes=real.nbytes, shm_name="ksearch-no-such-buffer")
        assert evaluate_module._buffer_unopenable(cpu_session, _request(OK), task, "robust")
    finally:
        cpu_session.staging = real


@pytest.mark.usefixtures("without_static_checks")
def test_a_candidate_saying_the_buffer_cannot_be_opened_does_not_move_the_session(
    cpu_session: EvaluatorSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    ask = cpu_session.ask_checker

    def recording(command, timeout):
        asked.append(command.op)
        return ask(command, timeout)

    monkeypatch.setattr(cpu_session, "ask_checker", recording)
    evaluation = evaluate(_request(OK + "\n" + FORGED), session=cpu_session)
    assert evaluation.verdict == Verdict.CRASHED, evaluation.log
    assert "staging" not in asked  # the checker was never asked to move its buffer to host memory
    assert asked.count("begin") == 2  # run again on the same buffer after the fresh worker opened it


def test_host_staging_is_the_parents_word() -> None:
    shm = StagingHandle(kind="shm", nbytes=1 << 20, generation=1, shm_name="x")
    assert staging_on_host(shm, "cuda:0") and not staging_on_host(shm, "cpu")


@pytest.fixture
def without_static_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ksearch.tools.integrity.check_source", lambda code, **kw: None)
