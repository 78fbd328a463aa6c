"""Evaluate one candidate outside the caller's process: the trust boundary between the agent and untrusted code.

An evaluation is a sequence of processes, each started as ``python -P -m ...`` in its own session (process group),
with an environment rebuilt from an allowlist so API keys never reach it, killed as a group at its time limit, and
dying with the parent (PDEATHSIG):

1. candidate worker, pass ``correctness`` (``ksearch.tools.worker``): every test config once, outputs saved;
2. checker (``ksearch.tools.checker``, trusted, never imports the candidate): regenerates the inputs, computes the
   reference and compares; only its verdict can say "correct";
3. on a GPU and only when correct: candidate worker, pass ``timing`` (same private dir and build caches);
4. checker again, on the timed outputs the worker kept.

The worker and the checker share a per-evaluation secret salt mixed into every seed (see ``ksearch.tools.checker``).
The candidate's processes get a private temp dir as cwd and HOME with their own Triton and torch-extension caches;
the checker runs in a separate dir and reports through its stdout pipe, which the candidate never held. The parent
computes the timing statistics, the physics floor and the score itself. Knows nothing about the graph or the agent.
"""

from __future__ import annotations

import math
import os
import platform
import re
import secrets
import select
import signal
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

import ksearch
from ksearch.errors import KsearchError, UserError
from ksearch.tasks.base import Task
from ksearch.tasks.registry import resolve_task
from ksearch.tools import integrity
from ksearch.tools import timing as timing_mod
from ksearch.tools.candidate import Candidate
from ksearch.tools.checker import CheckRequest, CheckResult
from ksearch.tools.evaluation import Evaluation, Rejection, Timing, Verdict
from ksearch.tools.worker import CompareSamples, WorkerRequest, WorkerResult

HARNESS_VERSION = "ksearch-evaluator-2"
"""Part of the evaluation cache key: bump when a change could alter verdicts or timings."""
LOG_LIMIT = 4000
CANDIDATE_FILE = "candidate.py"
CHALLENGER_FILE = "challenger.py"

_ENV_ALLOWED = frozenset(
    {"PATH", "LANG", "LANGUAGE", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
     "TRITON_INTERPRET", "PYTHONPATH", "CC", "CXX", "TZ"}
)  # fmt: skip
_ENV_ALLOWED_PREFIXES = ("LC_",)
_ENV_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
"""Belt and braces: even an allowlisted name is dropped if it looks like a secret."""
_POLL_S = 0.05
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


class EvalRequest(BaseModel):
    """One candidate on one device. ``task`` defaults to the candidate's; ``timing`` to True except on CPU."""

    model_config = ConfigDict(extra="forbid")

    candidate: Candidate
    task: str = ""
    device: str = "cpu"
    """'cpu' (Triton interpreter, correctness only), 'cuda' or 'cuda:N'."""
    compile_timeout_s: float = Field(default=120.0, gt=0)
    """From a worker's start until it begins running configs: interpreter start-up, imports, module import."""
    run_timeout_s: float = Field(default=300.0, gt=0)
    """Per worker pass, from its first config to its end (Triton's JIT compiles at the first call)."""
    timing: bool = False
    timing_method: str | None = None
    """A method of ``ksearch.tools.timing`` the task supports; None for the task's default."""
    seed_salt: int | None = None
    """None (the default): a fresh secret salt per evaluation. Set only to reproduce one evaluation exactly."""
    harness_baseline: bool = False
    """The candidate is ksearch's own baseline (a task's reference, eager or ``torch.compile``d), not untrusted code:
    the thread rule is off, since torch.compile keeps compile-worker threads alive. Never set for LLM candidates."""

    @model_validator(mode="before")
    @classmethod
    def _default_timing(cls, data: Any) -> Any:
        if isinstance(data, dict) and "timing" not in data:
            data = {**data, "timing": data.get("device", "cpu") != "cpu"}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> EvalRequest:
        if not _DEVICE.match(self.device):
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', not {self.device!r}")
        if self.device == "cpu" and self.timing:
            raise ValueError("the CPU (Triton interpreter) cannot time kernels: use timing=False")
        if self.timing_method is not None and self.timing_method not in timing_mod.method_names():
            raise ValueError(
                f"unknown timing method {self.timing_method!r}; known methods: {', '.join(timing_mod.method_names())}"
            )
        if not self.task:
            self.task = self.candidate.task
        elif self.task != self.candidate.task:
            raise ValueError(f"request is for task {self.task!r} but the candidate is for {self.candidate.task!r}")
        return self


class _Outcome(BaseModel):
    """What the parent saw of one worker process."""

    result: WorkerResult | None = None
    timed_out: bool = False
    phase: str = "start"
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    unreadable: str = ""
    wall_s: float = 0.0


class ComparisonError(KsearchError):
    """compare() could not time both candidates (a failure of one of them, or of the device)."""


class ConfigComparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: str
    incumbent_median_ms: float
    challenger_median_ms: float
    ratio: float
    """incumbent / challenger (geometric mean over rounds): above 1 means the challenger is faster."""
    ci_low: float
    ci_high: float


class Comparison(BaseModel):
    """A paired, interleaved timing of two correct candidates on the same GPU."""

    model_config = ConfigDict(extra="forbid")

    per_config: list[ConfigComparison]
    speedup: float
    """Geometric mean over configs of incumbent / challenger."""
    ci_low: float
    ci_high: float
    improved: bool
    """The whole 95 % confidence interval of the speedup is above 1."""
    rounds: int = 0
    device: str = ""
    method: str = "paired robust blocks, A B / B A interleaved, t-interval over per-round log speedups"


# -- evaluate -------------------------------------------------------------------------------------------------------
def evaluate(request: EvalRequest) -> Evaluation:
    """Run the candidate sandboxed and return its typed verdict. Never raises for the candidate's faults; raises
    ``TimingError`` for a timing method the task does not support."""
    started = time.monotonic()
    task = resolve_task(request.task)
    method = timing_mod.resolve_method(task, request.timing_method)
    if str(request.candidate.language) not in task.languages:
        return Evaluation(
            verdict=Verdict.COMPILE_ERROR,
            device=request.device,
            configs_total=len(task.test_configs(request.device)),
            log=f"task {task.name!r} accepts {', '.join(task.languages)} candidates, not {request.candidate.language}",
            environment=_parent_environment(),
        )
    rejection = integrity.check_source(request.candidate.code, task_name=task.name)  # static rules: no worker
    if rejection is not None:
        return Evaluation(
            verdict=Verdict.REJECTED,
            device=request.device,
            configs_total=len(task.test_configs(request.device)),
            rejection=rejection,
            log=f"rejected ({rejection.rule}): {rejection.evidence}",
            environment=_parent_environment(),
        )
    salt = request.seed_salt if request.seed_salt is not None else secrets.randbits(62)
    with tempfile.TemporaryDirectory(prefix="ksearch-eval-") as root_text:
        root = Path(root_text)
        scrub = (str(root / "work") + os.sep, str(root / "io") + os.sep, str(root))
        evaluation = _evaluate_in(root, request, task, method, salt, scrub)
    return evaluation.model_copy(update={"duration_s": round(time.monotonic() - started, 3)})


def _evaluate_in(root: Path, request: EvalRequest, task: Task, method: str, salt: int, scrub: tuple[str, ...]) -> Evaluation:
    """Correctness pass, check, then (GPU, correct only) timing pass and recheck.

    Each checker is started alongside its worker pass and waits on its stdin: its start-up (torch, CUDA) overlaps
    the worker's run, and it reads the worker's files only after the parent has killed the worker's process group.
    """
    work, io = _prepare_dirs(root)
    (work / CANDIDATE_FILE).write_text(request.candidate.code, encoding="utf-8")
    stages = _Stages()

    checker = _start_checker(root, request, salt, "test", io / "result.json", io / "out-correctness")
    with stages.time("correctness"):
        first = _run_worker(root, request, _worker_request(request, work, io, "correctness", salt, task, method))
    if _worker_failed(first):
        _abort_checker(checker)
        return stages.stamp(_to_evaluation(request, task, first, scrub))
    with stages.time("check"):
        check = _finish_checker(checker, request)
    if check.verdict != Verdict.PASSED or not request.timing:
        return stages.stamp(_checked_evaluation(request, task, first, check, scrub))

    checker = _start_checker(root, request, salt, "bench", io / "result.json", io / "out-timing")
    with stages.time("timing"):
        second = _run_worker(root, request, _worker_request(request, work, io, "timing", salt, task, method))
    counts = {"configs_passed": check.configs_passed, "configs_total": check.configs_total}
    if _worker_failed(second):
        _abort_checker(checker)
        return stages.stamp(_to_evaluation(request, task, second, scrub).model_copy(update=counts))
    with stages.time("recheck"):
        recheck = _finish_checker(checker, request)
    if recheck.verdict != Verdict.PASSED:
        return stages.stamp(_checked_evaluation(request, task, second, recheck, scrub).model_copy(update=counts))
    return stages.stamp(_timed_evaluation(request, task, method, first, second, check, recheck, scrub))


class _Stages:
    """Wall time of each stage, reported in the evaluation's environment (so slow stages are visible to users)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def time(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(time.monotonic() - started, 2)

    def stamp(self, evaluation: Evaluation) -> Evaluation:
        text = " ".join(f"{k}={v:g}s" for k, v in self.seconds.items())
        return evaluation.model_copy(update={"environment": {**evaluation.environment, "stage_seconds": text}})


def _prepare_dirs(root: Path) -> tuple[Path, Path]:
    work, io = root / "work", root / "io"
    for folder in (work, work / "tmp", io, io / "out-correctness", io / "out-timing", root / "check"):
        folder.mkdir(mode=0o700, exist_ok=True)
    return work, io


def _worker_request(
    request: EvalRequest, work: Path, io: Path, mode: str, salt: int, task: Task, method: str
) -> WorkerRequest:
    return WorkerRequest(
        task=request.task,
        device=request.device,
        entry_point=request.candidate.entry_point,
        candidate_path=str(work / CANDIDATE_FILE),
        result_path=str(io / "result.json"),
        timing=mode == "timing",
        mode=mode,  # type: ignore[arg-type]
        salt=salt,
        outputs_dir=str(io / f"out-{mode}"),
        timing_method=method,
        flush_l2=bool(getattr(task, "flush_l2", True)),
        allow_threads=request.harness_baseline,
    )


def _worker_failed(outcome: _Outcome) -> bool:
    return outcome.timed_out or outcome.result is None or outcome.result.verdict != Verdict.PASSED


# -- running the worker ---------------------------------------------------------------------------------------------
def _run_worker(root: Path, request: EvalRequest, worker_request: WorkerRequest) -> _Outcome:
    """One candidate process: wait with the compile limit until it starts running, then the run limit; kill its group."""
    work, io = root / "work", root / "io"
    for stale in (io / "result.json", io / "result.json.partial"):
        stale.unlink(missing_ok=True)
    status_r, status_w = os.pipe()
    worker_request = worker_request.model_copy(update={"status_fd": status_w})
    (io / "request.json").write_text(worker_request.model_dump_json(), encoding="utf-8")
    started = time.monotonic()
    try:
        with open(io / "stdout.txt", "wb") as out, open(io / "stderr.txt", "wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-P", "-m", "ksearch.tools.worker", str(io / "request.json")],
                cwd=work,
                env={**worker_environment(work, request.device), "KSEARCH_PARENT_PID": str(os.getpid())},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                pass_fds=(status_w,),
            )
        os.close(status_w)
        status_w = -1
        try:
            timed_out, phase = _wait(process, status_r, request)
        finally:
            _kill_group(process.pid)
            process.wait()
    finally:
        os.close(status_r)
        if status_w >= 0:
            os.close(status_w)
    outcome = _Outcome(
        timed_out=timed_out,
        phase=phase,
        returncode=process.returncode,
        stdout=_read_tail(io / "stdout.txt"),
        stderr=_read_tail(io / "stderr.txt"),
        wall_s=time.monotonic() - started,
    )
    if not timed_out and (io / "result.json").exists():
        try:
            outcome.result = WorkerResult.model_validate_json((io / "result.json").read_text(encoding="utf-8"))
        except (ValidationError, OSError, UnicodeDecodeError) as exc:
            outcome.unreadable = f"{type(exc).__name__}: {exc}"[:500]
    return outcome


def _start_checker(
    root: Path, request: EvalRequest, salt: int, kind: str, worker_result: Path, outputs: Path
) -> subprocess.Popen[bytes]:
    """Start the trusted checker now; it loads torch and the task, then waits for ``go`` on its stdin."""
    folder = root / "check"
    check_request = CheckRequest(
        task=request.task,
        device=request.device,
        salt=salt,
        kind=kind,  # type: ignore[arg-type]
        worker_result_path=str(worker_result),
        outputs_dir=str(outputs),
    )
    request_path = folder / f"request-{kind}.json"
    request_path.write_text(check_request.model_dump_json(), encoding="utf-8")
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "ksearch.tools.checker", str(request_path)],
        cwd=folder,
        env={**worker_environment(folder, request.device), "KSEARCH_PARENT_PID": str(os.getpid())},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _abort_checker(process: subprocess.Popen[bytes]) -> None:
    _kill_group(process.pid)
    process.communicate()


def _finish_checker(process: subprocess.Popen[bytes], request: EvalRequest) -> CheckResult:
    """Tell the checker the worker is dead and its files are final; its result comes back on its stdout."""
    limit = request.compile_timeout_s + request.run_timeout_s
    try:
        stdout, stderr = process.communicate(input=b"go\n", timeout=limit)
    except subprocess.TimeoutExpired:
        _kill_group(process.pid)
        process.communicate()
        return CheckResult(verdict=Verdict.TIMEOUT, error=f"the checker exceeded {limit:g} s (reference too slow?)")
    finally:
        _kill_group(process.pid)
    try:
        return CheckResult.model_validate_json(stdout)
    except ValidationError:
        tail = stderr.decode(errors="replace")[-2000:]
        return CheckResult(verdict=Verdict.CRASHED, error=f"the checker exited with code {process.returncode}:\n{tail}")


def _wait(process: subprocess.Popen[bytes], status_r: int, request: EvalRequest) -> tuple[bool, str]:
    """Wait for the worker to exit without reaping it (so its group id stays ours to kill); (timed_out, phase)."""
    os.set_blocking(status_r, False)
    deadline = time.monotonic() + request.compile_timeout_s
    phase, pending, readers = "start", b"", [status_r]
    while True:
        if readers:
            ready, _, _ = select.select(readers, [], [], _POLL_S)
            if ready:
                chunk = _read_nonblocking(status_r)
                if chunk == b"":
                    readers = []
                pending += chunk or b""
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    new_phase = line.decode(errors="replace").strip()
                    if new_phase in ("run", "timing") and phase in ("start", "load"):
                        deadline = time.monotonic() + request.run_timeout_s
                    phase = new_phase or phase
        else:
            time.sleep(_POLL_S)
        if os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return False, phase
        if time.monotonic() > deadline:
            return True, phase
def _read_nonblocking(fd: int) -> bytes | None:
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return None


def _kill_group(pid: int) -> None:
    """SIGKILL the worker's whole process group: the worker and anything the candidate started."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def worker_environment(work: Path, device: str) -> dict[str, str]:
    """The worker's environment: an allowlist of the caller's, no secrets, and every cache inside ``work``."""
    env = {
        name: value
        for name, value in os.environ.items()
        if (name in _ENV_ALLOWED or name.startswith(_ENV_ALLOWED_PREFIXES)) and not _ENV_SECRET.search(name)
    }
    package_root = str(Path(ksearch.__file__).resolve().parent.parent)
    if package_root not in _site_dirs():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    env.update(
        HOME=str(work),
        TMPDIR=str(work / "tmp"),
        XDG_CACHE_HOME=str(work / ".cache"),
        TRITON_HOME=str(work),
        TRITON_CACHE_DIR=str(work / ".triton" / "cache"),
        TORCH_EXTENSIONS_DIR=str(work / "torch_extensions"),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONNOUSERSITE="1",
    )
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)  # interpreted GPU timings would be meaningless scores
    return env


def _site_dirs() -> set[str]:
    dirs = set(site.getsitepackages()) if hasattr(site, "getsitepackages") else set()
    return {str(Path(d).resolve()) for d in dirs}


def _read_tail(path: Path, limit: int = 64 * 1024) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


# -- building the Evaluation ----------------------------------------------------------------------------------------
def _to_evaluation(request: EvalRequest, task: Task, outcome: _Outcome, scrub: tuple[str, ...]) -> Evaluation:
    """The verdict of a worker that failed on its own (timeout, crash, compile or runtime error, a broken rule)."""
    environment = _parent_environment()
    result = outcome.result
    if result is not None:
        environment.update(result.environment)
    device = environment.get("device_name", request.device) if result is not None else request.device
    if outcome.timed_out:
        limit = request.run_timeout_s if outcome.phase in ("run", "timing") else request.compile_timeout_s
        verdict, headline, error = Verdict.TIMEOUT, f"timeout: exceeded {limit:g} s in phase {outcome.phase!r}", ""
    elif result is None:
        verdict, headline, error = Verdict.CRASHED, _crash_headline(outcome), ""
    elif result.verdict == Verdict.PASSED:  # only reached for a timing pass that reported no samples
        verdict, headline, error = Verdict.CRASHED, "crashed: the worker reported no timing samples", ""
    else:
        verdict, headline = result.verdict, _headline(result)
        error = "" if result.mismatch or result.rejection else result.error  # already in the headline
    show_output = verdict != Verdict.PASSED
    return Evaluation(
        verdict=verdict,
        device=device,
        configs_passed=result.configs_passed if result else 0,
        configs_total=result.configs_total if result else len(task.test_configs(request.device)),
        mismatch=result.mismatch if result else None,
        rejection=result.rejection if result else None,
        log=trim_log(
            headline,
            error,
            stdout=outcome.stdout if show_output else "",
            stderr=outcome.stderr if show_output else "",
            scrub=scrub,
        ),
        environment=environment,
    )


def _checked_evaluation(
    request: EvalRequest, task: Task, outcome: _Outcome, check: CheckResult, scrub: tuple[str, ...]
) -> Evaluation:
    """The checker's verdict on a worker that ran to its end (untimed pass, or a failed recheck)."""
    environment = {**_parent_environment(), **(outcome.result.environment if outcome.result else {}), **check.environment}
    verdict = check.verdict
    if verdict == Verdict.PASSED:
        headline = ""
    elif check.rejection is not None:
        headline = f"rejected ({check.rejection.rule}): {check.rejection.evidence}"
    elif check.mismatch is not None:
        headline = f"incorrect: {check.mismatch.message}"
    else:
        headline = f"{verdict.value}: {check.error}"
    show = verdict != Verdict.PASSED
    return Evaluation(
        verdict=verdict,
        device=environment.get("device_name", request.device),
        configs_passed=check.configs_passed,
        configs_total=check.configs_total,
        mismatch=check.mismatch,
        rejection=check.rejection,
        log=trim_log(headline, "", stdout=outcome.stdout if show else "", stderr=outcome.stderr if show else "",
                     scrub=scrub),  # fmt: skip
        environment=environment,
    )


def _timed_evaluation(
    request: EvalRequest,
    task: Task,
    method: str,
    first: _Outcome,
    second: _Outcome,
    check: CheckResult,
    recheck: CheckResult,
    scrub: tuple[str, ...],
) -> Evaluation:
    assert second.result is not None
    environment = {**_parent_environment(), **second.result.environment, **recheck.environment,
                   "timing_method": method}  # fmt: skip
    device = environment.get("device_name", request.device)
    base = Evaluation(
        verdict=Verdict.PASSED, device=device, configs_passed=check.configs_passed,
        configs_total=check.configs_total, environment=environment,
    )  # fmt: skip
    timings, problem = timings_from_samples(task, method, second.result, second.wall_s, request.device)
    if problem:
        return base.model_copy(update={"verdict": Verdict.CRASHED, "log": trim_log(f"crashed: {problem}", "", scrub=scrub)})
    configs = {c.name: c for c in task.benchmark_configs(request.device)}
    notes: list[str] = []
    for timing in timings:
        flops, bytes_moved = task.flops_and_bytes(configs[timing.config])
        floor = timing_mod.physics_floor(
            timing.median_ms, flops, bytes_moved, device, getattr(task, "roofline_compute_dtype", "bf16")
        )
        if floor.violated:
            evidence = f"config {timing.config}: {floor.evidence}"
            return base.model_copy(
                update={
                    "verdict": Verdict.REJECTED,
                    "rejection": Rejection(rule="physics_floor", evidence=evidence),
                    "log": trim_log(f"rejected (physics_floor): {evidence}", "", scrub=scrub),
                }
            )
        if floor.floor_ms is None:
            notes.append(floor.evidence)
            break
    latency_ms, score = task.score(timings)
    return base.model_copy(
        update={"timed": True, "timings": timings, "latency_ms": latency_ms, "score": score, "log": "\n".join(notes)}
    )


def timings_from_samples(
    task: Task, method: str, result: WorkerResult, wall_s: float, device: str = "cuda"
) -> tuple[list[Timing], str]:
    """Per-config statistics computed here, from the raw samples; '' or the reason the samples are unusable.

    The samples come from the candidate's process, so they are sanity-checked against what the parent measured:
    every benchmark config once, finite positive numbers, and a total no longer than the pass's wall time."""
    names = [c.name for c in task.benchmark_configs(device)]
    by_name = {s.config: s for s in result.samples}
    timings: list[Timing] = []
    total_ms = 0.0
    for name in names:
        entry = by_name.get(name)
        if entry is None or not entry.samples_ms:
            return [], f"no timing samples for config {name}"
        if not all(math.isfinite(x) and x > 0 for x in entry.samples_ms):
            return [], f"non-positive or non-finite timing samples for config {name}"
        total_ms += sum(entry.samples_ms)
        stats = timing_mod.summarize(entry.samples_ms)
        timings.append(Timing(config=name, method=method, headline=timing_mod.HEADLINE[method], **stats))  # type: ignore[arg-type]
    if total_ms / 1000.0 > wall_s * 1.05 + 0.05:
        return [], f"the reported kernel time ({total_ms / 1000:.3g} s) exceeds the timing pass's wall time ({wall_s:.3g} s)"
    return timings, ""


def _headline(result: WorkerResult) -> str:
    if result.verdict == Verdict.PASSED:
        return ""
    if result.rejection is not None:
        return f"rejected ({result.rejection.rule}): {result.rejection.evidence}"
    if result.mismatch is not None:
        return f"incorrect: {result.mismatch.message}"
    return f"{result.verdict.value} in phase {result.phase!r}"


def _crash_headline(outcome: _Outcome) -> str:
    code = outcome.returncode
    if code is not None and code < 0:
        try:
            how = f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    extra = f" (unreadable result: {outcome.unreadable})" if outcome.unreadable else ""
    return f"crashed: the worker {how} in phase {outcome.phase!r} without reporting a result{extra}"


def _parent_environment() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "torch": _version("torch"),
        "triton": _version("triton"),
        "harness": HARNESS_VERSION,
    }


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


# -- paired comparison ----------------------------------------------------------------------------------------------
def compare(incumbent: EvalRequest, challenger: EvalRequest, *, rounds: int = 5) -> Comparison:
    """Time two candidates that both passed correctness, interleaved in ONE worker on the same GPU.

    Per benchmark config and round, each candidate gets a short robust block (flush, rotated inputs, median); the
    order alternates A B, B A, A B ... so drift hits both. Per round the log speedup is the mean over configs of
    log(incumbent / challenger); ``speedup`` is exp of its mean over rounds and the interval a 95 % Student t-interval
    over those paired per-round values (per config likewise over its rounds). ``improved`` only when the whole
    interval is above 1. Raises ``UserError`` on the CPU (nothing is timed there) and ``ComparisonError`` when a
    candidate fails while being timed.
    """
    if incumbent.device == "cpu" or challenger.device == "cpu":
        raise UserError("compare() times kernels, and the CPU (Triton interpreter) cannot: use a cuda device")
    if incumbent.device != challenger.device or incumbent.task != challenger.task:
        raise UserError("compare() needs two candidates for the same task on the same device")
    if incumbent.candidate.entry_point != challenger.candidate.entry_point:
        raise UserError("compare() needs both candidates to use the same entry point")
    if rounds < 2:
        raise UserError("compare() needs at least 2 rounds for a confidence interval")
    task = resolve_task(incumbent.task)
    salt = secrets.randbits(62)
    with tempfile.TemporaryDirectory(prefix="ksearch-compare-") as root_text:
        root = Path(root_text)
        work, io = _prepare_dirs(root)
        (work / CANDIDATE_FILE).write_text(incumbent.candidate.code, encoding="utf-8")
        (work / CHALLENGER_FILE).write_text(challenger.candidate.code, encoding="utf-8")
        worker_request = _worker_request(incumbent, work, io, "compare", salt, task, "robust").model_copy(
            update={"challenger_path": str(work / CHALLENGER_FILE), "rounds": rounds, "outputs_dir": ""}
        )
        outcome = _run_worker(root, incumbent, worker_request)
        scrub = (str(work) + os.sep, str(io) + os.sep, str(root))
        if _worker_failed(outcome):
            failed = _to_evaluation(incumbent, task, outcome, scrub)
            raise ComparisonError(f"compare() failed: {failed.log.splitlines()[0] if failed.log else failed.verdict}")
    assert outcome.result is not None
    names = [c.name for c in task.benchmark_configs(incumbent.device)]
    comparison = comparison_from_samples(outcome.result.comparison, names)
    return comparison.model_copy(update={"device": outcome.result.environment.get("device_name", incumbent.device)})


def comparison_from_samples(samples: list[CompareSamples], names: list[str]) -> Comparison:
    """Pure statistics of ``compare``: per-round paired log ratios, t-intervals, geometric means."""
    by_name = {s.config: s for s in samples}
    missing = [n for n in names if n not in by_name]
    if missing or not names:
        raise ComparisonError(f"compare(): no samples for configs {missing or names}")
    rounds = min(min(len(by_name[n].incumbent_ms), len(by_name[n].challenger_ms)) for n in names)
    if rounds < 1:
        raise ComparisonError("compare(): no rounds were timed")
    per_config: list[ConfigComparison] = []
    per_round = [0.0] * rounds
    for name in names:
        entry = by_name[name]
        logs = [math.log(a / b) for a, b in zip(entry.incumbent_ms[:rounds], entry.challenger_ms[:rounds], strict=True)]
        mean, low, high = timing_mod.mean_ci(logs)
        per_config.append(
            ConfigComparison(
                config=name,
                incumbent_median_ms=statistics_median(entry.incumbent_ms),
                challenger_median_ms=statistics_median(entry.challenger_ms),
                ratio=math.exp(mean),
                ci_low=_exp(low),
                ci_high=_exp(high),
            )
        )
        for r, value in enumerate(logs):
            per_round[r] += value / len(names)
    mean, low, high = timing_mod.mean_ci(per_round)
    return Comparison(
        per_config=per_config, speedup=math.exp(mean), ci_low=_exp(low), ci_high=_exp(high),
        improved=_exp(low) > 1.0, rounds=rounds,
    )  # fmt: skip


def statistics_median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _exp(value: float) -> float:
    if value == -math.inf:
        return 0.0
    if value == math.inf:
        return math.inf
    return math.exp(value)


# -- logs -----------------------------------------------------------------------------------------------------------
def trim_log(
    headline: str,
    error: str,
    *,
    stdout: str = "",
    stderr: str = "",
    scrub: tuple[str, ...] = (),
    limit: int = LOG_LIMIT,
) -> str:
    """What an LLM needs to fix the kernel, at most ``limit`` chars: the reason, the candidate's own traceback frames
    and the exception, then the ends of stderr and stdout. Temp paths are removed so logs are stable."""

    def clean(text: str) -> str:
        for prefix in scrub:
            text = text.replace(prefix, "")
        return text.strip()

    parts = [clean(headline)]
    frames = clean(candidate_traceback(error))
    if frames:
        parts.append(_clip_middle(frames, limit * 6 // 10))
    room = max(0, limit - sum(len(p) + 1 for p in parts))
    stderr, stdout = clean(stderr), clean(stdout)
    if stderr:
        parts.append("--- stderr (end) ---\n" + _tail(stderr, max(300, room * 2 // 3 if stdout else room) - 21))
    if stdout:
        room = max(0, limit - sum(len(p) + 1 for p in parts))
        parts.append("--- stdout (end) ---\n" + _tail(stdout, max(200, room) - 21))
    return _clip_middle("\n".join(p for p in parts if p), limit)


def candidate_traceback(text: str) -> str:
    """A formatted traceback with only the frames in candidate.py kept, plus every exception line."""
    kept: list[str] = []
    keep_indented = True
    for line in text.splitlines():
        if line.startswith("Traceback (most recent call last)"):
            continue
        if line.startswith("  File "):
            keep_indented = CANDIDATE_FILE in line
        elif not line.startswith("    ") and line.strip():
            keep_indented = True  # an exception line: keep its indented continuation (e.g. Triton's source excerpt)
        else:
            if not keep_indented:
                continue
        if keep_indented:
            kept.append(line)
    return "\n".join(kept)


def _tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[-max(0, limit - 2) :]
    newline = cut.find("\n")
    return "…\n" + (cut[newline + 1 :] if 0 <= newline < len(cut) // 2 else cut)


def _clip_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = f"\n… [{len(text) - limit} chars cut] …\n"
    head = (limit - len(marker)) // 3
    tail = limit - len(marker) - head
    return text[:head] + marker + text[-tail:]
