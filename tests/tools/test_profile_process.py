"""The profiling process beside the worker (issue 31: the per-kernel profile without its cost in the verdict), with
real processes on the CPU: it runs nothing of the candidate before the parent's go, profiles one call per benchmark
config after it, and a profile that does not come in time, or a failing one, costs the verdict nothing but a note.

On the CPU a call has no device activity, so its profile lists no kernel: the figures are the GPU's to check
(``tests/tools/test_evidence_gpu.py``); these tests are about the processes."""

from __future__ import annotations

import importlib
import time
from pathlib import Path

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import ShapeProfile, Verdict
from ksearch.tasks.registry import resolve_task
from ksearch.tools.evaluator import EvalRequest, EvaluatorSession, evaluate
from ksearch.tools.evaluator.parent.evaluate import build_worker_request, wants_profiler
from ksearch.tools.evaluator.parent.profile_process import (
    NAME_LIMIT,
    ask_profiler,
    bounded,
    collect,
    profiler_wanted,
)
from ksearch.tools.evaluator.profiler.kernel_profile import PROFILE_KERNELS

evaluate_module = importlib.import_module("ksearch.tools.evaluator.parent.evaluate")

MARKED = """
import time

import torch

open("imported.txt", "w").write(str(time.time()))  # in the process's own folder: when the candidate was imported
time.sleep(SLEEP_AT_IMPORT_S)


def kernel(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1).float()
"""


def _marked(sleep_s: float = 0.0) -> str:
    return MARKED.replace("SLEEP_AT_IMPORT_S", repr(sleep_s))


def _ask(session: EvaluatorSession, code: str) -> tuple:
    task = resolve_task("softmax")
    request = EvalRequest(candidate=Candidate(task="softmax", language="triton", code=code), device="cpu")
    profiler = session.take_profiler()
    own = build_worker_request(request, profiler.work, profiler.result_path, task, task.default_timing_method, salt=0)
    ask_profiler(profiler, code, own)
    return profiler, [c.name for c in task.benchmark_configs("cpu")]


def test_a_report_planted_before_the_go_is_not_read() -> None:
    """The parent reads the report as soon as it exists (not at the process's exit): one already in the folder when
    the go is sent (planted where a machine lacks the containment that keeps other candidates out) is removed first."""
    from ksearch.contracts.exchange import WorkerResult

    with EvaluatorSession("cpu", prestart=False) as session:
        profiler, configs = _ask(session, _marked())
        assert profiler.wait_phase("armed", time.monotonic() + 120.0)
        planted = WorkerResult(
            verdict=Verdict.PASSED,
            phase="profile",
            profile=[
                ShapeProfile(config=configs[0], call_ms=1.0, kernel_ms=1.0, host_gap_ms=0.0, launches=1, kernels=[])
            ],
        )
        profiler.result_path.write_text(planted.model_dump_json(), encoding="utf-8")
        report = collect(profiler, go=True, configs=configs)
    assert report.problem == "" and [p.config for p in report.profiles] == configs
    assert report.profiles[0].call_ms != 1.0


def test_a_folder_where_the_report_goes_leaves_a_note_and_stops_nothing() -> None:
    """A directory made where the report goes cannot be cleared before the go (a red-team review of 2026-11-29): the
    evaluation goes on without a profile, with a note, instead of the error reaching the run."""
    with EvaluatorSession("cpu", prestart=False) as session:
        profiler, configs = _ask(session, _marked())
        assert profiler.wait_phase("armed", time.monotonic() + 120.0)
        (profiler.result_path / "inside").mkdir(parents=True)
        report = collect(profiler, go=True, configs=configs)
    assert "could not be cleared" in report.problem and not report.profiles


def test_nothing_of_the_candidate_runs_before_the_go_and_every_benchmark_config_is_profiled_after() -> None:
    with EvaluatorSession("cpu", prestart=False) as session:
        profiler, configs = _ask(session, _marked())
        assert profiler.wait_phase("armed", time.monotonic() + 120.0)
        time.sleep(0.5)
        marker = profiler.work / "imported.txt"
        assert not marker.exists()  # armed, and the candidate not imported: it waits for the go
        asked = time.time()
        report = collect(profiler, go=True, configs=configs)
        assert report.problem == "" and report.wait_s > 0
        assert float(marker.read_text()) >= asked
        assert [p.config for p in report.profiles] == configs
        assert all(p.call_ms > 0 and p.launches == 0 for p in report.profiles)  # the CPU: no device activity
        assert {"profile_wait", "profile_import", "profile_start", "profile_calls"} <= set(report.stage_seconds)
        session.retire(profiler)


def test_without_the_go_the_candidate_never_runs_in_the_profiling_process() -> None:
    with EvaluatorSession("cpu", prestart=False) as session:
        profiler, configs = _ask(session, _marked())
        assert profiler.wait_phase("armed", time.monotonic() + 120.0)
        report = collect(profiler, go=False, configs=configs)
        assert report.profiles == [] and report.problem == "" and report.wait_s == 0.0
        profiler.send('{"op": "stop"}')  # anything but the go ends it without a call
        assert profiler.wait_exit(30.0)
        assert not (profiler.work / "imported.txt").exists()
        session.retire(profiler)


def test_a_profile_that_is_late_is_left_out_with_a_note() -> None:
    with EvaluatorSession("cpu", prestart=False) as session:
        profiler, configs = _ask(session, _marked(30.0))
        report = collect(profiler, go=True, configs=configs, timeout_s=3.0)
        assert report.profiles == [] and "not ready within 3 s" in report.problem
        session.retire(profiler)
        assert profiler.exited()


def test_a_candidate_that_fails_to_import_leaves_a_note_not_a_verdict() -> None:
    with EvaluatorSession("cpu", prestart=False) as session:
        profiler, configs = _ask(session, "raise RuntimeError('only in the profiler')\n")
        report = collect(profiler, go=True, configs=configs)
        assert report.profiles == [] and "the profiling process failed" in report.problem
        assert "only in the profiler" in report.problem
        session.retire(profiler)


@pytest.fixture
def cpu_profiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """``evaluate`` on the CPU's timing, with a profiling process as on a GPU (the static rules off: the candidates
    call the library's softmax, which the task forbids)."""
    monkeypatch.setenv("KSEARCH_CPU_TIMING", "1")
    monkeypatch.setattr(evaluate_module, "profiler_wanted", lambda code, device, low_memory=False: not low_memory)
    monkeypatch.setattr(evaluate_module.integrity, "check_source", lambda code, **kwargs: None)


@pytest.mark.serial
@pytest.mark.usefixtures("cpu_profiling")
def test_the_whole_evaluation_takes_its_profile_from_the_profiling_process() -> None:
    """The wiring of ``evaluate`` (a GPU's path) on the CPU's timing: the worker does not profile, the profiling
    process does, once the verdict is passed; the stage times say what the verdict waited for it."""
    code = (Path(__file__).resolve().parent / "forgers" / "honest_slow.py").read_text(encoding="utf-8")
    candidate = Candidate(task="softmax", language="triton", code=code)
    evaluation = evaluate(
        EvalRequest(candidate=candidate, device="cpu", timing=True, profile=True, timing_method="gpumode-benchmark")
    )
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert [p.config for p in evaluation.profile] == [t.config for t in evaluation.timings]
    assert all(p.call_ms >= 5.0 for p in evaluation.profile)  # the candidate's 5 ms call, profiled
    stages = evaluation.environment["stage_seconds"]
    assert "profile=" in stages and "profile_calls=" in stages and "profile" not in evaluation.environment


@pytest.mark.serial
@pytest.mark.usefixtures("cpu_profiling")
def test_a_failed_candidate_is_never_profiled() -> None:
    code = "import torch\n\ndef kernel(x):\n    return torch.zeros_like(x)\n"
    candidate = Candidate(task="softmax", language="triton", code=code)
    evaluation = evaluate(
        EvalRequest(candidate=candidate, device="cpu", timing=True, profile=True, timing_method="gpumode-benchmark")
    )
    assert evaluation.verdict == Verdict.INCORRECT
    assert evaluation.profile == [] and "profile=" not in evaluation.environment["stage_seconds"]


def test_the_profiling_process_is_for_gpu_evaluations_that_can_share_the_workers_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    triton_code = "import triton\n"
    assert profiler_wanted(triton_code, "cuda") and profiler_wanted(triton_code, "cuda:1")
    assert not profiler_wanted(triton_code, "cpu")
    assert not profiler_wanted(triton_code, "cuda", low_memory=True)
    assert not profiler_wanted("from torch.utils.cpp_extension import load_inline\n", "cuda")
    # torch.compile: the worker profiles after its timing (a profiling process would compile every graph again)
    assert not profiler_wanted("import torch\nimport triton\nfast = torch.compile(slow)\n", "cuda")
    candidate = Candidate(task="softmax", language="triton", code=triton_code)
    assert wants_profiler(EvalRequest(candidate=candidate, device="cuda"), low_memory=False)
    assert not wants_profiler(EvalRequest(candidate=candidate, device="cuda", profile=False), low_memory=False)
    assert not wants_profiler(EvalRequest(candidate=candidate, device="cuda", timing=False), low_memory=False)


def test_what_is_read_of_a_profiling_report_is_bounded() -> None:
    """The report is the candidate's word: only the benchmark configs, once each, in their order, a bounded list of
    kernels with bounded names."""
    from ksearch.contracts.evaluation import ProfiledKernel

    kernels = [ProfiledKernel(name="k" * 5000, launches=1, time_ms=0.1, share=0.1) for _ in range(50)]
    profiles = [
        ShapeProfile(config="b1", call_ms=1.0, kernel_ms=0.5, host_gap_ms=0.5, launches=50, kernels=kernels),
        ShapeProfile(config="forged", call_ms=1.0, kernel_ms=0.5, host_gap_ms=0.5, launches=1, kernels=[]),
        ShapeProfile(config="b0", call_ms=2.0, kernel_ms=1.0, host_gap_ms=1.0, launches=1, kernels=[]),
        ShapeProfile(config="b0", call_ms=9.0, kernel_ms=1.0, host_gap_ms=8.0, launches=1, kernels=[]),
    ]
    kept = bounded(profiles, ["b0", "b1", "b2"])
    assert [p.config for p in kept] == ["b0", "b1"] and kept[0].call_ms == 2.0
    assert len(kept[1].kernels) == PROFILE_KERNELS and all(len(k.name) == NAME_LIMIT for k in kept[1].kernels)


@pytest.mark.serial
@pytest.mark.usefixtures("cpu_profiling")
def test_the_profiling_process_is_stopped_while_the_worker_times() -> None:
    """SIGSTOP while the worker times, SIGCONT after: a profiler still starting takes no CPU time from the timing."""
    import threading

    code = (Path(__file__).resolve().parent / "forgers" / "honest_slow.py").read_text(encoding="utf-8")
    candidate = Candidate(task="softmax", language="triton", code=code)
    request = EvalRequest(candidate=candidate, device="cpu", timing=True, timing_method="gpumode-benchmark")
    with EvaluatorSession("cpu", prestart=False, worker_now=True, profiler_now=True) as session:
        assert session.idle_profiler is not None
        stat = Path(f"/proc/{session.idle_profiler.process.pid}/stat")
        states: list[str] = []
        result: list = []
        thread = threading.Thread(target=lambda: result.append(evaluate(request, session=session)))
        thread.start()
        while thread.is_alive():
            try:
                states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                pass
            time.sleep(0.005)
        thread.join()
    assert result[0].verdict == Verdict.PASSED, result[0].log
    assert "T" in states  # stopped while the worker timed
    first_stop = states.index("T")
    assert any(s != "T" for s in states[first_stop:])  # and running again after (to profile, then killed)
    assert "profile_ready=" in result[0].environment["stage_seconds"]  # what the verdict waited for its start


@pytest.mark.serial
@pytest.mark.usefixtures("cpu_profiling")
def test_a_prestarting_session_starts_the_next_profiling_process_when_one_is_taken_and_stops_it_while_timing() -> None:
    """The next evaluation's profiling process starts when this one's is taken, so that its profiler's start runs
    during this evaluation's compile and check rather than into the next verdict; it too is stopped while the
    worker times."""
    import threading

    code = (Path(__file__).resolve().parent / "forgers" / "honest_slow.py").read_text(encoding="utf-8")
    candidate = Candidate(task="softmax", language="triton", code=code)
    request = EvalRequest(candidate=candidate, device="cpu", timing=True, timing_method="gpumode-benchmark")
    with EvaluatorSession("cpu") as session:
        taken = session.take_profiler()
        assert session.idle_profiler is not None and session.idle_profiler is not taken
        session.retire(taken)
        nxt = session.idle_profiler
        assert nxt is not None
        states: list[str] = []
        result: list = []
        following = None  # started when the evaluation takes ``nxt``
        thread = threading.Thread(target=lambda: result.append(evaluate(request, session=session)))
        thread.start()
        while thread.is_alive():
            idle = session.idle_profiler
            if following is None and idle is not None and idle is not nxt:
                following = idle
            if following is not None:
                try:
                    states.append(Path(f"/proc/{following.process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0])
                except (OSError, IndexError):
                    pass
            time.sleep(0.005)
        thread.join()
        assert session.idle_profiler is following  # still the next one after the evaluation
    assert result[0].verdict == Verdict.PASSED, result[0].log
    assert "T" in states  # stopped while the worker timed
    assert states[-1] != "T"  # and running again after


def test_a_gpu_profile_without_device_activity_is_no_profile() -> None:
    """CUPTI restricted to administrators (a common cluster setting) gives a session with no kernels: that is said,
    not reported as calls that launch nothing."""
    from ksearch.tools.evaluator.profiler.kernel_profile import NoDeviceActivity, require_device_activity

    with pytest.raises(NoDeviceActivity, match="NVreg_RestrictProfilingToAdminUsers"):
        require_device_activity("cuda:0", 7, [])
    require_device_activity("cuda:0", 7, [("k", 0.0, 1.0)])
    require_device_activity("cpu", 2, [])  # the CPU has no device activity to see
    require_device_activity("cuda", 0, [])  # nothing was profiled


def test_a_report_that_is_no_regular_file_is_not_read(tmp_path: Path) -> None:
    """The worker's folder is the candidate's to write: a FIFO where the report goes would block the parent that opens
    it, a huge sparse file would fill its memory, a link would lead elsewhere (a red-team review of 2026-11-28)."""
    import os

    from ksearch.tools.evaluator.shared.sandbox import REPORT_LIMIT, read_regular, read_report, read_tail

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert read_regular(fifo) is None and read_tail(fifo) == ""
    assert time.monotonic() - started < 1.0  # not blocked waiting for a writer
    sparse = tmp_path / "sparse.json"
    with open(sparse, "wb") as f:
        f.truncate(REPORT_LIMIT + 1)
    assert read_report(sparse) == (None, "the report is not a regular file of at most 64 MiB")
    assert len(read_tail(sparse, 10)) == 10  # a log's tail is read whatever the file's size
    real = tmp_path / "real.json"
    real.write_text('{"verdict": "passed"}', encoding="utf-8")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert read_regular(link) is None and read_regular(real) == '{"verdict": "passed"}'
    assert read_report(tmp_path / "missing.json") == (None, "no report")


@pytest.mark.serial
@pytest.mark.usefixtures("cpu_profiling")
def test_processes_taken_for_an_evaluation_stop_when_the_next_profiling_process_cannot_start(monkeypatch) -> None:
    """Taking the profiling process starts the next one; when that start fails, the worker and the profiling process
    already taken for this evaluation are stopped, not left running for the session's life."""
    code = (Path(__file__).resolve().parent / "forgers" / "honest_slow.py").read_text(encoding="utf-8")
    request = EvalRequest(
        candidate=Candidate(task="softmax", language="triton", code=code),
        device="cpu",
        timing=True,
        timing_method="gpumode-benchmark",
    )
    with EvaluatorSession("cpu") as session:
        session.retire(session.take_profiler())
        worker, profiler = session.take_worker(), session.idle_profiler
        session.idle = worker  # as prestarted: the evaluation takes these two
        assert profiler is not None and not worker.exited() and not profiler.exited()
        real = session._start_worker

        def no_profiler(*, profiler: bool = False):  # noqa: ANN202
            if profiler:
                raise OSError("cannot start another process")
            return real(profiler=profiler)

        monkeypatch.setattr(session, "_start_worker", no_profiler)
        with pytest.raises(OSError, match="cannot start another process"):
            evaluate_module._evaluate_once(session, request, resolve_task("softmax"), "gpumode-benchmark")
        worker.process.wait(timeout=30)
        profiler.process.wait(timeout=30)
        assert worker.exited() and profiler.exited()
        assert not worker.work.parent.exists() and not profiler.work.parent.exists()


@pytest.mark.serial
@pytest.mark.usefixtures("cpu_profiling")
def test_no_process_of_an_evaluation_outlives_it_when_no_new_process_can_start(monkeypatch) -> None:
    """The machine refuses new processes (fork's EAGAIN, a full disk) after an evaluation took its worker, scout and
    profiling process: taking the profiler fails on its successor, and retiring the scout would start one too. Every
    process of the evaluation is still stopped and its folder removed (retiring never raises: a red-team review,
    2026-11-29, found the worker left running with the session unaware of it)."""
    monkeypatch.setattr(evaluate_module, "wants_scout", lambda request: True)  # as on a GPU for a Triton candidate
    code = (Path(__file__).resolve().parent / "forgers" / "honest_slow.py").read_text(encoding="utf-8")
    request = EvalRequest(
        candidate=Candidate(task="softmax", language="triton", code=code),
        device="cpu",
        timing=True,
        profile=True,
        timing_method="gpumode-benchmark",
    )
    with EvaluatorSession("cpu") as session:
        worker = session.idle
        assert worker is not None
        real, taken = session._start_worker, []

        def refusing(*, profiler: bool = False):  # noqa: ANN202 - the scout and the profiler start, then nothing
            if len(taken) >= 2:
                raise OSError(11, "Resource temporarily unavailable (fork)")
            taken.append(real(profiler=profiler))
            return taken[-1]

        monkeypatch.setattr(session, "_start_worker", refusing)
        with pytest.raises(OSError, match="Resource temporarily unavailable"):
            evaluate(request, session=session)
        for process in (worker, *taken):
            process.process.wait(timeout=30)
            assert process.exited() and not process.work.parent.exists()
