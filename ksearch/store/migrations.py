"""Schema of the workspace database as numbered migration functions, applied in order and recorded.

Every change of the schema is a new function appended here (``m003_...``), never an edit of an old one; a
``_migrations`` table records which ran, so opening an old workspace upgrades it in place.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlite_utils

MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = []
"""In the order they apply: by number (``m003`` before ``m004`` whatever the order of the definitions)."""


def migration(fn: Callable[[sqlite_utils.Database], None]) -> Callable[[sqlite_utils.Database], None]:
    MIGRATIONS.append(fn)
    MIGRATIONS.sort(key=lambda f: f.__name__)
    return fn


@migration
def m001_initial(db: sqlite_utils.Database) -> None:
    db["runs"].create(
        {
            "id": str,
            "task": str,
            "model": str,
            "language": str,
            "device": str,
            "status": str,
            "config": str,
            "best_candidate_id": str,
            "best_evaluation_id": str,
            "best_score": float,
            "rounds_used": int,
            "parent_run_id": str,
            "created_at": float,
            "updated_at": float,
            "done_reason": str,
            "error": str,
        },
        pk="id",
    )
    db["candidates"].create(
        {"id": str, "task": str, "language": str, "entry_point": str, "code": str, "created_at": float}, pk="id"
    )
    db["evaluations"].create(
        {
            "id": str,
            "candidate_id": str,
            "eval_key": str,
            "verdict": str,
            "score": float,
            "latency_ms": float,
            "device": str,
            "report": str,
            "created_at": float,
        },
        pk="id",
        foreign_keys=[("candidate_id", "candidates", "id")],
    )
    db["evaluations"].create_index(["candidate_id", "eval_key"], unique=True)
    db["attempts"].create(
        {
            "id": int,
            "run_id": str,
            "cycle_id": str,
            "attempt": int,
            "round_index": int,
            "node_id": str,
            "prompt_kind": str,
            "candidate_id": str,
            "evaluation_id": str,
            "verdict": str,
            "score": float,
            "error": str,
            "created_at": float,
        },
        pk="id",
        foreign_keys=[("run_id", "runs", "id")],
    )
    db["attempts"].create_index(["run_id", "cycle_id", "attempt"], unique=True)
    db["llm_calls"].create(
        {
            "id": int,
            "run_id": str,
            "call_key": str,
            "role": str,
            "model": str,
            "prompt": str,
            "reply": str,
            "input_tokens": int,
            "output_tokens": int,
            "cost_usd": float,
            "latency_s": float,
            "attempt": int,
            "retries": int,
            "error": str,
            "replayed": int,
            "created_at": float,
        },
        pk="id",
        foreign_keys=[("run_id", "runs", "id")],
    )
    db["llm_calls"].create_index(["run_id", "call_key"], unique=True)
    db["wm_snapshots"].create(
        {"id": int, "run_id": str, "step": int, "label": str, "world_model": str, "created_at": float},
        pk="id",
        foreign_keys=[("run_id", "runs", "id")],
    )


@migration
def m002_comparisons(db: sqlite_utils.Database) -> None:
    """One paired re-measurement per (incumbent, challenger, evaluation key): promotion reads it back on resume."""
    db["comparisons"].create(
        {
            "id": int,
            "incumbent_id": str,
            "challenger_id": str,
            "eval_key": str,
            "speedup": float,
            "ci_low": float,
            "ci_high": float,
            "improved": int,
            "report": str,
            "created_at": float,
        },
        pk="id",
    )
    db["comparisons"].create_index(["incumbent_id", "challenger_id", "eval_key"], unique=True)


@migration
def m003_interactive(db: sqlite_utils.Database) -> None:
    """People and agents in the loop: the steering act log; on runs, the fork point and the process driving it."""
    db["steering"].create(
        {
            "id": int,
            "run_id": str,
            "act": str,
            "args": str,
            "author": str,
            "status": str,
            "at_step": int,
            "applied_step": int,
            "applied_round": int,
            "result": str,
            "copied_from": str,
            "created_at": float,
            "applied_at": float,
        },
        pk="id",
        foreign_keys=[("run_id", "runs", "id")],
    )
    db["steering"].create_index(["run_id", "status"])
    db["runs"].add_column("fork_round", int)
    db["runs"].add_column("driver", str)


@migration
def m004_skills(db: sqlite_utils.Database) -> None:
    """Verified optimisation skills (KLineage): the records, their evidence log, and the frozen library of each run.

    A skill's status and effect estimate are derived from its evidence when read, so neither is a column.
    """
    db["skills"].create(
        {"id": str, "source": str, "category": str, "intent": str, "record": str, "created_at": float}, pk="id"
    )
    db["skill_evidence"].create(
        {
            "id": int,
            "skill_id": str,
            "kind": str,
            "run_id": str,
            "cycle_id": str,
            "node_id": str,
            "task": str,
            "arch": str,
            "base_candidate_id": str,
            "candidate_id": str,
            "verdict": str,
            "speedup": float,
            "held_out": int,
            "imported": int,
            "record": str,
            "created_at": float,
        },
        pk="id",
        foreign_keys=[("skill_id", "skills", "id")],
    )
    db["skill_evidence"].create_index(["skill_id", "kind", "run_id", "cycle_id"], unique=True)
    db["skill_snapshots"].create({"id": str, "skills": str, "created_at": float}, pk="id")


@migration
def m005_device_info(db: sqlite_utils.Database) -> None:
    """The device a run evaluates on, as probed there (JSON of ``DeviceInfo``): a machine without that device can
    then write the run's prompts, with the same hardware description and evaluation key (``resume --prompts-only``)."""
    db["runs"].add_column("device_info", str)


@migration
def m006_counters(db: sqlite_utils.Database) -> None:
    """Hardware counters of an evaluated candidate (JSON of ``CounterReport``), collected after its verdict by the
    run named in ``run_id``; one row per evaluation (a failed collection is a row too, so it is not retried)."""
    db["counters"].create(
        {"evaluation_id": str, "run_id": str, "status": str, "wall_s": float, "report": str, "created_at": float},
        pk="evaluation_id",
    )
    db["counters"].create_index(["run_id"])


@migration
def m007_pending_prompts(db: sqlite_utils.Database) -> None:
    """What a waiting run waits for (JSON list of ``Waiting``), written when it pauses and cleared when it is driven
    again: ``ksearch show`` lists a run's pauses from its row, without loading the graph to read its checkpoint."""
    db["runs"].add_column("pending", str)


def migrate(db: sqlite_utils.Database) -> list[str]:
    """Apply every migration not yet recorded; returns the names applied now.

    All pending migrations run in one write transaction (``BEGIN IMMEDIATE``), re-checked once the write lock is
    held: two processes opening a new workspace at once cannot both create the tables, and a crash in the middle
    leaves the schema as it was. An up-to-date database is only read (so a read-only one can still be opened).
    """
    if not _pending(db):
        return []
    own_transaction = not db.conn.in_transaction
    if own_transaction:
        db.conn.execute("BEGIN IMMEDIATE")
    try:
        pending = _pending(db)  # another process may have migrated while this one waited for the lock
        if "_migrations" not in db.table_names():
            db["_migrations"].create({"name": str, "applied_at": float}, pk="name")
        for fn in pending:
            fn(db)
            db["_migrations"].insert({"name": fn.__name__, "applied_at": time.time()})
    except BaseException:
        if own_transaction and db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        raise
    if own_transaction:
        db.conn.execute("COMMIT")
    return [fn.__name__ for fn in pending]


def pending(db: sqlite_utils.Database) -> list[str]:
    """The names of the migrations ``db`` still needs (it is only read)."""
    return [fn.__name__ for fn in _pending(db)]


def _pending(db: sqlite_utils.Database) -> list[Callable[[sqlite_utils.Database], None]]:
    if "_migrations" not in db.table_names():
        return list(MIGRATIONS)
    done = {row["name"] for row in db["_migrations"].rows}
    return [fn for fn in MIGRATIONS if fn.__name__ not in done]
