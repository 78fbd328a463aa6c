"""Nsight Compute run inside a candidate's containment, and its report read in a contained process too (the parent's
side of the counters' processes).

    containment launcher (a rung's layers, applied while it has one thread) -> exec ncu -> python -P -m worker
    then, once every process of that run is killed: launcher -> exec ncu --import (twice, side by side)

ncu and the candidate share the sandbox, so the folder ncu writes its report and log to is the candidate's to write
as well: counters are diagnostics (they never decide a verdict, a score or a promotion). The report is read back by
ncu in a contained process of its own, without the parent's environment, so that a report made to exploit ncu's
reader reaches nothing outside; the parent reads only the CSV text it prints, and every file of the sandbox's
folders without following links and within a size limit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ksearch import settings
from ksearch.tools.counters import ncu_command
from ksearch.tools.counters.rungs import Rung
from ksearch.tools.evaluator.shared.sandbox import (
    UserNamespace,
    has_exited,
    kill_group,
    kill_user_namespace,
    private_dirs,
    read_regular,
    remove_tree,
    spawn,
    spawn_command,
)

IMPORT_TIMEOUT_S = 60.0
PAGE_LIMIT = 64 << 20
"""The largest raw page read back (a few hundred launches of a few hundred metrics: well under a megabyte)."""
LOG_TAIL = 64 << 10
"""How much of ncu's log and of a process's stderr is read (the end)."""
COPY_LIMIT = 256 << 20
"""The largest report file copied to a ``keep`` folder."""


class ImportFailure(RuntimeError):
    """ncu could not read its report back (its own words, clipped)."""


@dataclass(frozen=True)
class Folders:
    """One run's folders beneath a scratch ``root`` the sandbox cannot write: ``ncu`` (ncu's report and log) and
    ``work`` (the worker's private folder: its HOME and TMPDIR, where ncu's lock file goes too) are the sandbox's."""

    root: Path
    ncu: Path
    work: Path


@dataclass(frozen=True)
class Finished:
    """How a contained run ended: ncu's exit status (None when killed at its limit), and its wall time."""

    returncode: int | None
    timed_out: bool
    seconds: float


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Folders]:
    """A run's folders, removed afterwards whatever the candidate left in them (``remove_tree``)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        ncu = root / "ncu"
        ncu.mkdir(mode=0o700)
        work = root / "worker"
        private_dirs(work)
        yield Folders(root, ncu, work)
    finally:
        remove_tree(root)


_device_locks: dict[str, threading.Lock] = {}
_device_locks_guard = threading.Lock()


@contextlib.contextmanager
def one_per_device(device: str) -> Iterator[None]:
    """One ncu run at a time per device from this process: each run's lock file lies in its own TMPDIR, so ncu's
    own lock (``$TMPDIR/nsight-compute-lock``) no longer keeps two of them apart."""
    with _device_locks_guard:
        lock = _device_locks.setdefault(device, threading.Lock())
    with lock:
        yield


def profile(
    ncu_argv: list[str],
    module: str,
    args: list[str],
    folders: Folders,
    device: str,
    rung: Rung,
    *,
    stdin_text: str | None,
    timeout_s: float,
) -> Finished:
    """``ncu_argv`` (ncu's command, without the program) profiling ``python -P -m module args``, both inside
    ``rung``'s layers (none: the scrubbed environment only); the program's output goes to ``folders.work``'s
    ``stdout.txt`` and ``stderr.txt``. Every process of the run is killed once ncu has exited or at ``timeout_s``."""
    with (
        one_per_device(device),
        open(folders.work / "stdout.txt", "wb") as out,
        open(folders.work / "stderr.txt", "wb") as err,
    ):
        started = time.monotonic()
        process = spawn(
            module,
            args,
            cwd=folders.work,
            device=device,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            # without layers there is no launcher to say so: the worker's parent is ncu, not this process
            extra_env={**ncu_command.ENVIRONMENT, **({} if rung.layers else {settings.PARENT_PID.name: ""})},
            contain=bool(rung.layers),
            writable=(folders.ncu,),
            tool=tuple(ncu_argv),
            layers=rung.layers,
            openings=rung.openings,
            shm_keep=(),
        )
        try:
            assert process.stdin is not None
            if stdin_text is not None:
                process.stdin.write((stdin_text + "\n").encode())
            process.stdin.close()
        except OSError:
            pass
        returncode, timed_out = wait_and_end(process, timeout_s)
        return Finished(returncode, timed_out, round(time.monotonic() - started, 3))


def wait_and_end(process: subprocess.Popen[bytes], timeout_s: float) -> tuple[int | None, bool]:
    """Wait for ``process`` (the contained launcher, then ncu) up to ``timeout_s``, then kill its process group and
    its user namespace (read while it runs: whatever the candidate started, even in a new session, ends with it);
    (its exit status, None when it was killed at the limit; whether it was)."""
    deadline = time.monotonic() + timeout_s
    namespace: UserNamespace | None = None
    while not has_exited(process) and time.monotonic() < deadline:
        if namespace is None:
            namespace = UserNamespace.of(process.pid)  # its own once the launcher has entered it
        time.sleep(0.05)
    timed_out = not has_exited(process)
    kill_group(process.pid)  # not reaped yet: the group's id is still its own
    kill_user_namespace(namespace)
    returncode = process.wait(timeout=30)
    return (None, True) if timed_out else (returncode, False)


def import_pages(ncu: str, report: Path, folders: Folders, device: str, rung: Rung, *, by_range: bool) -> list[str]:
    """ncu's raw page of ``report`` (and with ``by_range`` the page with kernels renamed by their NVTX ranges too),
    each read by ncu in a contained process of ``rung``'s layers that may read ``report``'s folder, side by side."""
    openings = dataclasses.replace(
        rung.openings, readable=(*rung.openings.readable, str(report.parent)), tool=False, connect=False
    )
    reader = dataclasses.replace(rung, openings=openings)
    started = []
    for ranged in [False, True] if by_range else [False]:
        name = "by_range" if ranged else "page"
        work = folders.root / f"import-{name}"
        private_dirs(work)
        page = folders.root / f"{name}.csv"  # in the root: the reader writes it through its stdout only
        with open(page, "wb") as out, open(work / "stderr.txt", "wb") as err:
            process = spawn_command(
                ncu_command.import_argv(ncu, report, by_range=ranged),
                cwd=work,
                device=device,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                extra_env=ncu_command.ENVIRONMENT,
                contain=bool(reader.layers),
                layers=reader.layers,
                openings=reader.openings,
            )
        started.append((process, page, work))
    pages = []
    for process, page, work in started:
        returncode, timed_out = wait_and_end(process, IMPORT_TIMEOUT_S)
        said = read_regular(work / "stderr.txt", LOG_TAIL, tail=True) or ""
        if timed_out or returncode != 0:
            why = " | ".join(ncu_command.problems("", said)) or said.strip()[-300:]
            ended = f"was killed after {IMPORT_TIMEOUT_S:g} s" if timed_out else f"exited with status {returncode}"
            raise ImportFailure(f"ncu --import {ended}" + (f": {why}" if why else ""))
        text = read_regular(page, PAGE_LIMIT)
        if text is None:
            raise ImportFailure(f"ncu --import printed no page of at most {PAGE_LIMIT >> 20} MiB")
        pages.append(text)
    return pages


def is_regular(path: Path) -> bool:
    """Whether ``path`` is a regular file itself (not a link to one, a pipe or a folder)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def tail(path: Path) -> str:
    """The end of a text file of the sandbox's (``read_regular``), '' when there is none to read."""
    return read_regular(path, LOG_TAIL, tail=True) or ""


def copy_regular(source: Path, target: Path, limit: int = COPY_LIMIT) -> bool:
    """Copy ``source`` (a file of the sandbox's) to ``target`` when it is a regular file of at most ``limit`` bytes,
    opened without following links or blocking; whether it was copied."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return False
        with open(target, "wb") as out:
            while chunk := os.read(fd, 1 << 20):
                out.write(chunk)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
