"""LangGraph's SQLite checkpointer, in the workspace database, with our state classes registered for loading."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from ksearch.agent import cycle_logic, state, world_model
from ksearch.store.connection import BUSY_TIMEOUT_S, retry_locked, workspace_error

# Pydantic classes that appear in checkpoints: registered so they load as themselves (not dicts) without warnings.
STATE_CLASSES = [
    (state.__name__, "CycleResult"),
    (state.__name__, "BestRef"),
    (state.__name__, "SearchState"),
    (state.__name__, "CycleState"),
    (state.__name__, "CycleOutput"),
    (cycle_logic.__name__, "CycleProgress"),
    (cycle_logic.__name__, "PromptKind"),
    (world_model.__name__, "WorldModel"),
    (world_model.__name__, "Node"),
    (world_model.__name__, "Action"),
    (world_model.__name__, "SolutionRef"),
    (world_model.__name__, "NodeStatus"),
]


def reading_checkpointer(conn: sqlite3.Connection) -> SqliteSaver:
    """A saver that only reads, on a read-only store's connection (no set-up: that would write the file)."""
    saver = SqliteSaver(conn, serde=JsonPlusSerializer(allowed_msgpack_modules=STATE_CLASSES))
    saver.is_setup = True
    return saver


def open_checkpointer(db_path: Path) -> SqliteSaver:
    """A saver on its own connection to the workspace file (WAL, so our store and the saver don't block each other).

    The connection waits up to the busy timeout for another process's write, as the store's does, so two runs in
    one workspace take turns. A file that is not a database, or cannot be written, is a WorkspaceError."""
    try:
        conn = sqlite3.connect(str(db_path), check_same_thread=False, timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error as exc:
        raise workspace_error(exc, Path(db_path)) from exc
    try:
        retry_locked(lambda: conn.execute("PRAGMA journal_mode=WAL"))
        saver = SqliteSaver(conn, serde=JsonPlusSerializer(allowed_msgpack_modules=STATE_CLASSES))
        retry_locked(saver.setup)  # CREATE TABLE IF NOT EXISTS and its column check: safe to run again
    except sqlite3.Error as exc:
        conn.close()
        raise workspace_error(exc, Path(db_path)) from exc
    return saver
