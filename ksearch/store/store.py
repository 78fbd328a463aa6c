"""The workspace database: everything a run paid for, in one SQLite file beside LangGraph's checkpoints.

Why a store outside the graph state: LangGraph resumes at-least-once per node, so a node that evaluated a kernel or
called an LLM may run again after a crash. Every expensive result is therefore written here, keyed by content or by a
deterministic call key, *before* the node returns, and looked up before the work is redone.

Schema changes are numbered migration functions, never edits of old ones (a ``_migrations`` table records which ran).
Writes are idempotent ``ensure_*`` / ``record_*`` functions: inserting the same key twice is a no-op.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.counters import CounterReport
from ksearch.contracts.evaluation import Evaluation
from ksearch.contracts.identifiers import check_run_id
from ksearch.errors import RunExistsError, RunNotFoundError, UserError
from ksearch.redaction import redact_json
from ksearch.store.connection import in_memory_copy, open_connection, open_for_reading, workspace_error
from ksearch.store.migrations import migrate, pending


def _decode_config(run: dict[str, Any]) -> dict[str, Any]:
    """A run row's stored config; a value that is not a JSON object (an edited or damaged row) reads as ``{}`` and sets
    ``config_error`` on the row, so one bad row never breaks a listing (``stored_config`` refuses it in one line)."""
    try:
        value = json.loads(run.get("config") or "{}")
    except (TypeError, ValueError) as exc:
        run["config_error"] = f"not JSON: {exc}"
        return {}
    if not isinstance(value, dict):
        run["config_error"] = "not a JSON object"
        return {}
    return value


class Store:
    """Typed access to our tables. Thread-safe: parallel cycles share one instance.

    ``read_only``: for commands that only look (runs, show, export, report, serve, pending): the file is never
    written, not even to upgrade its schema (an older workspace is upgraded in a private copy in memory, and the file
    keeps its version until a command that writes opens it), so a read-only mount or a shared results folder can
    be read, and looking at a workspace never changes it."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        if read_only:
            self._conn = open_for_reading(self.path)
            try:
                if pending(sqlite_utils.Database(self._conn)):
                    self._conn = in_memory_copy(self._conn, self.path)
            except sqlite3.Error as exc:
                self._conn.close()
                raise workspace_error(exc, self.path) from exc
        else:
            self._conn = open_connection(self.path)
        self.db = sqlite_utils.Database(self._conn)
        try:
            with self._lock:
                migrate(self.db)
        except sqlite3.Error as exc:
            self._conn.close()
            raise workspace_error(exc, self.path) from exc

    @property
    def connection(self) -> sqlite3.Connection:
        """The store's own connection (for reading LangGraph's checkpoints of a read-only store)."""
        return self._conn

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite_utils.Database]:
        """One transaction, taken with the write lock at once (BEGIN IMMEDIATE) so that two processes writing the
        same workspace wait for each other (busy timeout) instead of failing on a stale read snapshot."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise workspace_error(exc, self.path) from exc
            try:
                yield self.db
            except BaseException as exc:
                self._rollback()
                if isinstance(exc, sqlite3.Error):
                    raise workspace_error(exc, self.path) from exc
                raise
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise workspace_error(exc, self.path) from exc

    def _rollback(self) -> None:
        """Undo the open transaction, if SQLite has not already (it rolls back by itself on a full disk)."""
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the original error is the one worth reporting

    def _query(self, sql: str, params: tuple | list = ()) -> list[dict[str, Any]]:
        with self._lock:
            try:
                return list(self.db.query(sql, params))
            except sqlite3.Error as exc:
                raise workspace_error(exc, self.path) from exc

    # ---- runs ------------------------------------------------------------------------------------------------
    def create_run(self, run: dict[str, Any]) -> None:
        """Insert a new run's row; RunExistsError when the id is taken (the row already there is left as it is)."""
        try:
            check_run_id(str(run.get("id", "")))
        except ValueError as exc:
            raise UserError(str(exc)) from None
        now = time.time()
        row = {"status": "created", "rounds_used": 0, "created_at": now, "updated_at": now, **run}
        if isinstance(row.get("config"), dict):
            row["config"] = json.dumps(row["config"], sort_keys=True)
        with self._write() as db:
            if db.execute("select 1 from runs where id = ?", [row["id"]]).fetchone():
                raise RunExistsError(f"run id {row['id']!r} is taken in {self.path}")
            db["runs"].insert(row)

    def find_run(self, run_id: str) -> dict[str, Any] | None:
        """The run whose id is exactly ``run_id`` (no prefix matching), or None."""
        rows = self._query("select * from runs where id = ?", [run_id])
        if not rows:
            return None
        rows[0]["config"] = _decode_config(rows[0])
        return rows[0]

    def get_run(self, run_id: str) -> dict[str, Any]:
        """The run with this id, or the one run whose id starts with it (as git takes a unique prefix)."""
        rows = self._query("select * from runs where id = ?", [run_id])
        if not rows and run_id:
            rows = self._query(
                "select * from runs where substr(id, 1, length(?)) = ? order by created_at desc", [run_id, run_id]
            )
            if len(rows) > 1:
                shown = ", ".join(r["id"] for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
                raise RunNotFoundError(f"run id prefix {run_id!r} is ambiguous: {len(rows)} runs match ({shown})")
        if not rows:
            raise RunNotFoundError(f"no run {run_id!r} in {self.path}")
        run = rows[0]
        run["config"] = _decode_config(run)
        return run

    def latest_run(self, *, unfinished: bool = False) -> dict[str, Any]:
        """The most recently created run (``unfinished``: the latest one not finished); RunNotFoundError if none."""
        where = "where status != 'finished'" if unfinished else ""
        rows = self._query(f"select id from runs {where} order by created_at desc, rowid desc limit 1")
        if not rows:
            what = "unfinished run" if unfinished else "run"
            raise RunNotFoundError(
                f"no {what} in {self.path}", hint="start one with: ksearch run TASK --model PROVIDER:MODEL"
            )
        return self.get_run(rows[0]["id"])

    def list_runs(self) -> list[dict[str, Any]]:
        """Every run, newest first, with ``rounds_passed``: how many of its rounds passed (its cycles may not have
        ended yet, so none of them need be the run's best)."""
        runs = self._query(
            "select runs.*, (select count(*) from attempts a where a.run_id = runs.id and a.round_index > 0 "
            "and a.verdict = 'passed') as rounds_passed from runs order by created_at desc"
        )
        for run in runs:
            run["config"] = _decode_config(run)
        return runs

    def update_run(self, run_id: str, **fields: Any) -> None:
        fields["updated_at"] = time.time()
        with self._write() as db:
            db["runs"].update(run_id, fields)

    # ---- candidates ------------------------------------------------------------------------------------------
    def ensure_candidate(self, candidate: Candidate) -> str:
        cid = candidate.id
        with self._write() as db:
            db["candidates"].insert(
                {
                    "id": cid,
                    "task": candidate.task,
                    "language": str(candidate.language),
                    "entry_point": candidate.entry_point,
                    "code": candidate.code,
                    "created_at": time.time(),
                },
                ignore=True,
            )
        return cid

    def get_candidate(self, candidate_id: str) -> Candidate:
        rows = self._query("select * from candidates where id = ?", [candidate_id])
        if not rows:
            raise KeyError(f"no candidate {candidate_id}")
        row = rows[0]
        return Candidate(task=row["task"], language=row["language"], code=row["code"], entry_point=row["entry_point"])

    # ---- evaluations -----------------------------------------------------------------------------------------
    @staticmethod
    def evaluation_id(candidate_id: str, eval_key: str) -> str:
        import hashlib

        return "ev-" + hashlib.sha256(f"{candidate_id}|{eval_key}".encode()).hexdigest()[:20]

    def find_evaluation(self, candidate_id: str, eval_key: str) -> tuple[str, Evaluation] | None:
        rows = self._query(
            "select e.id, e.report, c.report as counters from evaluations e left join counters c "
            "on c.evaluation_id = e.id where e.candidate_id = ? and e.eval_key = ?",
            [candidate_id, eval_key],
        )
        if not rows:
            return None
        return rows[0]["id"], _evaluation(rows[0])

    def record_evaluation(self, candidate_id: str, eval_key: str, evaluation: Evaluation) -> str:
        """Store an evaluation once per (candidate, key); a second record of the same key keeps the first."""
        eid = self.evaluation_id(candidate_id, eval_key)
        with self._write() as db:
            db["evaluations"].insert(
                {
                    "id": eid,
                    "candidate_id": candidate_id,
                    "eval_key": eval_key,
                    "verdict": evaluation.verdict.value,
                    "score": evaluation.score,
                    "latency_ms": evaluation.latency_ms,
                    "device": evaluation.device,
                    "report": redact_json(evaluation.model_dump_json()),  # what a kernel printed is untrusted
                    "created_at": time.time(),
                },
                ignore=True,
            )
        return eid

    def get_evaluation(self, evaluation_id: str) -> Evaluation:
        """The evaluation, with the hardware counters collected for it since (``ksearch.store.counters``)."""
        rows = self._query(
            "select e.report, c.report as counters from evaluations e left join counters c "
            "on c.evaluation_id = e.id where e.id = ?",
            [evaluation_id],
        )
        if not rows:
            raise KeyError(f"no evaluation {evaluation_id}")
        return _evaluation(rows[0])

    def get_evaluation_key(self, evaluation_id: str) -> str:
        """The evaluation key (harness, device model, software versions...) an evaluation was cached under."""
        rows = self._query("select eval_key from evaluations where id = ?", [evaluation_id])
        if not rows:
            raise KeyError(f"no evaluation {evaluation_id}")
        return rows[0]["eval_key"]

    # ---- attempts (one row per round) -------------------------------------------------------------------------
    def record_attempt(self, attempt: dict[str, Any]) -> int:
        """One round of a cycle: idempotent on (run_id, cycle_id, attempt). Returns the round's number in its run,
        in the order rounds were recorded (1 for the first; 0 for a row that is no round, the seed's, whose
        ``round_index`` is 0). The run's ``rounds_used`` follows at once, so every reader (``runs``, ``show``,
        reports, a resume) counts a round as soon as it is stored, not when its cycle ends."""
        with self._write() as db:
            db["attempts"].insert({"created_at": time.time(), **attempt}, ignore=True)
            if attempt["round_index"] <= 0:
                return 0
            run_id = attempt["run_id"]
            number, total = db.execute(
                "select sum(id <= (select id from attempts where run_id = ? and cycle_id = ? and attempt = ?)), "
                "count(*) from attempts where run_id = ? and round_index > 0",
                [run_id, attempt["cycle_id"], attempt["attempt"], run_id],
            ).fetchone()
            db.execute(
                "update runs set rounds_used = max(coalesce(rounds_used, 0), ?), updated_at = ? where id = ?",
                [total, time.time(), run_id],
            )
        return int(number)

    def rounds_recorded(self, run_id: str) -> tuple[int, int]:
        """(rounds recorded, rounds that passed) of a run, the seed's evaluation not counted."""
        row = self._query(
            (
                "select count(*) n, coalesce(sum(verdict = 'passed'), 0) passed from attempts where run_id = ? and "
                "round_index > 0"
            ),
            [run_id],
        )[0]
        return int(row["n"]), int(row["passed"])

    def list_attempts(self, run_id: str) -> list[dict[str, Any]]:
        return self._query("select * from attempts where run_id = ? order by round_index, id", [run_id])

    # ---- LLM calls -------------------------------------------------------------------------------------------
    def find_llm_call(self, run_id: str, call_key: str) -> dict[str, Any] | None:
        rows = self._query("select * from llm_calls where run_id = ? and call_key = ?", [run_id, call_key])
        return rows[0] if rows else None

    def record_llm_call(self, run_id: str, call: dict[str, Any]) -> None:
        row = {"created_at": time.time(), **call, "run_id": run_id}
        row["replayed"] = int(bool(row.get("replayed", False)))
        with self._write() as db:
            db["llm_calls"].insert(row, ignore=True)

    def note_llm_call_error(self, run_id: str, call_key: str, error: str) -> None:
        """Set the error of a call recorded without one (a person's reply is validated when the graph reads it)."""
        with self._write() as db:
            db.execute(
                "update llm_calls set error = ? where run_id = ? and call_key = ? and error is null",
                [error, run_id, call_key],
            )

    def list_llm_calls(self, run_id: str) -> list[dict[str, Any]]:
        return self._query("select * from llm_calls where run_id = ? order by id", [run_id])

    def list_llm_call_stats(self, run_id: str) -> list[dict[str, Any]]:
        """Every call's role, tokens, cost, latency and time, without the (large) prompt and reply texts."""
        return self._query(
            "select id, call_key, role, model, input_tokens, output_tokens, cost_usd, latency_s, retries, error, "
            "replayed, created_at from llm_calls where run_id = ? order by id",
            [run_id],
        )

    def activity_marker(self, run_id: str) -> str:
        """A short string that changes whenever the run writes anything (for live views that poll for changes)."""
        parts = [str(r["updated_at"]) for r in self._query("select updated_at from runs where id = ?", [run_id])]
        for table in ("attempts", "llm_calls", "wm_snapshots"):
            row = self._query(f"select count(*) n, coalesce(max(id), 0) m from {table} where run_id = ?", [run_id])[0]
            parts.append(f"{row['n']}.{row['m']}")
        return "|".join(parts)

    def usage(self, run_id: str) -> dict[str, dict[str, float]]:
        """Token and cost totals per role, plus a 'total' row."""
        rows = self._query(
            "select role, count(*) calls, coalesce(sum(input_tokens),0) input_tokens, "
            "coalesce(sum(output_tokens),0) output_tokens, coalesce(sum(cost_usd),0) cost_usd "
            "from llm_calls where run_id = ? group by role",
            [run_id],
        )
        out: dict[str, dict[str, float]] = {r.pop("role"): r for r in rows}
        out["total"] = {
            k: sum(r[k] for r in out.values()) for k in ("calls", "input_tokens", "output_tokens", "cost_usd")
        }
        return out

    # ---- world-model snapshots ----------------------------------------------------------------------------------
    def record_snapshot(self, run_id: str, step: int, label: str, world_model_json: str) -> None:
        with self._write() as db:
            db["wm_snapshots"].insert(
                {
                    "run_id": run_id,
                    "step": step,
                    "label": label,
                    "world_model": world_model_json,
                    "created_at": time.time(),
                }
            )

    def list_snapshots(self, run_id: str) -> list[dict[str, Any]]:
        return self._query("select * from wm_snapshots where run_id = ? order by id", [run_id])


# ---- paired comparisons (promotion by statistics) --------------------------------------------------------------------
def ensure_comparison(
    store: Store, incumbent_id: str, challenger_id: str, eval_key: str, record: dict[str, Any]
) -> None:
    """Record a comparison once; a second record of the same key keeps the first (so a resumed prune decides alike)."""
    with store._write() as db:
        db["comparisons"].insert(
            {
                "incumbent_id": incumbent_id,
                "challenger_id": challenger_id,
                "eval_key": eval_key,
                "speedup": record.get("speedup"),
                "ci_low": record.get("ci_low"),
                "ci_high": record.get("ci_high"),
                "improved": int(bool(record.get("improved"))),
                "report": json.dumps(record, sort_keys=True, default=str),
                "created_at": time.time(),
            },
            ignore=True,
        )


def find_comparison(store: Store, incumbent_id: str, challenger_id: str, eval_key: str) -> dict[str, Any] | None:
    """The stored comparison record (the dict given to ``ensure_comparison``), or None."""
    rows = store._query(
        "select report from comparisons where incumbent_id = ? and challenger_id = ? and eval_key = ?",
        [incumbent_id, challenger_id, eval_key],
    )
    return json.loads(rows[0]["report"]) if rows else None


def _evaluation(row: dict[str, Any]) -> Evaluation:
    """An evaluation row, its counters row (if any) attached: counters are collected after the verdict, and the
    evaluation's own record never changes."""
    evaluation = Evaluation.model_validate_json(row["report"])
    if row.get("counters"):
        evaluation = evaluation.model_copy(update={"counters": CounterReport.model_validate_json(row["counters"])})
    return evaluation
