"""Processes for untrusted code: a scrubbed environment, a private directory, time limits, death with the parent.

Every process of an evaluation is started as ``python -P -m ...`` in its own session (process group), with an
environment rebuilt from an allowlist so API keys never reach it, killed as a group at its time limit, and dying
with the parent (PDEATHSIG). The candidate's worker reports its phase on a pipe so the right limit applies; the
trusted checker reports its verdict on its own stdout, which the candidate never holds.
"""

from __future__ import annotations

import os
import re
import select
import signal
import site
import subprocess
import sys
import time
from pathlib import Path

from pydantic import BaseModel, ValidationError

import ksearch
from ksearch.contracts.evaluation import Verdict
from ksearch.contracts.exchange import CheckRequest, CheckResult, WorkerRequest, WorkerResult
from ksearch.tools.evaluator.request import EvalRequest


_ENV_ALLOWED = frozenset(
    {"PATH", "LANG", "LANGUAGE", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
     "TRITON_INTERPRET", "PYTHONPATH", "CC", "CXX", "TZ"}
)  # fmt: skip
_ENV_ALLOWED_PREFIXES = ("LC_",)
_ENV_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
"""Belt and braces: even an allowlisted name is dropped if it looks like a secret."""
_POLL_S = 0.05


class Outcome(BaseModel):
    """What the parent saw of one worker process."""

    result: WorkerResult | None = None
    timed_out: bool = False
    phase: str = "start"
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    unreadable: str = ""
    wall_s: float = 0.0



# -- running the worker ---------------------------------------------------------------------------------------------
def run_worker(root: Path, request: EvalRequest, worker_request: WorkerRequest) -> Outcome:
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
                [sys.executable, "-P", "-m", "ksearch.tools.evaluator.worker", str(io / "request.json")],
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
            kill_group(process.pid)
            process.wait()
    finally:
        os.close(status_r)
        if status_w >= 0:
            os.close(status_w)
    outcome = Outcome(
        timed_out=timed_out,
        phase=phase,
        returncode=process.returncode,
        stdout=read_tail(io / "stdout.txt"),
        stderr=read_tail(io / "stderr.txt"),
        wall_s=time.monotonic() - started,
    )
    if not timed_out and (io / "result.json").exists():
        try:
            outcome.result = WorkerResult.model_validate_json((io / "result.json").read_text(encoding="utf-8"))
        except (ValidationError, OSError, UnicodeDecodeError) as exc:
            outcome.unreadable = f"{type(exc).__name__}: {exc}"[:500]
    return outcome


def start_checker(
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
        [sys.executable, "-P", "-m", "ksearch.tools.evaluator.checker", str(request_path)],
        cwd=folder,
        env={**worker_environment(folder, request.device), "KSEARCH_PARENT_PID": str(os.getpid())},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def abort_checker(process: subprocess.Popen[bytes]) -> None:
    kill_group(process.pid)
    process.communicate()


def finish_checker(process: subprocess.Popen[bytes], request: EvalRequest) -> CheckResult:
    """Tell the checker the worker is dead and its files are final; its result comes back on its stdout."""
    limit = request.compile_timeout_s + request.run_timeout_s
    try:
        stdout, stderr = process.communicate(input=b"go\n", timeout=limit)
    except subprocess.TimeoutExpired:
        kill_group(process.pid)
        process.communicate()
        return CheckResult(verdict=Verdict.TIMEOUT, error=f"the checker exceeded {limit:g} s (reference too slow?)")
    finally:
        kill_group(process.pid)
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


def kill_group(pid: int) -> None:
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


def read_tail(path: Path, limit: int = 64 * 1024) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""




def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this worker when the agent dies (even by SIGKILL), so no orphan keeps a GPU busy."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)
