"""Hardware counters beside the evaluations they belong to (table ``counters``, one row per evaluation).

Counters are collected after a verdict (a cycle's best, a solution the planner asked about), so they are kept in a
row of their own and attached when the evaluation is read (``Store.get_evaluation``): an evaluation's record never
changes. A failed collection is stored too, with its status, so a resumed run does not pay for it again.
"""

from __future__ import annotations

import time

from ksearch.contracts.counters import CounterReport
from ksearch.redaction import redact_json
from ksearch.store.store import Store


def record_counters(store: Store, evaluation_id: str, run_id: str, report: CounterReport) -> None:
    """Keep ``report`` for ``evaluation_id``; a second report for the same evaluation keeps the first, unless the
    first was skipped for the budget."""
    with store._write() as db:
        db.execute("delete from counters where evaluation_id = ? and status = 'skipped'", [evaluation_id])
        db["counters"].insert(
            {
                "evaluation_id": evaluation_id,
                "run_id": run_id,
                "status": report.status.value,
                "wall_s": report.wall_s,
                "report": redact_json(report.model_dump_json()),  # kernel names are the candidate's words
                "created_at": time.time(),
            },
            ignore=True,
        )


def find_counters(store: Store, evaluation_id: str) -> CounterReport | None:
    rows = store._query("select report from counters where evaluation_id = ?", [evaluation_id])
    return CounterReport.model_validate_json(rows[0]["report"]) if rows else None


def run_spend(store: Store, run_id: str) -> tuple[float, float]:
    """(seconds the run's evaluations took, seconds its counters took): what the counters' budget weighs."""
    evaluations = store._query(
        "select coalesce(sum(json_extract(e.report, '$.duration_s')), 0) as s from evaluations e "
        "where e.id in (select evaluation_id from attempts where run_id = ? and evaluation_id is not null)",
        [run_id],
    )
    counters = store._query("select coalesce(sum(wall_s), 0) as s from counters where run_id = ?", [run_id])
    return float(evaluations[0]["s"] or 0.0), float(counters[0]["s"] or 0.0)
