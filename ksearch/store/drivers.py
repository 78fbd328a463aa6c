"""Which process drives a run (``runs.driver``), so that two processes never run one run's graph at once.

A driver is named ``host:pid``. Claiming is one transaction: it succeeds when nobody drives the run, when the
claimant already does, or when the recorded driver is dead (a SIGKILL leaves its name behind). Whether a driver is
alive is the caller's question to answer (it depends on the host), passed in as a function.
"""

from __future__ import annotations

from collections.abc import Callable

from ksearch.store.store import Store


def claim_driver(store: Store, run_id: str, me: str, alive: Callable[[str], bool]) -> str | None:
    """Make ``me`` the run's driver; returns the live driver that holds it instead, or None when claimed."""
    with store._write() as db:
        rows = list(db.query("select driver from runs where id = ?", [run_id]))
        current = rows[0]["driver"] if rows else None
        if current and current != me and alive(current):
            return current
        db.execute("update runs set driver = ? where id = ?", [me, run_id])
    return None


def release_driver(store: Store, run_id: str, me: str) -> None:
    """Give the run up (only if ``me`` still holds it)."""
    with store._write() as db:
        db.execute("update runs set driver = null where id = ? and driver = ?", [run_id, me])


def current_driver(store: Store, run_id: str) -> str | None:
    rows = store._query("select driver from runs where id = ?", [run_id])
    return rows[0]["driver"] if rows else None
