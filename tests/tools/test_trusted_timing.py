"""The score is checked from outside the candidate's process (issue 30): forgers that got past the static rules and
the in-process guard, run through the real ``evaluate()`` with real worker and checker processes.

The CPU never times in production; ``KSEARCH_CPU_TIMING=1`` lets it time with wall-clock events so that the whole
path runs here: the worker announces each timed window on its message socket, the kernel stamps the records with
their send times, and the parent's ledger holds the samples against those stamps. The candidates sleep 5 ms per call
so a forgery is far above the harness's own overhead. The static rules are switched off for these files (they reach
frames, ``gc`` and the worker's objects, which the rules refuse): this is the layer behind them."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from ksearch import settings
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.tools.evaluator import EvalRequest, evaluate

evaluate_module = importlib.import_module(
    "ksearch.tools.evaluator.parent.evaluate"
)  # the package's name is the function

FORGERS = Path(__file__).resolve().parent / "forgers"


pytestmark = pytest.mark.serial  # times kernels on the CPU: runs alone (pyproject.toml's marker)


@pytest.fixture(autouse=True, params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each case on the CPU (wall-clock events) and, under ``-m gpu``, on a GPU with CUDA events."""
    monkeypatch.setenv("KSEARCH_CPU_TIMING", "1")
    monkeypatch.setattr(evaluate_module.integrity, "check_source", lambda code, **kwargs: None)
    return request.param


@pytest.fixture
def _evaluate(device: str):  # noqa: ANN202
    def run(name: str, method: str) -> Evaluation:
        code = (FORGERS / name).read_text(encoding="utf-8")
        candidate = Candidate(task="softmax", language="triton", code=code)
        return evaluate(
            EvalRequest(candidate=candidate, device=device, timing=True, timing_method=method, run_timeout_s=240)
        )

    return run


@pytest.mark.parametrize("method", ["gpumode-benchmark", "confirm"])
def test_an_honest_kernel_is_timed_at_its_speed(method: str, _evaluate) -> None:  # noqa: ANN001
    evaluation = _evaluate("honest_slow.py", method)
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert evaluation.timed and all(t.mean_ms >= 5.0 for t in evaluation.timings)
    assert evaluation.latency_ms < 500.0  # a loaded 2-core machine stretches the 5 ms calls


@pytest.mark.parametrize(
    ("name", "method"),
    [
        ("forge_runner_slot.py", "gpumode-benchmark"),
        ("forge_channel.py", "gpumode-benchmark"),
        ("forge_channel.py", "confirm"),
    ],
)
def test_samples_forged_inside_the_process_are_rejected_by_the_parents_clock(name: str, method: str, _evaluate) -> None:  # noqa: ANN001
    evaluation = _evaluate(name, method)
    assert evaluation.verdict == Verdict.REJECTED, f"{evaluation.summary()}\n{evaluation.log}"
    assert evaluation.rejection is not None and evaluation.rejection.rule == "timing_forgery"
    evidence = evaluation.rejection.evidence
    assert ("evaluator's clock" in evidence or "out of order" in evidence) and evaluation.score is None
    if name == "forge_channel.py":  # decided at the first record out of order: the rest of the loop never runs
        assert "the worker was stopped there" in evidence


def test_the_workers_report_never_becomes_the_score(_evaluate) -> None:  # noqa: ANN001
    """The forger shrinks the worker's own sample list, which is also what the harness's stop rule reads: its loop
    then runs on (the forged samples never settle) where the parent's replay of the rule on the samples it received
    may stop (5 ms sleeps settle below 0.1 % relative error near 80 repeats on a quiet machine). Either outcome is
    honest: passed at the samples the parent received, or rejected as ``timing_forgery`` for the longer loop (a CI
    run on a quiet machine saw the second); never a score from the report."""
    evaluation = _evaluate("forge_report_only.py", "gpumode-benchmark")
    if evaluation.verdict == Verdict.REJECTED:
        assert evaluation.rejection is not None and evaluation.rejection.rule == "timing_forgery", evaluation.log
        assert "stop rule" in evaluation.rejection.evidence and evaluation.score is None
        return
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert all(t.mean_ms >= 5.0 for t in evaluation.timings)  # the samples the parent received, not the report's


def test_a_kernel_that_works_only_on_audited_calls_is_rejected(_evaluate) -> None:  # noqa: ANN001
    evaluation = _evaluate("evade_audits.py", "gpumode-benchmark")
    assert evaluation.verdict == Verdict.REJECTED, f"{evaluation.summary()}\n{evaluation.log}"
    assert evaluation.rejection is not None and evaluation.rejection.rule == "audit_evasion"


def test_a_no_op_verify_cannot_be_set_on_the_worker(_evaluate) -> None:  # noqa: ANN001
    evaluation = _evaluate("shadow_verify.py", "gpumode-benchmark")
    assert evaluation.verdict != Verdict.PASSED
    assert "verify" in evaluation.log


@pytest.mark.parametrize(
    ("name", "verdict"), [("honest_slow.py", Verdict.PASSED), ("forge_channel.py", Verdict.REJECTED)]
)
def test_a_parent_that_reads_the_records_late_judges_alike(
    name: str, verdict: Verdict, _evaluate, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:  # noqa: ANN001
    """``KSEARCH_TIMING_POLL_MS``: the parent reads a timing worker's records every few ms instead of waking for each;
    the kernel stamped them when they were sent, so the verdicts are the same."""
    if device != "cpu":
        pytest.skip("the polling is the parent's; one device shows it")
    monkeypatch.setenv(settings.TIMING_POLL_MS.name, "5")
    evaluation = _evaluate(name, "gpumode-benchmark")
    assert evaluation.verdict == verdict, f"{evaluation.summary()}\n{evaluation.log}"


def test_the_reader_drains_every_waiting_record_with_its_send_stamp() -> None:
    from ksearch.tools.evaluator.parent.processes import LineReader, message_channel

    parent, child = message_channel()
    try:
        for i in range(3):
            child.send(b'{"op": "go", "config": %d}\n' % i)
        reader = LineReader(parent.fileno(), parent)
        reader.drain()
        lines = reader.stamped_lines(0.0)
        assert [line for _, line in lines] == ['{"op": "go", "config": %d}' % i for i in range(3)]
        stamps = [stamp for stamp, _ in lines]
        assert reader.kernel_stamps and stamps == sorted(stamps)
    finally:
        parent.close()
        child.close()


@pytest.mark.parametrize("stamped", [True, False])
def test_descriptors_a_candidate_passes_over_the_channel_never_stay_in_the_parent(stamped: bool) -> None:
    """A worker's end can send ``SCM_RIGHTS``; where the kernel does not stamp records (``stamped`` off) the reader's
    ancillary buffer has room for them: the parent closes them at once (a red-team review of 2026-11-30)."""
    import array
    import socket

    from ksearch.tools.evaluator.parent.processes import LineReader, message_channel

    if stamped:
        parent, child = message_channel()
    else:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    passed = [os.open(os.devnull, os.O_RDONLY) for _ in range(4)]
    try:
        before = set(os.listdir("/proc/self/fd"))
        child.sendmsg(
            [b'{"op": "go", "config": 0}\n'],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", passed).tobytes())],
        )
        reader = LineReader(parent.fileno(), parent)
        reader.drain()
        assert [line for _, line in reader.stamped_lines(0.0)] == ['{"op": "go", "config": 0}']
        assert set(os.listdir("/proc/self/fd")) <= before, "a passed descriptor stayed open in the parent"
    finally:
        for fd in passed:
            os.close(fd)
        parent.close()
        child.close()


def test_compare_mode_runs_reach_the_parent_named_by_their_ends(device: str) -> None:
    """Compare mode through the real session and worker: every run's last window is named by the message that ends
    the run, every block's handoff to the checker names the window it audits (compare is audited since issue 59), and
    the parent's judgement of the loops accepts them (``judge_loops``; the per-window allowances of robust blocks,
    spin kernel included, are the GPU's to check: on the CPU's wall-clock events they do not hold)."""
    if device != "cpu":
        pytest.skip("compare() itself runs on the GPU (tests/tools/test_compare.py); this is its path on the CPU")
    compare_module = importlib.import_module("ksearch.tools.evaluator.parent.compare")
    from ksearch.tasks.registry import resolve_task
    from ksearch.tools.evaluator import EvaluatorSession

    code = (FORGERS / "honest_slow.py").read_text(encoding="utf-8")
    requests = [
        EvalRequest(
            candidate=Candidate(task="softmax", language="triton", code=code + f"\n# {tag}\n"),
            device="cpu",
            timing=True,
        )
        for tag in ("a", "b")
    ]
    task = resolve_task("softmax")
    with EvaluatorSession("cpu", prestart=False) as session:
        outcome, check = compare_module._run_pair(session, *requests, task, 2)
    assert check.verdict == Verdict.PASSED and check.outputs_checked > 0
    names = [c.name for c in task.benchmark_configs("cpu")]
    ledger = outcome.ledger
    for index in range(len(names)):
        windows = ledger.by_config()[index]
        for run in range(4):
            mine = [w for w in windows if w.run == run]
            assert mine and mine[-1].numbers[-1] == len(mine)
            assert all(set(w.numbers) == {position} for position, w in enumerate(mine, start=1))
    from ksearch.tools.evaluator.parent.ledger_loops import judge_loops

    assert judge_loops(ledger, "compare", names) is None


def test_a_phase_announced_by_the_candidate_hides_no_window(_evaluate, device: str) -> None:  # noqa: ANN001
    from ksearch.tasks.registry import resolve_task

    evaluation = _evaluate("phase_toggle.py", "gpumode-benchmark")
    assert evaluation.verdict == Verdict.PASSED, f"{evaluation.summary()}\n{evaluation.log}"
    configs = resolve_task("softmax").benchmark_configs(device)
    assert len(evaluation.timings) == len(configs) and all(t.mean_ms >= 5.0 for t in evaluation.timings)
