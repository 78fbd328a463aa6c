"""The agent side of the fault suite: ``ksearch``'s real ``main()`` in a process of its own, plus the fault to inject.

It runs in a child of a fork server that imported ksearch once (``harness.py``), so each agent process starts in a
fraction of a second instead of re-importing torch and LangChain, and is a real process all the same: SIGKILL ends it
at once, with no cleanup, exactly as ``kill -9`` ends ``ksearch``.

Faults fire at deterministic points, observed from inside the process without any hook in ksearch itself:

- a structlog event (``node.start`` / ``node.end`` of a node, ``profile.evaluate``...), seen by a processor this
  module adds in front of ksearch's own logging set-up;
- the return of a ``Store`` method called while a given node runs (``record_evaluation`` inside ``profile``...):
  the store class is wrapped in this process only;
- "an evaluation worker is running": after the event, a thread waits until this process has a child carrying its
  pid in ``KSEARCH_PARENT_PID`` that runs the evaluator's worker module (not its checker), then fires.

The actions: ``kill`` (SIGKILL this process), ``signal:SIGINT`` / ``signal:SIGTERM`` (as Ctrl-C or ``kill`` send
them), or ``disk-full`` (from then on the workspace database cannot grow: the next write that needs space fails
with SQLITE_FULL, as on a real full disk; see ``disk_full``).

One thing is shared by all agent processes: the CPU device probe (``probe_device("cpu")``: the versions that go
into the evaluation key, read where torch is imported). The fork server takes it once; its answer cannot differ
between processes of one machine. Everything else, the evaluator's workers included, starts afresh in every
process.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ksearch.cli  # noqa: F401 - imported in the fork server, before any agent process forks
import ksearch.flows.placement
import ksearch.flows.run  # noqa: F401 - imported in the fork server, before any agent process forks
from ksearch.store.store import Store
from ksearch.tools.fingerprint import DeviceInfo, probe_device

_CPU_PROBE: DeviceInfo = probe_device("cpu")


def _probe_device(device: str) -> DeviceInfo:
    return _CPU_PROBE if device == "cpu" else probe_device(device)


ksearch.flows.placement.probe_device = _probe_device


@dataclass(frozen=True)
class Fault:
    """One fault at one point of a run."""

    event: str
    """The structlog event that arms it (``node.start``, ``node.end``, ``profile.evaluate``...)."""
    node: str | None = None
    """Only events (or store calls) of this node."""
    nth: int = 1
    """The nth matching event (or store call) in this process."""
    store_call: str | None = None
    """Fire after this Store method returns inside ``node`` (the event then only tracks which node runs)."""
    worker_running: bool = False
    """Fire once an evaluation worker of this process is running (after the event)."""
    action: str = "kill"
    """``kill``, ``signal:NAME`` or ``disk-full``."""

    @property
    def label(self) -> str:
        if self.store_call:
            return f"inside {self.node}, after Store.{self.store_call}"
        if self.worker_running:
            return f"inside {self.node or self.event}, while the evaluation worker runs"
        where = {"node.start": "start of", "node.end": "end of"}.get(self.event, self.event)
        return f"{where} {self.node}" + (f" (#{self.nth})" if self.nth > 1 else "")


def agent_main(argv: list[str], cwd: str, output: str, env: dict[str, str], fault: Fault | None) -> None:
    """``ksearch ARGV`` with stdout and stderr in ``output``; exits with ksearch's exit code."""
    os.chdir(cwd)
    os.environ.update(env)
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
    if fault is not None:
        _arm(fault)
    if env.get("KSEARCH_TEST_DROP_FILE_CAPS") == "1":
        drop_file_capabilities()
    sys.argv = ["ksearch", *argv]
    ksearch.cli.main()


# ---- arming ----------------------------------------------------------------------------------------------------------
class _State:
    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.current: dict[int, str] = {}
        """The node each thread is running (cycles run in threads of their own)."""
        self.seen = 0
        self.fired = False
        self.lock = threading.Lock()


def _arm(fault: Fault) -> None:
    state = _State(fault)
    configure = ksearch.cli.configure_logging

    def configure_then_watch(*args: Any, **kwargs: Any) -> None:
        configure(*args, **kwargs)
        import structlog

        processors = structlog.get_config()["processors"]
        structlog.configure(processors=[_watcher(state), *processors])

    ksearch.cli.configure_logging = configure_then_watch
    if fault.store_call:
        _wrap_store(state)
    if fault.action == "disk-full":
        _track_connections()


def _watcher(state: _State):  # noqa: ANN202 - a structlog processor
    fault = state.fault

    def watch(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        event, thread = event_dict.get("event"), threading.get_ident()
        if event == "node.start":
            state.current[thread] = event_dict.get("node")
        node = event_dict.get("node") or state.current.get(thread)  # other events: the node this thread runs
        if not fault.store_call and event == fault.event and fault.node in (None, node) and _due(state):
            if fault.worker_running:
                threading.Thread(target=_when_worker_runs, args=(fault,), daemon=True).start()
            else:
                _act(fault)
        if event == "node.end":
            state.current.pop(thread, None)
        return event_dict

    return watch


def _wrap_store(state: _State) -> None:
    fault = state.fault
    original = getattr(Store, fault.store_call)

    def wrapped(self: Store, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if state.current.get(threading.get_ident()) == fault.node and _due(state):
            _act(fault)
        return result

    setattr(Store, fault.store_call, wrapped)


def _due(state: _State) -> bool:
    """Count one matching occurrence; True exactly once, at the nth."""
    with state.lock:
        state.seen += 1
        due = state.seen == state.fault.nth and not state.fired
        state.fired = state.fired or due
        return due


WORKER_MODULE = b"ksearch.tools.evaluator.worker.main"
"""The evaluator's worker (``python -P -m ksearch.tools.evaluator.worker.main``); the checker is another module."""


def _when_worker_runs(fault: Fault) -> None:
    deadline = time.monotonic() + 120
    while not _my_workers():
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    time.sleep(0.3)  # well inside the worker's run: it imports torch and triton for seconds
    _act(fault)


def _my_workers() -> list[int]:
    """Evaluation workers (not checkers) started by this process: they carry its pid in their environment."""
    marker = f"KSEARCH_PARENT_PID={os.getpid()}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0") and WORKER_MODULE in (
                    entry / "cmdline"
                ).read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _act(fault: Fault) -> None:
    if fault.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault.action.startswith("signal:"):  # what Ctrl-C or `kill` does: the signal comes to the main thread
        os.kill(os.getpid(), signal.Signals[fault.action.removeprefix("signal:")])
    elif fault.action == "disk-full":
        disk_full()
    else:
        raise ValueError(f"unknown fault action {fault.action!r}")


# ---- a full disk, simulated ------------------------------------------------------------------------------------------
_CONNECTIONS: list[sqlite3.Connection] = []
"""Every connection this process opened to a workspace database (the store's and LangGraph's)."""


def _track_connections() -> None:
    connect = sqlite3.connect

    def tracked(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(database, *args, **kwargs)
        if str(database).endswith("ksearch.db"):
            _CONNECTIONS.append(conn)
        return conn

    sqlite3.connect = tracked


def disk_full() -> None:
    """From now on the workspace database cannot grow by one page, on every connection of this process: SQLite's
    ``max_page_count`` set to the current size. A write that needs space then fails with SQLITE_FULL ("database or
    disk is full"), the very error a full disk gives, and SQLite rolls its transaction back as it does then."""
    for conn in _CONNECTIONS:
        try:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {pages}")
        except sqlite3.ProgrammingError:
            continue  # closed


# ---- root obeys file modes -------------------------------------------------------------------------------------------
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def drop_file_capabilities() -> None:
    """Root ignores file modes (CAP_DAC_OVERRIDE); without it a read-only workspace is read-only to root as well,
    as it is to any user. A no-op for other users."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    mask = ~((1 << _CAP_DAC_OVERRIDE) | (1 << _CAP_DAC_READ_SEARCH)) & 0xFFFFFFFF
    data[0].effective &= mask
    data[0].permitted &= mask
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
