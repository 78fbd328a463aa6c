"""The sandboxed evaluator on the CPU (Triton interpreter) and, where there is one, a GPU.

Each evaluate() starts a worker process (about 2 s, mostly importing torch), so the cases here are chosen to cover
one verdict each rather than many variations.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Verdict
from ksearch.tasks.softmax import SoftmaxTask
from ksearch.tools.evaluator import (
    LOG_LIMIT,
    EvalRequest,
    EvaluatorSession,
    candidate_traceback,
    evaluate,
    trim_log,
    worker_environment,
)

DATA = Path(__file__).resolve().parents[1] / "tasks" / "data"
OK = (DATA / "softmax_triton_ok.py").read_text()
WRONG = (DATA / "softmax_triton_wrong.py").read_text()


def _run(code: str, session: EvaluatorSession | None = None, **request: object):
    """``session``: the module's CPU session (``cpu_session``), for tests that do not depend on the environment the
    session's processes were started with."""
    candidate = Candidate(task="softmax", language="triton", code=code)
    return evaluate(EvalRequest(candidate=candidate, **request), session=session)


def _wrap(body: str) -> str:
    """The correct kernel, with ``body`` run inside the entry point before it computes."""
    return (
        OK
        + "\n\n_correct = kernel\n\n\ndef kernel(x):\n"
        + "".join(f"    {l}\n" for l in body.splitlines())
        + ("    return _correct(x)\n")
    )


def _alive(pid: int) -> bool:
    """Running, not a zombie awaiting its reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (FileNotFoundError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_correct_kernel_passes_on_cpu_untimed(cpu_session: EvaluatorSession) -> None:
    started = time.monotonic()
    evaluation = _run(OK, session=cpu_session)
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert evaluation.timed is False and evaluation.score is None and evaluation.timings == []
    total = len(SoftmaxTask().test_configs("cpu"))
    assert evaluation.configs_passed == evaluation.configs_total == total
    assert evaluation.device == "cpu"
    assert {"python", "torch", "triton", "device_name", "harness"} <= evaluation.environment.keys()
    assert "not timed" in evaluation.summary()
    assert time.monotonic() - started < 60  # two processes (worker, checker); loaded CI machines are slow


def test_wrong_kernel_is_incorrect_with_the_error_located(cpu_session: EvaluatorSession) -> None:
    evaluation = _run(WRONG, session=cpu_session)
    assert evaluation.verdict == Verdict.INCORRECT
    mismatch = evaluation.mismatch
    assert mismatch is not None and mismatch.max_abs_error is not None and mismatch.max_abs_error > 1e-3
    assert len(mismatch.worst_index) == 2
    assert 0 < evaluation.configs_passed < evaluation.configs_total
    assert mismatch.config in evaluation.log and "max abs error" in evaluation.log


@pytest.mark.parametrize(
    ("code", "needle"),
    [
        ("def kernel(x)\n    return x\n", "SyntaxError"),
        ("import torch\n\ndef softmax(x):\n    return x\n", "no function 'kernel'"),
    ],
    ids=["syntax-error", "missing-entry-point"],
)
def test_bad_modules_are_compile_errors(code: str, needle: str, cpu_session: EvaluatorSession) -> None:
    evaluation = _run(code, session=cpu_session)
    assert evaluation.verdict == Verdict.COMPILE_ERROR
    assert needle in evaluation.log
    assert "ksearch-eval-" not in evaluation.log  # temp paths are scrubbed


def test_an_exception_is_a_runtime_error_with_the_candidates_traceback(cpu_session: EvaluatorSession) -> None:
    code = "def helper(x):\n    raise ValueError('boom in helper')\n\n\ndef kernel(x):\n    return helper(x)\n"
    evaluation = _run(code, session=cpu_session)
    assert evaluation.verdict == Verdict.RUNTIME_ERROR
    assert "ValueError: boom in helper" in evaluation.log
    assert 'File "candidate.py", line 2, in helper' in evaluation.log
    assert "ksearch/tools/evaluator/worker/main.py" not in evaluation.log  # harness frames are trimmed


@pytest.fixture
def without_static_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests exercise the runtime defences with code the static rules would (rightly) refuse to run."""
    monkeypatch.setattr("ksearch.tools.integrity.check_source", lambda code, **kw: None)


@pytest.mark.usefixtures("without_static_checks")
def test_an_endless_loop_times_out_and_leaves_no_process(tmp_path: Path, cpu_session: EvaluatorSession) -> None:
    """(The candidate cannot write outside its folder, nor see outside pids in a PID namespace: the test finds its
    processes by a marker on their command line instead.)"""
    marker = f"ksearch-test-{os.getpid()}-{time.monotonic_ns()}"
    code = _wrap(
        "import subprocess, sys\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', {marker!r}])\n"
        "print('spinning', flush=True)\n"
        "while True:\n"
        "    pass\n"
    ).replace("import torch\n", "import os\nimport torch\n", 1)
    started = time.monotonic()
    evaluation = _run(code, run_timeout_s=3, session=cpu_session)
    elapsed = time.monotonic() - started
    assert evaluation.verdict == Verdict.TIMEOUT
    assert elapsed < 3 + 12, elapsed  # the limit plus worker start-up, not the default 300 s
    assert "3 s" in evaluation.log and "spinning" in evaluation.log
    deadline = time.monotonic() + 5
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _marked(marker)


def _marked(marker: str) -> list[int]:
    """Live processes (not zombies) whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_hang_while_importing_hits_the_compile_limit(cpu_session: EvaluatorSession) -> None:
    if cpu_session.idle is not None:  # started, so that the 4 s limit is the candidate's import alone on a busy machine
        cpu_session.idle.wait_ready(time.monotonic() + 120)
    evaluation = _run("while True:\n    pass\n", compile_timeout_s=4, session=cpu_session)
    assert evaluation.verdict == Verdict.TIMEOUT
    assert "'load'" in evaluation.log


@pytest.mark.parametrize(
    ("body", "needle"),
    [("os._exit(3)", "exited with code 3"), ("os.kill(os.getpid(), 9)", "SIGKILL")],
    ids=["exit", "sigkill"],
)
@pytest.mark.usefixtures("without_static_checks")
def test_a_dying_worker_is_a_crash(body: str, needle: str, cpu_session: EvaluatorSession) -> None:
    evaluation = _run(f"import os\n\n\ndef kernel(x):\n    {body}\n", session=cpu_session)
    assert evaluation.verdict == Verdict.CRASHED
    assert needle in evaluation.log


@pytest.mark.usefixtures("without_static_checks")
def test_the_candidate_sees_no_secrets_and_a_private_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-test-secret")
    monkeypatch.setenv("LC_SECRET_THING", "lc-test-secret")
    code = _wrap(
        "import os\n"
        "leaked = [k for k, v in os.environ.items() if 'test-secret' in v or k.endswith(('_API_KEY', '_TOKEN'))]\n"
        "if leaked:\n"
        "    raise RuntimeError(f'saw secrets: {leaked}')\n"
        "cwd = os.getcwd()\n"
        "if os.environ['HOME'] != cwd or not os.environ['TRITON_CACHE_DIR'].startswith(cwd):\n"
        "    raise RuntimeError('home or cache outside the private dir')\n"
        "if os.environ.get('TRITON_INTERPRET') != '1':\n"
        "    raise RuntimeError('CPU evaluation must use the Triton interpreter')\n"
    )
    evaluation = _run(code)
    assert evaluation.verdict == Verdict.PASSED, evaluation.log


def test_modifying_the_input_is_rejected(cpu_session: EvaluatorSession) -> None:
    code = OK + "\n\n_correct = kernel\n\n\ndef kernel(x):\n    y = _correct(x)\n    x.mul_(0.5)\n    return y\n"
    evaluation = _run(code, session=cpu_session)
    assert evaluation.verdict == Verdict.REJECTED
    assert evaluation.rejection is not None and evaluation.rejection.rule == "input_mutation"
    assert "input 0" in evaluation.rejection.evidence


def test_a_language_the_task_does_not_accept_is_refused_without_running() -> None:
    candidate = Candidate(task="softmax", language="cuda", code="def kernel(x):\n    return x\n")
    evaluation = evaluate(EvalRequest(candidate=candidate))
    assert evaluation.verdict == Verdict.COMPILE_ERROR and "triton" in evaluation.log


def test_request_defaults_and_validation() -> None:
    candidate = Candidate(task="softmax", language="triton", code=OK)
    assert EvalRequest(candidate=candidate).timing is False
    cuda = EvalRequest(candidate=candidate, device="cuda:1")
    assert cuda.timing is True and cuda.task == "softmax"
    assert cuda.compile_timeout_s == 120 and cuda.run_timeout_s == 300
    with pytest.raises(ValidationError, match="unknown timing method"):
        EvalRequest(candidate=candidate, timing_method="fastest")
    with pytest.raises(ValidationError, match="cannot time"):
        EvalRequest(candidate=candidate, timing=True)
    with pytest.raises(ValidationError, match="device"):
        EvalRequest(candidate=candidate, device="gpu0")
    with pytest.raises(ValidationError, match="task"):
        EvalRequest(candidate=candidate, task="matmul")


def test_worker_environment_is_an_allowlist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("SOME_RANDOM_VAR", "y")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    env = worker_environment(tmp_path, "cpu")
    assert not {"ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY", "SOME_RANDOM_VAR"} & env.keys()
    assert env["LC_ALL"] == "C.UTF-8" and env["PATH"] == os.environ["PATH"]
    assert env["HOME"] == str(tmp_path) and env["TRITON_INTERPRET"] == "1"
    for name in ("TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "TMPDIR"):
        assert env[name].startswith(str(tmp_path))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "TRITON_INTERPRET" not in worker_environment(tmp_path, "cuda:0")


def test_logs_are_trimmed_to_the_candidates_frames_and_the_limit() -> None:
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/x/ksearch/tools/evaluator/worker/main.py", line 10, in call\n'
        "    output = fn(*inputs)\n"
        '  File "candidate.py", line 7, in kernel\n'
        "    return helper(x)\n"
        '  File "/x/site-packages/torch/functional.py", line 99, in helper\n'
        "    secret_internal_line()\n"
        "RuntimeError: shapes do not match\n"
    )
    frames = candidate_traceback(traceback)
    assert 'File "candidate.py", line 7' in frames and "return helper(x)" in frames
    assert "worker.py" not in frames and "secret_internal_line" not in frames
    assert frames.endswith("RuntimeError: shapes do not match")
    log = trim_log("runtime_error", traceback, stdout="spam\n" * 10_000, stderr="warn\n" * 10_000)
    assert len(log) <= LOG_LIMIT
    assert log.startswith("runtime_error") and "shapes do not match" in log and "spam" in log and "warn" in log


# -- reward hacks (each one evaluation; the static rules live in ksearch.tools.integrity) ---------------------------
def test_searching_the_process_for_the_answer_finds_nothing(cpu_session: EvaluatorSession) -> None:
    """The reference is computed only in the checker's process: a candidate that scans gc and sys.modules for a
    tensor shaped like the answer (other than its input) has nothing to find."""
    code = (
        "import gc, sys, torch\n\n\ndef kernel(x):\n"
        "    found = [o for o in gc.get_objects() if type(o) is torch.Tensor and o.shape == x.shape and o is not x\n"
        "             and not torch.equal(o, x)]\n"
        "    for module in list(sys.modules.values()):\n"
        "        for value in list(vars(module).values()) if hasattr(module, '__dict__') else []:\n"
        "            if type(value) is torch.Tensor and value.shape == x.shape and not torch.equal(value, x):\n"
        "                found.append(value)\n"
        "    return found[0].clone() if found else x.clone()\n"
    )
    evaluation = _run(code, session=cpu_session)
    assert evaluation.verdict in (Verdict.INCORRECT, Verdict.REJECTED), evaluation.log


def test_a_thread_that_finishes_the_output_later_is_rejected(cpu_session: EvaluatorSession) -> None:
    code = _wrap(
        "import threading, time\n"
        "y = torch.empty_like(x)\n"
        "def finish():\n"
        "    time.sleep(1.0)\n"
        "    y.copy_(_correct(x))\n"
        "threading.Thread(target=finish).start()\n"
        "return y\n"
    )
    evaluation = _run(code, session=cpu_session)
    assert evaluation.verdict == Verdict.REJECTED, evaluation.log
    assert evaluation.rejection is not None and evaluation.rejection.rule == "thread_injection"


def test_the_thread_rule_is_off_only_for_the_harness_own_baselines(tmp_path: Path) -> None:
    """torch.compile (our KernelBench baseline) keeps idle compile-worker threads: the worker's guard lets threads
    live only when the request says the code is the harness's own baseline, never for a candidate."""
    import threading

    from ksearch.tasks.registry import resolve_task
    from ksearch.tools.evaluator import build_worker_request
    from ksearch.tools.evaluator.worker.main import CandidateFailure, Guard

    strict, lenient = Guard(), Guard(allow_threads=True)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="InductorSubproc", daemon=True)
    thread.start()
    try:
        with pytest.raises(CandidateFailure) as failure:
            strict.verify("after the call")
        assert failure.value.rejection is not None and failure.value.rejection.rule == "thread_injection"
        lenient.verify("after the call")
    finally:
        stop.set()
        thread.join()
    task = resolve_task("softmax")
    for flag in (False, True):
        request = EvalRequest(candidate=Candidate(task="softmax", language="triton", code=OK), harness_baseline=flag)
        built = build_worker_request(request, tmp_path, tmp_path / "result.json", task, "robust", salt=1)
        assert built.allow_threads is flag


LIBRARY_POOL = """
import concurrent.futures, threading
_pools = []
def start_pool():
    pool = concurrent.futures.ThreadPoolExecutor(2)
    _pools.append(pool)
    pool.submit(lambda: None).result()
    return pool
def start_thread(stop):
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    return t
"""


def _module_in(folder: Path, name: str):
    import importlib.util

    path = folder / f"{name}.py"
    path.write_text(LIBRARY_POOL, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_threads_torch_starts_for_itself_are_allowed_and_the_candidates_are_not(tmp_path: Path) -> None:
    """torch.compile keeps idle compile-pool threads (real leaderboard kernels use it for small shapes): a thread whose
    starter, past the standard library's thread and executor machinery, is torch's or Triton's own code is the
    library's. The same pool or thread started from the candidate's code is still thread injection."""
    import threading

    from ksearch.tools.evaluator.worker.guard import ThreadOrigins
    from ksearch.tools.evaluator.worker.main import CandidateFailure, Guard

    library, candidate = tmp_path / "site" / "torch", tmp_path / "work"
    library.mkdir(parents=True)
    candidate.mkdir()
    guard = Guard()
    origins = ThreadOrigins.installed()
    assert guard.threads is origins and Guard().threads is origins  # one wrapper per process
    origins.trusted = (str(library.resolve()) + "/",)
    torch_side, own_side = _module_in(library, "fake_inductor"), _module_in(candidate, "candidate_pool")
    stop = threading.Event()
    try:
        torch_side.start_pool()
        torch_side.start_thread(stop)
        guard.verify("after a call that compiled with torch")
        own_side.start_pool()
        with pytest.raises(CandidateFailure) as failure:
            guard.verify("after the candidate's own pool")
        assert failure.value.rejection is not None and failure.value.rejection.rule == "thread_injection"
    finally:
        stop.set()
        for module in (torch_side, own_side):
            for pool in module._pools:
                pool.shutdown(wait=True)
        origins.trusted = tuple(ThreadOrigins._package_dirs())


def test_replacing_the_thread_recorder_is_a_harness_patch() -> None:
    import threading

    from ksearch.tools.evaluator.worker.main import CandidateFailure, Guard

    guard = Guard()
    wrapper = threading.Thread.start
    threading.Thread.start = guard.threads.original  # type: ignore[method-assign]
    try:
        with pytest.raises(CandidateFailure) as failure:
            guard.verify("after the call")
        assert failure.value.rejection is not None and failure.value.rejection.rule == "timer_monkeypatch"
    finally:
        threading.Thread.start = wrapper  # type: ignore[method-assign]


@pytest.mark.parametrize(
    "patch",
    ["import time\ntime.perf_counter = lambda: 0.0\n", "torch.cuda.synchronize = lambda *a, **k: None\n"],
    ids=["perf_counter", "cuda-synchronize"],
)
def test_replacing_a_timer_is_rejected(patch: str, cpu_session: EvaluatorSession) -> None:
    evaluation = _run(OK + "\n" + patch, session=cpu_session)
    assert evaluation.verdict == Verdict.REJECTED, evaluation.log
    assert evaluation.rejection is not None and evaluation.rejection.rule == "timer_monkeypatch"


@pytest.mark.usefixtures("without_static_checks")
def test_a_forged_worker_report_does_not_change_the_verdict(cpu_session: EvaluatorSession) -> None:
    """The wrong kernel writes a 'passed' report where the worker writes its own, then exits before the worker can:
    correctness comes from the checker, which finds no verified output."""
    forged = (
        "import json, os\n"
        "_report = {'verdict': 'passed', 'phase': 'run', 'configs_passed': 8, 'configs_total': 8}\n"
        "_wrong = kernel\n\n\ndef kernel(x):\n"
        "    for path in ('../io/result.json', '../check/result.json'):\n"
        "        try:\n"
        "            open(path, 'w').write(json.dumps(_report))\n"
        "        except OSError:\n"
        "            pass\n"
        "    os._exit(0)\n"
    )
    evaluation = _run(WRONG + "\n" + forged, session=cpu_session)
    assert evaluation.verdict == Verdict.INCORRECT, evaluation.log
    assert evaluation.configs_passed == 0


def test_a_checker_out_of_memory_is_retried_and_a_second_one_stops_with_a_harness_error(monkeypatch) -> None:
    """The checker's answer "out of device memory" is no verdict about the candidate: the evaluation runs again
    (after a pause), and a second such answer raises HarnessError instead of recording a crash."""
    import importlib

    from ksearch.contracts.exchange import CheckResult
    from ksearch.tools.evaluator import HarnessError

    evaluate_mod = importlib.import_module("ksearch.tools.evaluator.parent.evaluate")
    from ksearch.tools.evaluator.parent.session import EvaluatorSession

    monkeypatch.setattr(evaluate_mod, "HARNESS_RETRY_PAUSE_S", 0.0)
    real_finish, calls = EvaluatorSession.finish, []

    def finish(self: EvaluatorSession, evaluation: str, *, timed: bool, timeout: float) -> CheckResult:
        result = real_finish(self, evaluation, timed=timed, timeout=timeout)
        calls.append(result.verdict)
        if len(calls) == 1 or failing:
            return CheckResult(verdict=Verdict.CRASHED, harness_error="checker ran out of device memory (simulated)")
        return result

    monkeypatch.setattr(EvaluatorSession, "finish", finish)
    request = EvalRequest(candidate=Candidate(task="softmax", language="triton", code=OK))
    with EvaluatorSession("cpu", prestart=False) as session:
        failing = False
        assert not session.low_memory
        evaluation = evaluate(request, session=session)
        assert evaluation.verdict == Verdict.PASSED, evaluation.log
        assert calls == [Verdict.PASSED, Verdict.PASSED]
        # the second run, and every later evaluation of the session, was in low-memory mode
        assert session.low_memory and evaluation.environment["memory_mode"] == "low"
        failing = True
        with pytest.raises(HarnessError, match="even in low-memory mode"):
            evaluate(request, session=session)


def test_a_candidate_out_of_device_memory_is_judged_in_low_memory_mode(monkeypatch) -> None:
    """A candidate that runs out of device memory beside the checker's pipelined references is run again in
    low-memory mode, and that run's verdict stands: a kernel that fits the GPU on its own is not failed for the
    harness's footprint, and one that never fits still fails."""
    monkeypatch.delenv("KSEARCH_LOW_MEMORY", raising=False)
    oom = _wrap('raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")')
    from ksearch.tools.evaluator.parent.session import EvaluatorSession

    with EvaluatorSession("cpu", prestart=False) as session:
        evaluation = evaluate(
            EvalRequest(candidate=Candidate(task="softmax", language="triton", code=oom)), session=session
        )
        assert evaluation.verdict == Verdict.RUNTIME_ERROR and "CUDA out of memory" in evaluation.log
        assert session.low_memory and evaluation.environment["memory_mode"] == "low"


def test_low_memory_mode_can_be_asked_for(monkeypatch) -> None:
    monkeypatch.setenv("KSEARCH_LOW_MEMORY", "1")
    evaluation = _run(OK)
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert evaluation.environment["memory_mode"] == "low"


def test_an_unsupported_timing_method_is_a_clear_error() -> None:
    from ksearch.tools.timing import TimingError

    class _Task:  # evaluate() resolves the task by name; softmax supports every method, so test the resolution
        name, timing_methods, default_timing_method = "x", ("robust",), "robust"

    from ksearch.tools.timing import resolve_method

    with pytest.raises(TimingError, match="does not support"):
        resolve_method(_Task(), "flashinfer")


@pytest.mark.gpu
def test_correct_kernel_is_timed_on_cuda() -> None:
    evaluation = _run(OK, device="cuda")
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert evaluation.timed and evaluation.score is not None and evaluation.score > 0
    assert evaluation.latency_ms is not None and evaluation.latency_ms > 0
    expected = [c.name for c in SoftmaxTask().benchmark_configs("cuda")]
    assert [t.config for t in evaluation.timings] == expected
    for timing in evaluation.timings:
        assert timing.median_ms > 0 and timing.samples >= 10 and timing.stdev_ms >= 0
        assert timing.method == "robust" and timing.headline == "median"
    assert evaluation.environment["timing_method"] == "robust"
    assert evaluation.device != "cuda" and evaluation.environment["device_name"] == evaluation.device
    # each process's peak device memory is reported, so a user can tell what the GPU must have free
    assert 0 < int(evaluation.environment["worker_peak_gpu_mib"]) < 80 * 1024
    assert 0 < int(evaluation.environment["checker_peak_gpu_mib"]) < 80 * 1024


@pytest.mark.gpu
def test_shared_host_memory_staging_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where CUDA IPC is unavailable the checker shares a host-memory buffer: outputs staged there are compared with
    the candidate's on its device (the deferred-work check) and judged as usual."""
    monkeypatch.setenv("KSEARCH_STAGING", "shm")
    evaluation = _run(OK, device="cuda", timing_method="gpumode-benchmark")
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert evaluation.timed and all(t.method == "gpumode-benchmark" for t in evaluation.timings)


@pytest.mark.gpu
def test_wrong_kernel_is_incorrect_on_cuda() -> None:
    evaluation = _run(WRONG, device="cuda")
    assert evaluation.verdict == Verdict.INCORRECT and evaluation.score is None


@pytest.mark.gpu
def test_gpumode_method_on_cuda() -> None:
    evaluation = _run(OK, device="cuda", timing_method="gpumode")
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    for timing in evaluation.timings:
        assert timing.method == "gpumode" and timing.headline == "mean" and 3 <= timing.samples <= 100


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["gpumode-benchmark", "flashinfer"])
def test_other_methods_on_cuda(method: str) -> None:
    evaluation = _run(OK, device="cuda", timing_method=method)
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert all(t.method == method for t in evaluation.timings)
    if method == "flashinfer":  # 150 windows, the audited ones left out of the score
        assert all(t.samples + t.windows_left_out == 150 and t.samples > 0 for t in evaluation.timings)


CACHING = OK + (
    "\n\n_cache = {}\n_correct = kernel\n\n\ndef kernel(x):\n"
    "    key = (x.shape, x.data_ptr())\n"
    "    if key not in _cache:\n"
    "        _cache[key] = _correct(x)\n"
    "    return _cache[key]\n"
)


@pytest.mark.gpu
def test_output_replay_fails_the_gpumode_recheck() -> None:
    """Keyed on the shape: right only for the inputs seen first, and gpumode never repeats inputs."""
    evaluation = _run(CACHING.replace("x.data_ptr()", "0"), device="cuda", timing_method="gpumode")
    assert evaluation.verdict == Verdict.INCORRECT, evaluation.log


@pytest.mark.gpu
@pytest.mark.usefixtures("without_static_checks")
def test_output_replay_is_below_the_physics_floor_under_robust() -> None:
    """Keyed on the pointer: freed input memory is reused for new content, so the replay is caught as incorrect
    (measured on an H200); a replay that survived would have to beat the physics floor and be rejected there."""
    evaluation = _run(CACHING, device="cuda")
    assert evaluation.verdict in (Verdict.INCORRECT, Verdict.REJECTED), evaluation.log
    if evaluation.verdict == Verdict.REJECTED:
        assert evaluation.rejection is not None and evaluation.rejection.rule == "physics_floor"


@pytest.mark.gpu
@pytest.mark.usefixtures("without_static_checks")
def test_unjoined_side_stream_work_is_rejected() -> None:
    code = _wrap(
        "y = torch.empty_like(x)\n"
        "side = torch.cuda.Stream()\n"
        "side.wait_stream(torch.cuda.current_stream())\n"
        "with torch.cuda.stream(side):\n"
        "    torch.cuda._sleep(50_000_000)\n"
        "    y.copy_(_correct(x))\n"
        "return y\n"
    )
    evaluation = _run(code, device="cuda")
    assert evaluation.verdict == Verdict.REJECTED, evaluation.log
    assert evaluation.rejection is not None and evaluation.rejection.rule == "deferred_work"


@pytest.mark.gpu
def test_compare_a_kernel_with_itself_is_not_improved() -> None:
    from ksearch.tools.evaluator import compare

    request = EvalRequest(candidate=Candidate(task="softmax", language="triton", code=OK), device="cuda")
    result = compare(request, request, rounds=5)
    assert not result.improved and result.ci_low <= 1.0
    assert 0.8 < result.speedup < 1.25 and len(result.per_config) == len(SoftmaxTask().benchmark_configs("cuda"))


def test_compare_refuses_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from ksearch.errors import UserError

    monkeypatch.delenv("KSEARCH_CPU_TIMING", raising=False)
    from ksearch.tools.evaluator import compare

    request = EvalRequest(candidate=Candidate(task="softmax", language="triton", code=OK))
    with pytest.raises(UserError, match="CPU"):
        compare(request, request)


# -- ksearch eval ------------------------------------------------------------------------------------------------
def test_cli_eval_json_passes_and_failures_exit_3(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from ksearch.cli import app
    from ksearch.contracts.evaluation import Evaluation

    runner = CliRunner()
    workspace = ["--workspace", str(tmp_path / "ws")]
    result = runner.invoke(
        app, [*workspace, "eval", "softmax", str(DATA / "softmax_triton_ok.py"), "--device", "cpu", "--json"]
    )
    assert result.exit_code == 0, result.output
    evaluation = Evaluation.model_validate(json.loads(result.stdout))
    assert evaluation.passed and evaluation.configs_passed == evaluation.configs_total
    broken = tmp_path / "broken.py"
    broken.write_text("def kernel(x)\n    return x\n")
    result = runner.invoke(app, [*workspace, "eval", "softmax", str(broken), "--device", "cpu"])
    assert result.exit_code == 3 and "compile_error" in result.stdout
    result = runner.invoke(
        app, [*workspace, "eval", "softmax", str(broken), "--device", "cpu", "--timing-method", "nope"]
    )
    assert result.exit_code == 2 and "unknown timing method" in result.output
