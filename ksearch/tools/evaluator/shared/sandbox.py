"""Processes for untrusted code: a scrubbed environment, a private directory, its own process group, death with
the parent.

Every process of an evaluation is started as ``python -P -m ...`` in its own session (process group), with an
environment rebuilt from an allowlist so API keys never reach it, killed as a group at its time limit, and dying
with the parent (PDEATHSIG). Each worker gets a private working directory that is also its HOME and TMPDIR and holds
its own Triton and torch-extension caches, so nothing one candidate writes is seen by another.

A candidate's process (``contain=True``) also starts inside the containment layers of ``ksearch.tools.containment``
(namespaces, no capabilities, Landlock), and the process that starts it becomes non-dumpable first, so that no
other process's environment, memory or open files, nor the workspace, are within the candidate's reach.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import site
import stat
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import structlog

import ksearch
from ksearch import settings
from ksearch.tools.evaluator.shared import fork_server

if TYPE_CHECKING:
    from ksearch.tools.containment.policy import Openings

_ENV_ALLOWED = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_HOME",
        "CUDA_PATH",
        "LD_LIBRARY_PATH",
        "TRITON_INTERPRET",
        "PYTHONPATH",
        "CC",
        "CXX",
        "TZ",
        *(setting.name for setting in settings.PASSED_TO_CANDIDATES),
    }
)
_ENV_ALLOWED_PREFIXES = ("LC_",)
_ENV_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
"""Belt and braces: even an allowlisted name is dropped if it looks like a secret."""


def spawn(
    module: str,
    args: list[str],
    *,
    cwd: Path,
    device: str,
    stdin: int | IO[Any] | None,
    stdout: int | IO[Any] | None,
    stderr: int | IO[Any] | None,
    pass_fds: tuple[int, ...] = (),
    extra_env: dict[str, str] | None = None,
    contain: bool = False,
    writable: tuple[Path, ...] = (),
    tool: tuple[str, ...] = (),
    layers: tuple[str, ...] | None = None,
    openings: Openings | None = None,
    shm_keep: tuple[Path, ...] | None = None,
) -> subprocess.Popen[bytes]:
    """``python -P -m module args`` in its own process group, with the scrubbed environment of ``cwd``; with
    ``contain``, inside the containment layers of this machine (or ``layers``), writing only beneath ``writable``
    (and ``/dev``); with ``shm_keep``, a ``/dev/shm`` of its own holding only those folders of the machine's.
    ``tool``: a trusted tool's command that starts the program inside the same layers (Nsight Compute,
    ``ksearch.tools.counters``), with what it needs there opened (``openings``)."""
    return spawn_command(
        [*tool, sys.executable, "-P", "-m", module, *args],
        cwd=cwd,
        device=device,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        pass_fds=pass_fds,
        extra_env=extra_env,
        contain=contain,
        writable=writable,
        layers=layers,
        openings=openings,
        shm_keep=shm_keep,
    )


def spawn_command(
    command: list[str],
    *,
    cwd: Path,
    device: str,
    stdin: int | IO[Any] | None,
    stdout: int | IO[Any] | None,
    stderr: int | IO[Any] | None,
    pass_fds: tuple[int, ...] = (),
    extra_env: dict[str, str] | None = None,
    contain: bool = False,
    writable: tuple[Path, ...] = (),
    layers: tuple[str, ...] | None = None,
    openings: Openings | None = None,
    shm_keep: tuple[Path, ...] | None = None,
) -> subprocess.Popen[bytes]:
    """``command`` as ``spawn`` starts a module: its own process group, the scrubbed environment of ``cwd``, and with
    ``contain`` inside the layers (``policy.launcher_spec``), which the launcher applies before ``command`` is
    ``exec``ed, or the fork server's process before it runs ``command``'s module (``fork_server``, CPU only)."""
    env = {**worker_environment(cwd, device), settings.PARENT_PID.name: str(os.getpid()), **(extra_env or {})}
    spec: dict | None = None
    if contain:
        from ksearch.tools.containment import policy

        profile = settings.PROFILE.raw()  # the developer's statistics folder (``profiling``)
        if profile:
            Path(profile).mkdir(parents=True, exist_ok=True)
        spec = policy.launcher_spec(
            device,
            [cwd, *writable, *([Path(profile)] if profile else [])],
            layers=layers,
            openings=openings,
            shm_keep=list(shm_keep) if shm_keep is not None else None,
        )
        policy.protect_parent()
    started = {
        "cwd": cwd,
        "env": env,
        "stdin": stdin,
        "stdout": stdout,
        "stderr": stderr,
        "start_new_session": True,
        "pass_fds": pass_fds,
    }
    if fork_server.usable(device, command) and not (spec or {}).get("tool"):
        try:
            return on_spawner_thread(lambda: fork_server.popen(command, spec=spec, **started))
        except fork_server.ForkServerError as exc:
            structlog.get_logger(__name__).warning("fork_server_unavailable", error=str(exc))
    prefix: list[str] = []
    if spec is not None:
        from ksearch.tools.containment.policy import launcher_argv

        prefix = launcher_argv(spec)
    argv = [*prefix, *command]
    return on_spawner_thread(lambda: subprocess.Popen(argv, **started))


_T = TypeVar("_T")
_spawner: ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


def on_spawner_thread(start: Callable[[], _T]) -> _T:
    """``start()`` (a process start) on one thread that lives as long as this process.

    Linux ties ``PR_SET_PDEATHSIG`` (``die_with_parent``; the containment launcher sets it too) to the *thread*
    that created the child: a checker or prestarted worker started from a LangGraph pool thread was SIGKILLed when
    that pool shut down at the end of a ``graph.stream()``, though its session lived on for the next one (a
    thread-safety review of 2026-11-29), losing the warm checker, its reference cache and the prestarted workers.
    Started from this thread, they die with the process, as intended."""
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ksearch-spawner")
        spawner = _spawner
    if threading.current_thread().name.startswith("ksearch-spawner"):
        return start()
    return spawner.submit(start).result()


def kill_group(pid: int) -> None:
    """SIGKILL a process's whole group: the worker and anything the candidate started."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class UserNamespace:
    """A candidate worker's user namespace, held open: while it is held the kernel cannot give its number to another
    namespace (numbers of ended ones come back at once: a red-team review of 2026-11-30 saw two launchers in a row
    get the same one), so ``kill_user_namespace`` never takes another worker for this one's."""

    def __init__(self, pid: int) -> None:
        self.fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        info = os.fstat(self.fd)
        self.identity = (info.st_dev, info.st_ino)
        weakref.finalize(self, os.close, self.fd)

    @staticmethod
    def of(pid: int) -> UserNamespace | None:
        """The namespace of ``pid`` when it is not this process's own (None then, or when it cannot be read)."""
        try:
            namespace = UserNamespace(pid)
        except OSError:
            return None
        return None if namespace.identity == namespace_identity(os.getpid()) else namespace


def namespace_identity(pid: int) -> tuple[int, int] | None:
    try:
        info = os.stat(f"/proc/{pid}/ns/user")
    except OSError:
        return None
    return info.st_dev, info.st_ino


def kill_user_namespace(namespace: UserNamespace | None, *, rounds: int = 5) -> int:
    """SIGKILL every process in ``namespace`` (a candidate worker's user namespace, in which the launcher allows no
    nested one); how many. Without a PID namespace (a GPU), a process the candidate started in a new session or as a
    daemon outlives the group kill (a red-team review of 2026-11-30: it kept writing to the session's shared folder and
    to /dev/shm after its evaluation). Each process is signalled through a pidfd opened before its namespace is read
    again, so a pid reused meanwhile is never hit. A process that forks and exits faster than /proc is listed can
    slip past (``seccomp`` keeps every process in the worker's group, which the group kill takes whole)."""
    if namespace is None:
        return 0
    killed = 0
    for _ in range(rounds):  # again while it finds some: one may have forked during the scan
        found = 0
        try:
            pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
        except OSError:
            return killed
        for pid in pids:
            if namespace_identity(pid) != namespace.identity:
                continue
            try:
                handle = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if namespace_identity(pid) == namespace.identity:
                    signal.pidfd_send_signal(handle, signal.SIGKILL)
                    found += 1
            except OSError:
                pass
            finally:
                os.close(handle)
        killed += found
        if not found:
            break
        time.sleep(0.01)
    return killed


def signal_group(pid: int, signum: int) -> None:
    """Send ``signum`` to a process's whole group (SIGSTOP / SIGCONT: a process paused while another one times)."""
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def has_exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether the process has exited, without reaping it (so its group id stays ours to kill)."""
    if process.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def private_dirs(work: Path) -> None:
    for folder in (work, work / "tmp"):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)


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


REPORT_LIMIT = 64 << 20
"""The largest worker report the parent reads (a report holds every timed sample: a few MB at most)."""


def read_regular(path: Path, limit: int = REPORT_LIMIT, *, tail: bool = False) -> str | None:
    """The text of ``path`` when it is a regular file of at most ``limit`` bytes (with ``tail``: its last ``limit``
    bytes, whatever its size); None otherwise. A worker's folder is the candidate's to write: a FIFO put where its
    report goes would block the parent that opens it, a huge sparse file would fill its memory, a link would lead
    elsewhere (a red-team review of 2026-11-28). Opened without following links and without blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        if tail:
            os.lseek(fd, max(0, info.st_size - limit), os.SEEK_SET)
        elif info.st_size > limit:
            return None
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def read_report(path: Path) -> tuple[str | None, str]:
    """A worker's report (``read_regular``) and, when there is none to read, why."""
    if not os.path.lexists(path):
        return None, "no report"
    text = read_regular(path)
    if text is None:
        return None, f"the report is not a regular file of at most {REPORT_LIMIT >> 20} MiB"
    return text, ""


def read_tail(path: Path, limit: int = 64 * 1024) -> str:
    return read_regular(path, limit, tail=True) or ""


SYSTEM_BIN_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/nvidia/bin")
BARE_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
"""The whole environment the parent runs a system tool with: none of its own (its API keys), nothing a candidate set."""


def system_binary(name: str, dirs: tuple[str, ...] = SYSTEM_BIN_DIRS) -> str | None:
    """``name`` in a system folder where only root can have written it (the file and its folder owned by root and
    writable by nobody else), or None. The parent never runs a tool found on its ``PATH``: on a GPU (no Landlock
    there) a candidate can write to folders its user owns, which may come first on it (a virtual environment's
    ``bin``), and a tool the parent runs has the parent's rights, its environment included. (A candidate running as
    root can write root's files: this does not defend that setup.)"""
    for folder in dirs:
        path = os.path.join(folder, name)
        try:
            if _root_only(os.stat(folder)) and _root_only(os.stat(path)) and os.access(path, os.X_OK):
                return path
        except OSError:
            continue
    return None


def _root_only(status: os.stat_result) -> bool:
    return status.st_uid == 0 and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def remove_tree(path: Path) -> bool:
    """Remove ``path`` and everything below it, best effort and never raising; whether it is gone.

    The folders this removes were written by candidates, which may have made them hostile: ``shutil.rmtree``
    recurses once per level in Python (3.11) and opens a descriptor per level, so a tree a thousand folders deep
    raises ``RecursionError`` through ``ignore_errors`` (a red-team review of 2026-11-29). Then GNU ``rm -rf``, which
    walks any depth without recursion, removes what is left."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except (RecursionError, OSError):
        pass
    if not os.path.lexists(path):
        return True
    rm = system_binary("rm")  # never one a candidate put on the PATH (``system_binary``)
    if rm is None:
        return False
    try:
        subprocess.run(
            [rm, "-rf", "--", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=BARE_ENV,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        pass
    return not os.path.lexists(path)


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when the agent dies (even by SIGKILL), so no orphan keeps a GPU busy."""
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
