"""Two processes opening one new workspace at the same moment: SQLite refuses some locks at once instead of waiting
its busy timeout (switching a new file to WAL, a schema write after another process's), and about one opening in
three failed with "database is locked" (2026-11-30, ``test_concurrency``'s two runs in a new workspace). The steps
that can be refused that way are run again (``retry_locked``)."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest
import sqlite_utils

from ksearch.agent.checkpoint import open_checkpointer
from ksearch.store.connection import open_connection, retry_locked
from ksearch.store.migrations import migrate

TRIALS = 12


def test_a_step_refused_as_locked_is_run_again_and_any_other_failure_is_not() -> None:
    calls: list[int] = []

    def locked_twice() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise sqlite3.OperationalError("database is locked")
        return "done"

    assert retry_locked(locked_twice) == "done" and len(calls) == 3
    calls.clear()

    def broken() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("no such table: runs")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        retry_locked(broken)
    assert len(calls) == 1


def test_a_lock_that_outlasts_the_timeout_is_raised() -> None:
    def always_locked() -> None:
        raise sqlite3.OperationalError("database is locked")

    with pytest.raises(sqlite3.OperationalError, match="locked"):
        retry_locked(always_locked, timeout_s=0.05)


def _open_store(path: str, barrier, answers) -> None:
    barrier.wait()
    try:
        migrate(sqlite_utils.Database(open_connection(Path(path))))
        answers.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the test
        answers.put(f"{type(exc).__name__}: {exc}")


def _open_saver(path: str, barrier, answers) -> None:
    barrier.wait()
    try:
        open_checkpointer(Path(path))
        answers.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the test
        answers.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("opener", [_open_store, _open_saver], ids=["store", "checkpointer"])
def test_two_processes_open_a_new_workspace_at_once(opener, tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")  # the parent's imports: the two start within microseconds
    failures = []
    for trial in range(TRIALS):
        path = str(tmp_path / f"ws{trial}.db")
        barrier, answers = context.Barrier(2), context.Queue()
        processes = [context.Process(target=opener, args=(path, barrier, answers)) for _ in range(2)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)
        failures += [answer for answer in (answers.get(timeout=5), answers.get(timeout=5)) if answer != "ok"]
    assert failures == []
