"""The steering act log (table ``steering``): what people and agents asked of a run, and when it took effect.

An act is written ``pending`` by ``ksearch steer`` (from any process); the graph claims it at a fixed point of a step
(tree acts in ``edit_tree``, approvals in ``prune``), applies it and settles it as ``applied`` or ``rejected`` with
the step and round. Claiming stamps ``applied_step`` first, so a node re-run after a crash claims the same acts
again and applies them to the same checkpointed tree: applying is idempotent. ``at_step`` holds an act back until a
given step (replays and forks copy a run's acts with the step at which they took effect there).
"""

from __future__ import annotations

import json
import time
from typing import Any

from ksearch.store.store import Store

PENDING = "pending"
APPLIED = "applied"
REJECTED = "rejected"


def _decode(row: dict[str, Any]) -> dict[str, Any]:
    row["args"] = json.loads(row["args"] or "{}")
    return row


def add_act(
    store: Store,
    run_id: str,
    act: str,
    args: dict[str, Any],
    author: str,
    *,
    status: str = PENDING,
    at_step: int | None = None,
    applied_step: int | None = None,
    applied_round: int | None = None,
    result: str | None = None,
    copied_from: str | None = None,
) -> int:
    """Append an act; returns its id (acts are applied in id order)."""
    now = time.time()
    with store._write() as db:
        table = db["steering"]
        table.insert(
            {
                "run_id": run_id,
                "act": act,
                "args": json.dumps(args, sort_keys=True),
                "author": author,
                "status": status,
                "at_step": at_step,
                "applied_step": applied_step,
                "applied_round": applied_round,
                "result": result,
                "copied_from": copied_from,
                "created_at": now,
                "applied_at": now if status != PENDING else None,
            }
        )
        return int(table.last_pk)  # type: ignore[arg-type]


def list_acts(store: Store, run_id: str) -> list[dict[str, Any]]:
    return [_decode(r) for r in store._query("select * from steering where run_id = ? order by id", [run_id])]


def claim_acts(store: Store, run_id: str, step: int, acts: set[str] | frozenset[str]) -> list[dict[str, Any]]:
    """The acts of kinds ``acts`` to apply at ``step``: those pending and due, plus those claimed at this step before
    (a re-run after a crash). Stamps the newly claimed ones with ``applied_step`` in the same transaction."""
    kinds = sorted(acts)
    marks = ",".join("?" * len(kinds))
    with store._write() as db:
        rows = list(
            db.query(
                f"select * from steering where run_id = ? and act in ({marks}) and ("
                "(status = ? and applied_step is null and (at_step is null or at_step <= ?)) or applied_step = ?"
                ") order by id",
                [run_id, *kinds, PENDING, step, step],
            )
        )
        fresh = [r["id"] for r in rows if r["applied_step"] is None]
        if fresh:
            db.execute(
                f"update steering set applied_step = ? where id in ({','.join('?' * len(fresh))})", [step, *fresh]
            )
    for row in rows:
        row["applied_step"] = step
    return [_decode(r) for r in rows]


def settle_act(
    store: Store, act_id: int, *, status: str, result: str, applied_round: int, applied_step: int | None = None
) -> None:
    """Record what applying an act did (idempotent: a re-run writes the same outcome). ``applied_step`` is given for
    acts that were not claimed first (a replayed approval, held until its step)."""
    update: dict[str, Any] = {
        "status": status,
        "result": result,
        "applied_round": applied_round,
        "applied_at": time.time(),
    }
    if applied_step is not None:
        update["applied_step"] = applied_step
    with store._write() as db:
        db["steering"].update(act_id, update)


def find_decision(store: Store, run_id: str, step: int, candidate_id: str) -> dict[str, Any] | None:
    """The approve/reject act answering the promotion of ``candidate_id`` at ``step``, if one was given."""
    rows = store._query(
        "select * from steering where run_id = ? and act in ('approve', 'reject') "
        "and coalesce(applied_step, at_step) = ? order by id",
        [run_id, step],
    )
    for row in map(_decode, rows):
        if row["args"].get("candidate_id") == candidate_id:
            return row
    return None


def copy_acts(
    store: Store,
    source_run: str,
    target_run: str,
    *,
    steps: range | None = None,
    kinds: set[str] | frozenset[str] | None = None,
    settled: bool = False,
) -> int:
    """Copy ``source_run``'s acts that took effect (at ``steps``, of ``kinds``: all when None) into ``target_run``.

    ``settled=False`` copies them pending, each held until the step where it took effect (a replay, or a fork that
    re-runs that step, applies it there); ``settled=True`` copies them as they are (their effect is already in the
    target's starting state). Returns how many were copied."""
    copied = 0
    for row in list_acts(store, source_run):
        step = row["applied_step"]
        if row["status"] == PENDING or step is None:
            continue
        if (steps is not None and step not in steps) or (kinds is not None and row["act"] not in kinds):
            continue
        add_act(
            store,
            target_run,
            row["act"],
            row["args"],
            row["author"],
            status=row["status"] if settled else PENDING,
            at_step=step,
            applied_step=step if settled else None,
            applied_round=row["applied_round"] if settled else None,
            result=row["result"] if settled else None,
            copied_from=f"{source_run}#{row['id']}",
        )
        copied += 1
    return copied
