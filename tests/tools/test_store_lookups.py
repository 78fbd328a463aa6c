"""The store's lookups that key on the evaluation key: an evaluation is found only for its own (candidate, key), a
comparison only for its own (incumbent, challenger, key) in that order; the first record of a key is kept."""

from __future__ import annotations

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.store import Store, ensure_comparison, find_comparison


def _store(tmp_path) -> tuple[Store, str, str]:
    store = Store(tmp_path / "ksearch.db")
    a = store.ensure_candidate(Candidate(task="softmax", language="triton", code="a = 1"))
    b = store.ensure_candidate(Candidate(task="softmax", language="triton", code="b = 2"))
    return store, a, b


def test_an_evaluation_is_found_only_under_its_own_candidate_and_key(tmp_path) -> None:
    store, a, b = _store(tmp_path)
    evaluation = Evaluation(verdict=Verdict.PASSED, device="cuda", latency_ms=0.5, score=2.0, timed=True)
    eid = store.record_evaluation(a, "key-1", evaluation)
    found = store.find_evaluation(a, "key-1")
    assert found is not None and found[0] == eid and found[1] == evaluation
    assert store.find_evaluation(b, "key-1") is None
    assert store.find_evaluation(a, "key-2") is None
    assert store.get_evaluation(eid) == evaluation and store.get_evaluation_key(eid) == "key-1"


def test_evaluation_ids_depend_on_both_the_candidate_and_the_key(tmp_path) -> None:
    store, a, b = _store(tmp_path)
    ids = {Store.evaluation_id(a, "k1"), Store.evaluation_id(a, "k2"), Store.evaluation_id(b, "k1")}
    assert len(ids) == 3 and all(i.startswith("ev-") and len(i) == 23 for i in ids)
    assert Store.evaluation_id(a, "k1") == Store.evaluation_id(a, "k1")
    first = store.record_evaluation(a, "k1", Evaluation(verdict=Verdict.PASSED, device="cpu"))
    other = store.record_evaluation(a, "k2", Evaluation(verdict=Verdict.INCORRECT, device="cpu"))
    assert first == Store.evaluation_id(a, "k1") and other == Store.evaluation_id(a, "k2")
    assert (
        store.get_evaluation(first).verdict == Verdict.PASSED
        and store.get_evaluation(other).verdict == Verdict.INCORRECT
    )
    row = store.db["evaluations"].get(first)
    assert (row["candidate_id"], row["eval_key"], row["verdict"], row["device"]) == (a, "k1", "passed", "cpu")


def test_the_evaluation_row_holds_the_numbers_reports_read(tmp_path) -> None:
    store, a, _ = _store(tmp_path)
    eid = store.record_evaluation(
        a, "k", Evaluation(verdict=Verdict.PASSED, device="cuda:1", latency_ms=0.25, score=4.0, timed=True)
    )
    row = store.db["evaluations"].get(eid)
    assert (row["score"], row["latency_ms"], row["device"]) == (4.0, 0.25, "cuda:1")


def test_a_comparison_is_found_only_for_its_pair_in_its_order_and_its_key(tmp_path) -> None:
    store, a, b = _store(tmp_path)
    record = {"speedup": 1.2, "ci_low": 1.1, "ci_high": 1.3, "improved": True, "per_config": [{"config": "x"}]}
    ensure_comparison(store, a, b, "k", record)
    assert find_comparison(store, a, b, "k") == record
    assert find_comparison(store, b, a, "k") is None
    assert find_comparison(store, a, b, "other") is None
    ensure_comparison(store, a, b, "k", {**record, "speedup": 9.0})  # a second record of the key keeps the first
    assert find_comparison(store, a, b, "k")["speedup"] == 1.2
    row = next(store.db["comparisons"].rows)
    assert (row["incumbent_id"], row["challenger_id"], row["eval_key"]) == (a, b, "k")
    assert (row["speedup"], row["ci_low"], row["ci_high"], row["improved"]) == (1.2, 1.1, 1.3, 1)


def test_a_refused_comparison_is_stored_as_not_improved(tmp_path) -> None:
    store, a, b = _store(tmp_path)
    ensure_comparison(store, a, b, "k", {"speedup": 1.01, "ci_low": 0.95, "ci_high": 1.07, "improved": False})
    assert next(store.db["comparisons"].rows)["improved"] == 0
    assert find_comparison(store, a, b, "k")["improved"] is False
