"""The workspace schema: migrations apply in one order, every earlier schema upgrades cleanly, and commands that only
look at a workspace never write it (issue 35, items 2 and 9)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlite_utils

from ksearch.flows.inspect import list_runs, run_view
from ksearch.store import Store
from ksearch.store.migrations import MIGRATIONS

REPO = Path(__file__).resolve().parents[2]
NAMES = [fn.__name__ for fn in MIGRATIONS]


def _schema(path: Path) -> dict[str, list[tuple[str, str]]]:
    db = sqlite_utils.Database(sqlite3.connect(path))
    return {t: [(c.name, c.type) for c in db[t].columns] for t in sorted(db.table_names()) if t != "_migrations"}


def _old_workspace(path: Path, names: list[str]) -> None:
    """A database as a release that knew only the migrations ``names`` (in that order) left it, with one run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite_utils.Database(sqlite3.connect(path))
    db["_migrations"].create({"name": str, "applied_at": float}, pk="name")
    by_name = {fn.__name__: fn for fn in MIGRATIONS}
    for name in names:
        by_name[name](db)
        db["_migrations"].insert({"name": name, "applied_at": time.time()})
    db["runs"].insert(
        {
            "id": "old",
            "task": "softmax",
            "model": "replay:x",
            "language": "triton",
            "device": "cpu",
            "status": "finished",
            "config": "{}",
            "rounds_used": 0,
            "created_at": 1.0,
            "updated_at": 1.0,
        }
    )
    db.conn.commit()
    db.conn.execute("PRAGMA journal_mode=WAL")
    db.conn.close()


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_migrations_apply_in_the_order_of_their_numbers(tmp_path: Path) -> None:
    assert NAMES == sorted(NAMES) and len(set(NAMES)) == len(NAMES)
    Store(tmp_path / "ksearch.db").close()
    with sqlite3.connect(tmp_path / "ksearch.db") as conn:
        applied = [row[0] for row in conn.execute("select name from _migrations order by rowid")]
    assert applied == NAMES


@pytest.mark.parametrize(
    "history",
    [NAMES[:k] for k in range(1, len(NAMES))] + [["m001_initial", "m002_comparisons", "m004_skills"]],
    ids=lambda h: "+".join(n[:4] for n in h),
)
def test_a_database_of_each_earlier_schema_upgrades_to_the_current_one(tmp_path: Path, history: list[str]) -> None:
    """Each prefix of the migrations is a past release; the last case is what releases that applied m004 before m003
    left behind."""
    fresh, old = tmp_path / "fresh" / "ksearch.db", tmp_path / "old" / "ksearch.db"
    fresh.parent.mkdir()
    Store(fresh).close()
    _old_workspace(old, history)
    store = Store(old)
    try:
        assert store.get_run("old")["status"] == "finished"
    finally:
        store.close()
    assert _schema(old) == _schema(fresh)
    with sqlite3.connect(old) as conn:
        assert sorted(row[0] for row in conn.execute("select name from _migrations")) == sorted(NAMES)


def test_reading_an_older_workspace_never_migrates_it(tmp_path: Path) -> None:
    """(SQLite's WAL readers may leave empty ``-wal``/``-shm`` files beside it; the database itself is unchanged.)"""
    ws = tmp_path / "ws"
    _old_workspace(ws / "ksearch.db", NAMES[:2])
    before = _digest(ws)["ksearch.db"]
    assert [r["id"] for r in list_runs(ws)] == ["old"]
    assert run_view("old", ws).run["status"] == "finished"
    assert _digest(ws)["ksearch.db"] == before
    with sqlite3.connect(ws / "ksearch.db") as conn:
        assert [row[0] for row in conn.execute("select name from _migrations")] == NAMES[:2]


def test_looking_at_a_missing_workspace_creates_nothing(tmp_path: Path) -> None:
    assert list_runs(tmp_path / "nothing-here") == []
    assert not (tmp_path / "nothing-here").exists()


def test_a_workspace_on_a_read_only_file_system_can_be_read(tmp_path: Path) -> None:
    """No write permission anywhere (the caller runs without capabilities, so that this binds root too): ``runs``,
    ``show`` and ``export`` read it; nothing is created beside the database."""
    ws = tmp_path / "ws"
    _old_workspace(ws / "ksearch.db", NAMES)
    for path in (ws / "ksearch.db", ws):
        path.chmod(0o555 if path.is_dir() else 0o444)
    before = _digest(ws)
    try:
        without_caps = [
            sys.executable,
            "-P",
            "-m",
            "ksearch.tools.containment.launcher",
            json.dumps({"layers": ["caps"]}),
            "--",
        ]
        for command in (["runs", "--json"], ["show", "old"]):
            done = subprocess.run(
                [*without_caps, sys.executable, "-m", "ksearch.cli", "--workspace", str(ws), *command],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)},
            )
            assert done.returncode == 0, done.stdout + done.stderr
            assert "old" in done.stdout
    finally:
        ws.chmod(0o755)
        (ws / "ksearch.db").chmod(0o644)
    assert _digest(ws) == before
