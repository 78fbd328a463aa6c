"""The fork server's own process: ``python -P -m ksearch.tools.evaluator.shared.zygote FD PARENT_PID PADDING``.

It imports torch, Triton and numpy once, then forks each CPU worker and checker the parent asks for, instead of each
starting Python and importing them again (2.3 CPU-s a start on the 2-core CI machine; the test suite starts about
500, some 70 % of its CPU, 2026-12-08). The parent's side is ``fork_server``.

FD is a ``SOCK_SEQPACKET`` socket to the parent. A request is one JSON message (``Request``'s fields) with the
descriptors the new process gets (``socket.recv_fds``); the answer is ``{"pid": N}`` or ``{"error": "..."}``.

The new process is forked twice: the middle one exits at once, so the new one is reparented to the parent, a child
subreaper, and is the parent's child as if it had started it (it waits for it and kills its group). Before running
its module (``runpy``, as ``python -m`` does) it does what ``Popen`` and the containment launcher do between fork and
``exec``: a session of its own; its descriptors at the numbers asked and every other one closed; its folder and
environment; death with the parent (once it is the parent's child); then the layers of its spec
(``launcher.apply``, in the launcher's order, on a process of one thread, before any candidate code runs), and last
its capabilities as the launcher's ``exec`` left them (``capabilities.capabilities_as_after_exec``).

Only third-party modules (and the launcher's standard-library steps) are imported here: the evaluator's modules are
imported by each process itself, in its own environment. The server's environment is the processes' own but for
their per-process entries (``fork_server.PER_PROCESS``); the parent keeps a server per environment. The server runs no
candidate code and holds nothing secret (the scrubbed environment, no key); a process it forks is a candidate only
after its layers.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import socket
import sys
import time
import warnings
from dataclasses import dataclass

PRELOADED = ("numpy", "torch", "triton", "triton.language")
CMDLINE_ROOM = 1024
"""Bytes of padding on the server's command line, which each forked process overwrites with its own."""
MAX_FDS = 64
REPARENT_TIMEOUT_S = 10.0
FAILED = 121
"""Exit status of a process that could not be set up (the launcher's)."""


@dataclass(frozen=True)
class Request:
    module: str
    args: list[str]
    cwd: str
    env: dict[str, str]
    targets: list[int]
    """The descriptor number each received descriptor takes, in order (0, 1, 2, then the passed ones)."""
    parent: int
    spec: dict | None = None
    """The containment launcher's spec (``policy.launcher_spec``); None: no layers."""


def main(argv: list[str]) -> int:
    channel = socket.socket(fileno=int(argv[0]))
    parent = int(argv[1])  # argv[2]: the padding (``CMDLINE_ROOM``)
    _die_with(parent)
    _set_dumpable(False)  # as the agent is: no process of its user attaches to it or reads its memory
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    filters = list(warnings.filters)
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # fork() beside numpy's BLAS thread: it survives
    request, fds = serve(channel)  # returns only in a forked process
    warnings.filters[:] = filters
    become(request, fds)
    _show_command([sys.executable, "-P", "-m", request.module, *request.args])
    sys.argv = [request.module, *request.args]
    runpy.run_module(request.module, run_name="__main__", alter_sys=True)
    return 0


def serve(channel: socket.socket) -> tuple[Request, list[int]]:
    """Answer requests until the parent hangs up (then exit); in each forked process, return its request."""
    while True:
        try:
            data, fds, _flags, _address = socket.recv_fds(channel, 1 << 20, MAX_FDS)
        except InterruptedError:
            continue
        if not data:
            os._exit(0)
        try:
            request = Request(**json.loads(data))
        except (ValueError, TypeError) as exc:
            _close(fds)
            channel.send(json.dumps({"error": f"bad request: {exc}"}).encode())
            continue
        pid_r, pid_w = os.pipe()
        middle = os.fork()
        if middle == 0:
            os.close(pid_r)
            child = _fork_or_exit()
            if child == 0:
                os.close(pid_w)
                channel.close()
                return request, fds
            _write_and_exit(pid_w, str(child).encode())
        os.close(pid_w)
        _close(fds)
        os.waitpid(middle, 0)
        with os.fdopen(pid_r, "rb") as pipe:
            pid = pipe.read().decode()
        reply = {"pid": int(pid)} if pid.isdigit() else {"error": "the new process was not forked"}
        channel.send(json.dumps(reply).encode())


def _fork_or_exit() -> int:
    try:
        return os.fork()
    except OSError:
        os._exit(FAILED)


def _write_and_exit(fd: int, data: bytes) -> None:
    try:
        os.write(fd, data)
    finally:
        os._exit(0)


def become(request: Request, fds: list[int]) -> None:
    """Turn this freshly forked process into the one ``request`` asks for (see the module's docstring); exits with
    ``FAILED`` where a step fails."""
    try:
        _set_dumpable(True)  # as after the launcher's exec
        os.setsid()
        _place(fds, request.targets)
        os.chdir(request.cwd)
        os.environ.clear()
        os.environ.update(request.env)
        deadline = time.monotonic() + REPARENT_TIMEOUT_S
        while os.getppid() != request.parent:  # the middle process exits, then this one is the parent's
            if time.monotonic() > deadline:
                os._exit(FAILED)
            time.sleep(0.0005)
        _die_with(request.parent)
    except OSError as exc:
        print(f"ksearch fork server could not set the process up: {exc}", file=sys.stderr)
        os._exit(FAILED)
    from ksearch.tools.containment.capabilities import capabilities_as_after_exec
    from ksearch.tools.containment.launcher import apply
    from ksearch.tools.containment.syscalls import LayerError

    try:
        if request.spec is not None:
            apply(request.spec, probe=False)
        capabilities_as_after_exec()  # what the launcher's exec did: no layer step needs them any more
    except LayerError as exc:
        print(f"ksearch containment could not apply {exc}", file=sys.stderr)
        os._exit(FAILED)


def _place(fds: list[int], targets: list[int]) -> None:
    """Each of ``fds`` at its number in ``targets`` (inheritable, as ``Popen`` leaves them), every other descriptor
    closed."""
    import fcntl

    floor = max([*targets, *fds, 2]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in fds]  # above every number in play
    for fd, target in zip(moved, targets, strict=True):
        os.dup2(fd, target, inheritable=True)
    low = 0
    for fd in sorted(set(targets)):
        if fd > low:  # os.closerange(0, 0) would close every descriptor (close_range(0, -1))
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def _show_command(argv: list[str]) -> None:
    """Write ``argv`` over this process's command line (``/proc/PID/cmdline``, what ``ps`` shows), where the server's
    was (the parent pads it with ``CMDLINE_ROOM`` bytes): a forked worker reads as the ``python -P -m`` one it
    replaces, to a user and to tools that look for the evaluator's processes by their module."""
    import ctypes

    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end: the 48th and 49th fields
    except (OSError, IndexError, ValueError):
        return
    size = end - start
    data = b"\0".join(a.encode() for a in argv)[: size - 1]
    ctypes.memmove(start, data.ljust(size, b"\0"), size)


def _set_dumpable(on: bool) -> None:
    from ksearch.tools.containment.syscalls import PR_SET_DUMPABLE, libc

    libc.prctl(PR_SET_DUMPABLE, int(on), 0, 0, 0)


def _die_with(parent: int) -> None:
    from ksearch.tools.containment.launcher import die_with

    die_with(parent)


def _close(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
