"""Opening the workspace database: WAL connections for the run, read-only ones for readers, and SQLite's failures
worded as one ``WorkspaceError`` naming the file and what to do.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ksearch.errors import WorkspaceError

BUSY_TIMEOUT_S = 30.0
"""How long a write waits for another process's write (two runs in one workspace take turns)."""

_T = TypeVar("_T")


def retry_locked(step: Callable[[], _T], *, timeout_s: float = BUSY_TIMEOUT_S) -> _T:
    """``step()``, run again after a short pause while SQLite says the database is locked, for up to ``timeout_s``.

    SQLite refuses some locks at once instead of waiting the busy timeout: switching a new file to WAL while another
    process opens it, or a schema write after another process changed the schema. Two runs starting in one new
    workspace failed that way about one time in three (2026-11-30); each step given here may simply be run again."""
    deadline = time.monotonic() + timeout_s
    pause = 0.01
    while True:
        try:
            return step()
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if ("locked" not in text and "busy" not in text) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


def workspace_error(exc: BaseException, path: Path) -> WorkspaceError:
    """SQLite's (or the OS's) failure on the workspace database as one sentence naming the file and what to do.

    Nothing here touches the file: a database that is not ours, or damaged, is left exactly as it was.
    """
    message = str(exc)
    text = message.lower()
    if "not a database" in text or "malformed" in text or "file is encrypted" in text:
        return WorkspaceError(
            f"{path} is not a usable ksearch workspace database (SQLite: {message}); it was left untouched",
            hint=f"move it aside (mv {path} {path}.bad) to start a new workspace there, or pass --workspace DIR",
        )
    if "disk is full" in text or "no space" in text:
        return WorkspaceError(
            f"cannot write {path}: the disk is full (SQLite: {message}); nothing already stored is lost",
            hint="free some space, or move the workspace to a larger disk and pass --workspace",
        )
    if "readonly" in text or "read-only" in text or "unable to open" in text or "permission" in text:
        return WorkspaceError(
            f"cannot open {path} for writing: the workspace is read-only or not writable by you ({message})",
            hint="pass --workspace DIR (or set KSEARCH_WORKSPACE) to a folder you can write",
        )
    if "locked" in text or "busy" in text:
        return WorkspaceError(
            f"{path} stayed locked by another process for more than {BUSY_TIMEOUT_S:.0f} s ({message})",
            hint="another ksearch (or a program holding the file open) is writing it; retry when it is done",
        )
    return WorkspaceError(f"the workspace database {path} failed: {message}")


def open_connection(path: Path) -> sqlite3.Connection:
    """A connection usable from LangGraph's worker threads, in WAL mode so readers never block the run.

    Raises WorkspaceError (never a raw sqlite3 error) when the file is not a database or cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), check_same_thread=False, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except (OSError, sqlite3.Error) as exc:
        raise workspace_error(exc, path) from exc
    try:
        retry_locked(lambda: conn.execute("PRAGMA journal_mode=WAL"))
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    except sqlite3.Error as exc:
        conn.close()
        if _is_read_only(exc) and path.exists():
            return _open_read_only(path)
        raise workspace_error(exc, path) from exc
    return conn


def _is_read_only(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "readonly" in text or "read-only" in text or "unable to open" in text


def open_for_reading(path: Path) -> sqlite3.Connection:
    """A connection that never writes ``path``: the file read-only (a missing file: an empty database in memory, and
    nothing created on disk). On a read-only file system WAL's index cannot be created, so the file is read as
    immutable."""
    if not path.exists():
        return sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    return _open_read_only(path)


def in_memory_copy(conn: sqlite3.Connection, path: Path) -> sqlite3.Connection:
    """A private copy of the database in memory (to upgrade an old schema for reading without touching the file)."""
    copy = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    try:
        conn.backup(copy)
    except sqlite3.Error as exc:
        copy.close()
        raise workspace_error(exc, path) from exc
    finally:
        conn.close()
    return copy


def _open_read_only(path: Path) -> sqlite3.Connection:
    """A workspace we may read but not write (a shared results folder, a read-only mount): reading commands work,
    and the first write fails as SQLite's "attempt to write a readonly database", which ``workspace_error`` words.
    WAL needs its -shm file to read; where it cannot be created, the file is read as immutable (nobody can be
    writing it: nobody can write it)."""
    last: sqlite3.Error | None = None
    for mode in ("mode=ro", "immutable=1"):
        try:
            conn = sqlite3.connect(
                f"{path.resolve().as_uri()}?{mode}",
                uri=True,
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_S,
                isolation_level=None,
            )
        except sqlite3.Error as exc:
            last = exc
            continue
        try:
            conn.execute("select count(*) from sqlite_master").fetchone()
            return conn
        except sqlite3.Error as exc:
            conn.close()
            last = exc
    assert last is not None
    raise workspace_error(last, path) from last
