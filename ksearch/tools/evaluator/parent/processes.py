"""The two kinds of process an evaluator session runs, seen from the parent: a long-lived trusted checker and
single-use candidate workers started ahead of need. Both speak JSON lines (``ksearch.contracts.exchange``)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ksearch import settings
from ksearch.contracts.exchange import CheckerCommand
from ksearch.errors import KsearchError
from ksearch.tools.containment import allowlist
from ksearch.tools.evaluator.shared.sandbox import (
    UserNamespace,
    has_exited,
    kill_group,
    kill_user_namespace,
    private_dirs,
    read_tail,
    signal_group,
    spawn,
)

CANDIDATE_FILE = "candidate.py"
CHALLENGER_FILE = "challenger.py"
SHARED_DIR = "shared"
"""Beside the workers' folders of a session: what two processes of one evaluation share (the compile scout's Triton
cache). Candidates may write beneath their own folder and this one only."""


class CheckerFailure(KsearchError):
    """The trusted checker died, hung or answered nonsense: a harness failure, not the candidate's."""


def parse_message(line: str) -> dict[str, Any]:
    """One JSON-object line from a worker; {} for anything else (a worker's messages are not trusted to be well
    formed)."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
"""Linux: the kernel stamps each datagram with the time it was sent (``SCM_TIMESTAMPNS`` on receipt)."""


def message_channel() -> tuple[socket.socket, socket.socket]:
    """(parent's end, worker's end) of a worker's message channel: a Unix seqpacket socket pair (one record per
    message, end of file when the worker is gone) whose parent end asks the kernel to stamp every record with the
    moment the worker sent it. Those stamps time the worker's timed windows (``ledger``): the candidate cannot set
    them, and they do not depend on how late the parent gets round to reading."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        parent.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        pass  # no kernel stamps here: the reader stamps records when it reads them
    return parent, child


def close_passed(data: bytes) -> None:
    """Close the descriptors an ``SCM_RIGHTS`` message installed in this process (a red-team review of 2026-11-30:
    where the kernel does not stamp records, the ancillary buffer had room for four a candidate could pass)."""
    count = len(data) // 4
    for fd in struct.unpack(f"{count}i", data[: count * 4]):
        with contextlib.suppress(OSError):
            os.close(fd)


class LineReader:
    """Lines from a pipe (or a message socket, whose records carry the kernel's send times), read without blocking
    past a deadline."""

    def __init__(self, fd: int, sock: socket.socket | None = None) -> None:
        self.fd = fd
        self.sock = sock
        os.set_blocking(fd, False)
        self.pending = b""
        self.closed = False
        self.stamps: list[tuple[int, float]] = []
        """(end offset in ``pending``, stamp) per record read: the send time of the lines it holds (seconds since
        the epoch), from the kernel when it stamps records, else the time of the read."""
        self.kernel_stamps = sock is not None
        """Whether every record so far carried the kernel's stamp."""
        self.crowded_records = 0
        """Records that held more than one line: the worker sends one message per record, so two lines under one
        stamp were written by someone else (they would share a send time the parent could not tell apart)."""

    def _fill(self, timeout: float) -> None:
        """Read what arrives within ``timeout`` seconds into ``pending``; ``closed`` at end of file."""
        if self.closed:
            return
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return
        stamp = None
        try:
            if self.sock is not None:
                chunk, ancillary, _, _ = self.sock.recvmsg(1 << 20, socket.CMSG_SPACE(16))
                for level, kind, data in ancillary:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
                        seconds, nanoseconds = struct.unpack("qq", data[:16])
                        stamp = seconds + nanoseconds * 1e-9
                    elif level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        close_passed(data)  # the worker sends none: whatever a candidate passed is closed at once
            else:
                chunk = os.read(self.fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if chunk == b"":
            self.closed = True
        self.pending += chunk
        if self.sock is not None and chunk.count(b"\n") > 1:
            self.crowded_records += 1
        if self.sock is not None and chunk:  # a pipe's reader (the checker's answers) keeps no stamps
            if stamp is None:
                self.kernel_stamps = False
                stamp = time.time()
            self.stamps.append((len(self.pending), stamp))

    def lines(self, timeout: float) -> list[str]:
        """Every complete line available now or arriving within ``timeout`` seconds (possibly none)."""
        return [line for _, line in self.stamped_lines(timeout)]

    def stamped_lines(self, timeout: float) -> list[tuple[float, str]]:
        """``lines``, each with the send time of the record it came in (``stamps``)."""
        if b"\n" not in self.pending:
            self._fill(timeout)
        out: list[tuple[float, str]] = []
        start = 0
        while True:
            end = self.pending.find(b"\n", start)
            if end < 0:
                break
            line = self.pending[start:end]
            if line.strip():
                out.append((self._stamp_at(end), line.decode(errors="replace")))
            start = end + 1
        self.pending = self.pending[start:]
        self.stamps = [(offset - start, stamp) for offset, stamp in self.stamps if offset - start > 0]
        return out

    def drain(self, limit: int = 100_000) -> None:
        """Read every record already waiting, without blocking (at most ``limit``)."""
        for _ in range(limit):
            before = len(self.pending)
            self._fill(0.0)
            if self.closed or len(self.pending) == before:
                return

    def _stamp_at(self, offset: int) -> float:
        for end, stamp in self.stamps:
            if offset < end:
                return stamp
        return time.time()

    def one(self, deadline: float) -> str | None:
        """The next line before ``deadline`` (a monotonic time), or None on timeout or end of file."""
        while True:
            while b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                if line.strip():
                    return line.decode(errors="replace")
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                return None
            self._fill(min(left, 0.5))


CHECKER_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
"""The checker's OpenMP threads sleep as soon as its CPU work ends instead of spinning: by default they spin on every
core for a while after each parallel region, and the worker's next timed call, right after the checker answered an
audit, lost its CPU to them. On the 2-core CPU machine that call's median went from 3.4 ms to 0.07 ms for a 22 us
kernel (2026-11-27, ``bench/audit_share.py``); the checker's own work is never timed."""


class CheckerProcess:
    """The trusted checker of one device, kept for a session's evaluations."""

    def __init__(self, device: str, folder: Path, *, staging_dir: Path | None = None) -> None:
        """``staging_dir``: where the checker makes its host-memory staging buffer (``staging``)."""
        self.device = device
        self.folder = folder
        private_dirs(folder)
        self._stderr = open(folder / "stderr.txt", "wb")  # noqa: SIM115 - closed in close()
        staging = {settings.STAGING_DIR.name: str(staging_dir)} if staging_dir is not None else {}
        self.process = spawn(
            "ksearch.tools.evaluator.checker.main",
            ["--device", device],
            cwd=folder,
            device=device,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            extra_env={**CHECKER_ENV, **staging},
        )
        assert self.process.stdout is not None
        self.reader = LineReader(self.process.stdout.fileno())
        self.ready = False

    def wait_ready(self, timeout: float) -> None:
        if self.ready:
            return
        line = self.reader.one(time.monotonic() + timeout)
        if line is None or json.loads(line).get("op") != "ready":
            raise CheckerFailure(f"the checker did not start within {timeout:g} s: {self.stderr_tail()}")
        self.ready = True

    def ask(self, command: CheckerCommand, timeout: float) -> dict[str, Any]:
        """Send one command and return its one answer; ``CheckerFailure`` when none comes within ``timeout``."""
        self.wait_ready(timeout)
        assert self.process.stdin is not None
        try:
            self.process.stdin.write((command.model_dump_json() + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise CheckerFailure(f"the checker is gone ({exc}): {self.stderr_tail()}") from None
        line = self.reader.one(time.monotonic() + timeout)
        if line is None:
            raise CheckerFailure(
                f"the checker gave no answer to {command.op!r} within {timeout:g} s: {self.stderr_tail()}"
            )
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            raise CheckerFailure(f"the checker answered {line[:200]!r}") from None

    def alive(self) -> bool:
        return not has_exited(self.process)

    def stderr_tail(self) -> str:
        self._stderr.flush()
        return read_tail(self.folder / "stderr.txt", 2000)

    def close(self) -> None:
        try:
            if self.alive() and self.process.stdin is not None:
                self.process.stdin.write(b'{"op": "shutdown"}\n')
                self.process.stdin.flush()
                self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        kill_group(self.process.pid)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._stderr.close()


class WorkerProcess:
    """A candidate worker started ahead of need in its own private directory; used for one candidate."""

    def __init__(
        self,
        device: str,
        folder: Path,
        *,
        interpret: bool | None = None,
        profiler: bool = False,
        staging_dir: Path | None = None,
    ) -> None:
        """``interpret=False``: Triton's interpreter off even on the CPU (the resource probe compiles real kernels
        for a target GPU, ``ksearch.tools.evaluator.worker.aot``); None: the device decides (on for the CPU).
        ``profiler``: started as a profiling process (``ksearch.tools.evaluator.parent.profile_process``), which starts
        the profiler instead of calibrating the harness's timed windows. ``staging_dir``: the session's staging
        folder, the one folder of the machine's ``/dev/shm`` in the candidate's own."""
        self.device = device
        self.profiler = profiler
        self.allowed_version = allowlist.version()
        """The file layer's allow-list as this process started with it (a later task's files are not on it)."""
        self.work, self.io = folder / "work", folder / "io"
        private_dirs(self.work)
        self.io.mkdir(mode=0o700, parents=True, exist_ok=True)
        shared = folder.parent / SHARED_DIR
        shared.mkdir(mode=0o700, exist_ok=True)
        self.channel, child = message_channel()
        self.doorbell, bell = os.pipe()
        """Read end of a pipe the worker writes a byte to after each request that waits for an answer (``Channel.ask``),
        so a parent that reads the timing records late (``session.timing_poll_s``) still answers at once."""
        os.set_blocking(self.doorbell, False)
        try:
            with open(self.io / "stdout.txt", "wb") as out, open(self.io / "stderr.txt", "wb") as err:
                self.process = spawn(
                    "ksearch.tools.evaluator.worker.main",
                    ["--device", device, *(["--role", "profiler"] if profiler else [])],
                    cwd=self.work,
                    device=device,
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=err,
                    pass_fds=(child.fileno(), bell),
                    extra_env={
                        settings.MSG_FD.name: str(child.fileno()),
                        settings.DOORBELL_FD.name: str(bell),
                        **({} if interpret is None else {"TRITON_INTERPRET": "1" if interpret else "0"}),
                    },
                    contain=True,
                    writable=(folder, shared),
                    shm_keep=(staging_dir,) if staging_dir is not None else (),
                )
        finally:
            child.close()
            os.close(bell)
        self.messages = LineReader(self.channel.fileno(), self.channel)
        self.started = time.monotonic()
        self.ready_at: float | None = None
        self.namespace: UserNamespace | None = None
        """The worker's user namespace, read when it is ready: every process the candidate starts is in it."""
        self.backlog: list[str] = []
        self.calibration: dict[str, float] = {}
        """The harness's own costs in a timed window, measured by the worker before it read its request and sent with
        its ``ready`` message (``ksearch.tools.evaluator.worker.calibration``)."""
        self.phase = "start"
        """The last phase this worker announced, as far as ``latest_phase`` has read (for a scout, whose messages
        nobody relays)."""

    @property
    def result_path(self) -> Path:
        return self.io / "result.json"

    def wait_ready(self, deadline: float) -> bool:
        """True once the worker has imported its libraries (False if it died or the deadline passed first)."""
        while self.ready_at is None:
            for line in self.messages.lines(min(0.2, max(0.0, deadline - time.monotonic()))):
                if not (self.ready_at is None and self._note_ready(parse_message(line))):
                    self.backlog.append(line)
            if self.ready_at is None and (
                self.messages.closed or has_exited(self.process) or time.monotonic() > deadline
            ):
                return False
        return True

    def wait_phase(self, phase: str, deadline: float) -> bool:
        """Whether the worker announces ``phase`` (or exits) before ``deadline``, a monotonic time."""
        while self.latest_phase() != phase:
            if self.exited() or self.messages.closed:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.latest_phase(wait=min(0.05, left))
        return True

    def _note_ready(self, message: dict[str, Any]) -> bool:
        """Whether ``message`` is the ``ready`` one (its time and calibration kept)."""
        if message.get("op") != "ready":
            return False
        self.ready_at = time.monotonic()
        self.namespace = UserNamespace.of(self.process.pid)  # in its own by now (the launcher exec'd the worker)
        figures = message.get("calibration")
        if isinstance(figures, dict):
            self.calibration = {k: float(v) for k, v in figures.items() if isinstance(v, (int, float))}
        return True

    def latest_phase(self, wait: float = 0.0) -> str:
        """Read the messages waiting now, or arriving within ``wait`` seconds, and return the last phase announced
        (a ``ready`` among them is noted as ``wait_ready`` would)."""
        if not self.messages.closed:
            for line in self.messages.lines(wait):
                message = parse_message(line)
                if message.get("op") == "phase":
                    self.phase = str(message.get("phase", self.phase))
                elif self.ready_at is None:
                    self._note_ready(message)
        return self.phase

    def send(self, line: str) -> bool:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write((line.rstrip("\n") + "\n").encode())
            self.process.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def exited(self) -> bool:
        return has_exited(self.process)

    def wait_exit(self, timeout: float, *, or_until: Callable[[], bool] | None = None) -> bool:
        """Whether the process exits (or ``or_until()`` holds) within ``timeout`` seconds (it is not reaped: ``kill``
        does that)."""
        deadline = time.monotonic() + timeout
        while not (self.exited() or (or_until is not None and or_until())):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def pause(self) -> None:
        """Stop the process's group (SIGSTOP) until ``resume``: it takes no CPU time while another process times."""
        if not self.exited():
            signal_group(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        signal_group(self.process.pid, signal.SIGCONT)

    def kill(self) -> None:
        namespace = self.namespace or (None if self.exited() else UserNamespace.of(self.process.pid))
        kill_group(self.process.pid)
        kill_user_namespace(namespace)  # what left the group (none where a PID namespace ended with it)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        # Close the message pipe once: kill() runs twice per worker (at the end of its run, then when it is
        # retired), and a second close could hit a descriptor another thread has opened meanwhile (a Dask worker's
        # socket, say).
        fd, self.messages.fd, self.messages.closed = self.messages.fd, -1, True
        if fd >= 0:
            try:
                os.close(self.doorbell)
            except OSError:
                pass
            try:
                self.channel.close()
            except OSError:
                pass
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass

    def output(self) -> tuple[str, str]:
        return read_tail(self.io / "stdout.txt"), read_tail(self.io / "stderr.txt")
