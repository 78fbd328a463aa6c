"""The workspace database: migrations, content addressing and idempotent writes."""

from __future__ import annotations

import sqlite_utils

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.store import MIGRATIONS, Store, migrate


def test_migrate_blank_database_creates_exact_tables_and_is_repeatable():
    db = sqlite_utils.Database(memory=True)
    assert migrate(db) == [fn.__name__ for fn in MIGRATIONS]
    assert migrate(db) == []
    assert set(db.table_names()) >= {
        "runs",
        "candidates",
        "evaluations",
        "attempts",
        "llm_calls",
        "wm_snapshots",
        "_migrations",
    }
    assert {c.name for c in db["llm_calls"].columns} >= {
        "run_id",
        "call_key",
        "role",
        "model",
        "prompt",
        "reply",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "latency_s",
    }
    fks = {(fk.column, fk.other_table) for fk in db["evaluations"].foreign_keys}
    assert ("candidate_id", "candidates") in fks
    unique = [ix for ix in db["evaluations"].indexes if ix.unique]
    assert any(ix.columns == ["candidate_id", "eval_key"] for ix in unique)


def _store(tmp_path) -> Store:
    store = Store(tmp_path / "ws" / "ksearch.db")
    store.create_run(
        {"id": "r1", "task": "softmax", "model": "replay:x", "language": "triton", "device": "cpu", "config": {"a": 1}}
    )
    return store


def test_candidates_are_content_addressed(tmp_path):
    store = _store(tmp_path)
    a = Candidate(task="softmax", language="triton", code="def kernel(x): return x", entry_point="kernel")
    b = Candidate(task="softmax", language="triton", code="def kernel(x): return x", entry_point="kernel")
    c = Candidate(task="softmax", language="triton", code="def kernel(x): return x * 1", entry_point="kernel")
    assert store.ensure_candidate(a) == store.ensure_candidate(b) == a.id
    assert store.ensure_candidate(c) != a.id
    assert store.db["candidates"].count == 2
    assert a.id.startswith("sha256-v1:")
    assert store.get_candidate(a.id) == a


def test_evaluation_recorded_once_per_key(tmp_path):
    store = _store(tmp_path)
    cand = Candidate(task="softmax", language="triton", code="x = 1", entry_point="kernel")
    store.ensure_candidate(cand)
    first = Evaluation(verdict=Verdict.INCORRECT, device="cpu", log="first")
    second = Evaluation(verdict=Verdict.PASSED, device="cpu", log="second")
    eid1 = store.record_evaluation(cand.id, "k", first)
    eid2 = store.record_evaluation(cand.id, "k", second)
    assert eid1 == eid2
    found = store.find_evaluation(cand.id, "k")
    assert found is not None and found[1].log == "first"
    assert store.find_evaluation(cand.id, "other-key") is None
    assert store.db["evaluations"].count == 1


def test_llm_calls_idempotent_and_usage_per_role(tmp_path):
    store = _store(tmp_path)
    call = {
        "call_key": "plan:0:0",
        "role": "planner",
        "model": "m",
        "prompt": "p",
        "reply": "r",
        "input_tokens": 10,
        "output_tokens": 5,
        "cost_usd": 0.5,
        "latency_s": 1.0,
    }
    store.record_llm_call("r1", call)
    store.record_llm_call("r1", {**call, "reply": "other"})
    store.record_llm_call("r1", {**call, "call_key": "write:c1:1", "role": "coder", "input_tokens": 100})
    assert store.find_llm_call("r1", "plan:0:0")["reply"] == "r"
    usage = store.usage("r1")
    assert usage["planner"]["input_tokens"] == 10
    assert usage["coder"]["input_tokens"] == 100
    assert usage["total"]["input_tokens"] == 110 and usage["total"]["calls"] == 2
    assert usage["total"]["cost_usd"] == 1.0


def test_run_lookup_by_prefix_and_clear_error(tmp_path):
    import pytest

    from ksearch.errors import RunNotFoundError

    store = _store(tmp_path)
    assert store.get_run("r")["id"] == "r1"
    assert store.get_run("r1")["config"] == {"a": 1}
    with pytest.raises(RunNotFoundError):
        store.get_run("nope")


def test_light_reads_for_reports_and_live_views(tmp_path):
    store = _store(tmp_path)
    cand = Candidate(task="softmax", language="triton", code="x = 1", entry_point="kernel")
    store.ensure_candidate(cand)
    eid = store.record_evaluation(cand.id, "key-1", Evaluation(verdict=Verdict.PASSED, device="cpu"))
    assert store.get_evaluation_key(eid) == "key-1"
    before = store.activity_marker("r1")
    assert store.activity_marker("r1") == before
    store.record_llm_call(
        "r1",
        {
            "call_key": "plan:0:0",
            "role": "planner",
            "model": "m",
            "prompt": "p" * 10_000,
            "reply": "r",
            "input_tokens": 3,
            "output_tokens": 4,
            "cost_usd": 0.0,
            "latency_s": 1.0,
        },
    )
    [stats] = store.list_llm_call_stats("r1")
    assert "prompt" not in stats and "reply" not in stats and stats["input_tokens"] == 3 and stats["role"] == "planner"
    assert store.activity_marker("r1") != before
