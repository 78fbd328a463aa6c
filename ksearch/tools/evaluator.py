"""Evaluate one candidate outside the caller's process: the trust boundary between the agent and untrusted code.

The candidate runs in a fresh ``python -m ksearch.tools.worker`` process in its own session (process group), with a
private temp dir as cwd and HOME, its own build caches, and an environment rebuilt from an allowlist so API keys never
reach it. A hard timeout kills the whole group. The worker writes a JSON result to a file; the parent trims the logs
and computes the score itself. Knows nothing about the graph or the agent.
"""

from __future__ import annotations

import os
import platform
import re
import select
import signal
import site
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

import ksearch
from ksearch.tasks.base import Task
from ksearch.tasks.registry import resolve_task
from ksearch.tools.candidate import Candidate
from ksearch.tools.evaluation import Evaluation, Verdict
from ksearch.tools.worker import WorkerRequest, WorkerResult

HARNESS_VERSION = "ksearch-evaluator-1"
"""Part of the evaluation cache key: bump when a change could alter verdicts or timings."""
LOG_LIMIT = 4000
CANDIDATE_FILE = "candidate.py"

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
    """From the worker's start until it begins running configs: interpreter start-up, imports, module import."""
    run_timeout_s: float = Field(default=300.0, gt=0)
    """From the first correctness config to the end of timing (Triton's JIT compiles at the first call)."""
    timing: bool = False

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


def evaluate(request: EvalRequest) -> Evaluation:
    """Run the candidate in a sandboxed worker and return its typed verdict. Never raises for the candidate's faults."""
    started = time.monotonic()
    task = resolve_task(request.task)
    if str(request.candidate.language) not in task.languages:
        return Evaluation(
            verdict=Verdict.COMPILE_ERROR,
            device=request.device,
            configs_total=len(task.test_configs(request.device)),
            log=f"task {task.name!r} accepts {', '.join(task.languages)} candidates, not {request.candidate.language}",
            environment=_parent_environment(),
        )
    with tempfile.TemporaryDirectory(prefix="ksearch-eval-") as root:
        outcome = _run_worker(Path(root), request)
        scrub = (str(Path(root) / "work") + os.sep, str(Path(root)))
        evaluation = _to_evaluation(request, task, outcome, scrub)
    return evaluation.model_copy(update={"duration_s": round(time.monotonic() - started, 3)})


# -- running the worker ---------------------------------------------------------------------------------------------
def _run_worker(root: Path, request: EvalRequest) -> _Outcome:
    work, io = root / "work", root / "io"
    for folder in (work, work / "tmp", io):
        folder.mkdir(mode=0o700)
    (work / CANDIDATE_FILE).write_text(request.candidate.code, encoding="utf-8")
    status_r, status_w = os.pipe()
    worker_request = WorkerRequest(
        task=request.task,
        device=request.device,
        entry_point=request.candidate.entry_point,
        candidate_path=str(work / CANDIDATE_FILE),
        result_path=str(io / "result.json"),
        timing=request.timing,
        status_fd=status_w,
    )
    (io / "request.json").write_text(worker_request.model_dump_json(), encoding="utf-8")
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
    )
    if not timed_out and (io / "result.json").exists():
        try:
            outcome.result = WorkerResult.model_validate_json((io / "result.json").read_text(encoding="utf-8"))
        except (ValidationError, OSError, UnicodeDecodeError) as exc:
            outcome.unreadable = f"{type(exc).__name__}: {exc}"[:500]
    return outcome


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
                    if new_phase == "run" and phase in ("start", "load"):
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
    else:
        verdict, headline = result.verdict, _headline(result)
        error = "" if result.mismatch or result.rejection else result.error  # already in the headline
    fields: dict[str, Any] = {}
    if result is not None and verdict == Verdict.PASSED and request.timing and result.timings:
        latency_ms, score = task.score(result.timings)
        fields = {"timed": True, "timings": result.timings, "latency_ms": latency_ms, "score": score}
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
        **fields,
    )


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
