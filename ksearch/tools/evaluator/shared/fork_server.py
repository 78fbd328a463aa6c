"""The parent's side of the fork server (``zygote``): CPU workers and checkers forked from a process that has imported
torch, Triton and numpy already, instead of a new Python each.

``popen`` returns a ``subprocess.Popen`` like the one ``sandbox.spawn`` would have started: the same command line
(as the process's ``args``), descriptors, folder, environment and layers; the process is this one's child (the server
forks it through a middle process that exits while this process is a child subreaper), so ``wait``, ``poll``,
``has_exited`` and the group kill work on it unchanged. Where the server cannot be used (not Linux, a GPU, a tool
that starts the program, ``KSEARCH_FORK_SERVER=0``) or fails, the caller starts the process itself.

On a GPU every process still starts from nothing: CUDA cannot be started in a forked process of one that has started
it, and the GPU's path has not been measured with the server (it runs only for the CPU).
"""

from __future__ import annotations

import atexit
import ctypes
import inspect
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from ksearch import settings
from ksearch.tools.containment.syscalls import libc

MODULE = "ksearch.tools.evaluator.shared.zygote"
CMDLINE_ROOM = 1024
"""Padding on the server's command line: each forked process writes its own command line there (``zygote``)."""
PER_PROCESS = frozenset(
    {
        "HOME",
        "TMPDIR",
        "XDG_CACHE_HOME",
        "TRITON_HOME",
        "TRITON_CACHE_DIR",
        "TORCH_EXTENSIONS_DIR",
        *(setting.name for setting in settings.HARNESS_OWN),
    }
)
"""Entries of a process's environment that are its own (its folder, its descriptors, its parent): the server's
environment is the rest, and a process whose rest differs goes to another server."""
MAX_SERVERS = 6
"""Servers kept at once (one per environment: the checker's, the workers', a resource probe's; a test that sets a
variable for its evaluations gets its own); the least recently used is stopped beyond that. At 4 the tests that set
one evicted the common pair, which were started again after them (2026-12-08)."""
ANSWER_TIMEOUT_S = 120.0
"""The first request waits for the server's imports (about 2.5 s alone, several times that on a loaded machine)."""
PR_SET_CHILD_SUBREAPER = 36


class ForkServerError(RuntimeError):
    """The server could not start the process (it is gone, or refused); the caller starts it itself."""


def usable(device: str, command: list[str]) -> bool:
    """Whether a process of ``command`` on ``device`` may come from the server: ``python -P -m MODULE ...`` for the
    CPU, on Linux, unless ``KSEARCH_FORK_SERVER`` is ``0``."""
    return (
        device == "cpu"
        and sys.platform.startswith("linux")
        and settings.FORK_SERVER.raw() != "0"
        and command[:3] == [sys.executable, "-P", "-m"]
        and len(command) >= 4
    )


def popen(
    command: list[str], *, spec: dict | None, env: dict[str, str], **popen_kwargs: Any
) -> subprocess.Popen[bytes]:
    """``command`` (``python -P -m MODULE ARGS``) forked by the server for ``env``, inside the layers of ``spec``, with
    ``Popen``'s other arguments as ``sandbox.spawn_command`` gives them. Raises ``ForkServerError`` when the server
    cannot; nothing is started then."""
    return _ForkedPopen(_server_for(env), command, spec, env=env, **popen_kwargs)


class Server:
    """One running ``zygote`` and the socket to it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="ksearch-fork-server-"))
        own, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        own.settimeout(ANSWER_TIMEOUT_S)
        folder = str(self.home)
        # the parent's pid, as its processes' own environments name it: what /proc/PID/environ shows of a forked
        # process is the server's, and tools (and the tests) find an agent's processes by it
        server_env = {**env, "HOME": folder, "TMPDIR": folder, settings.PARENT_PID.name: str(os.getpid())}
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-P", "-m", MODULE, str(theirs.fileno()), str(os.getpid()), "." * CMDLINE_ROOM],
                cwd=self.home,
                env=server_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        finally:
            theirs.close()
        self.channel = own
        self.lock = threading.Lock()
        self.owner = os.getpid()

    def start(self, request: dict[str, Any], fds: list[int]) -> int:
        with _adopting, self.lock:
            try:
                socket.send_fds(self.channel, [json.dumps(request).encode()], fds)
                answer = self.channel.recv(1 << 16)
            except OSError as exc:
                raise ForkServerError(f"the fork server is gone ({exc})") from None
        if not answer:
            raise ForkServerError("the fork server is gone")
        reply = json.loads(answer)
        if "pid" not in reply:
            raise ForkServerError(str(reply.get("error", reply)))
        return int(reply["pid"])

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        self.channel.close()
        try:
            self.process.kill()
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.home, ignore_errors=True)  # the server's own folder: no candidate writes there


_servers: OrderedDict[tuple[tuple[str, str], ...], Server] = OrderedDict()
_servers_lock = threading.Lock()


def _server_for(env: dict[str, str]) -> Server:
    key = tuple(sorted((name, value) for name, value in env.items() if name not in PER_PROCESS))
    with _servers_lock:
        if _servers and next(iter(_servers.values())).owner != os.getpid():
            _servers.clear()  # a process forked from the one that started them: they are its parent's
        server = _servers.get(key)
        if server is not None and not server.alive():
            _servers.pop(key).stop()
            server = None
        if server is None:
            server = Server(dict(key))
            _servers[key] = server
            while len(_servers) > MAX_SERVERS:
                _servers.popitem(last=False)[1].stop()
        _servers.move_to_end(key)
        return server


class _Adopting:
    """This process is a child subreaper only while a request is answered: the new process, whose middle process
    exits then, becomes its child. Had it stayed one, it would adopt every orphan of its descendants too and never
    reap them (a PID namespace's first process, killed after the launcher above it, left ~200 zombies in one test
    process, 2026-12-08)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def _set(self, on: bool) -> None:
        if libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
            raise ForkServerError(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")

    def __enter__(self) -> None:
        self.lock.acquire()
        try:
            self._set(True)
        except BaseException:
            self.lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self._set(False)
        finally:
            self.lock.release()


_adopting = _Adopting()


def stop_all() -> None:
    with _servers_lock:
        while _servers:
            server = _servers.popitem()[1]
            if server.owner == os.getpid():
                server.stop()


atexit.register(stop_all)


_CHILD_PARAMETERS = list(inspect.signature(subprocess.Popen._execute_child).parameters)[1:]  # type: ignore[attr-defined]
"""``Popen._execute_child``'s parameters after ``self`` (the same in CPython 3.11 to 3.13; read, not assumed)."""


class _ForkedPopen(subprocess.Popen):  # type: ignore[type-arg]
    """A ``Popen`` whose child the fork server makes: ``_execute_child`` asks the server instead of forking."""

    def __init__(self, server: Server, command: list[str], spec: dict | None, **kwargs: Any) -> None:
        self._server, self._spec = server, spec
        super().__init__(command, **kwargs)

    def _execute_child(self, *given: Any) -> None:
        arg = dict(zip(_CHILD_PARAMETERS, given, strict=True))
        command = list(arg["args"])
        inherited = (arg["p2cread"], arg["c2pwrite"], arg["errwrite"])
        fds = [fd if fd != -1 else default for fd, default in zip(inherited, (0, 1, 2), strict=True)]
        pass_fds = list(arg["pass_fds"])
        request = {
            "module": command[3],
            "args": command[4:],
            "cwd": str(arg["cwd"]),
            "env": dict(arg["env"]),
            "targets": [0, 1, 2, *pass_fds],
            "parent": os.getpid(),
            "spec": self._spec,
        }
        self.pid = self._server.start(request, [*fds, *pass_fds])
        self._child_created = True
        self._close_pipe_fds(
            arg["p2cread"], arg["p2cwrite"], arg["c2pread"], arg["c2pwrite"], arg["errread"], arg["errwrite"]
        )
