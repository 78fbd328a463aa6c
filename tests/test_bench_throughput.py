"""bench/throughput.py's check that no two evaluations were timed on one GPU at once (issue 12), read from a run's
store as the bench reads it."""

from __future__ import annotations

from pathlib import Path

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.store.store import Store
from tests.helpers.bench_scripts import load_bench


def test_overlaps_are_counted_per_gpu_and_touching_spans_do_not_overlap() -> None:
    throughput = load_bench("throughput")
    spans = [("GPU-a", 0.0, 1.0), ("GPU-a", 1.0, 2.0), ("GPU-b", 0.5, 1.5), ("GPU-a", 1.5, 3.0), ("GPU-b", 0.0, 0.6)]
    assert throughput.same_gpu_overlaps(spans) == 2  # a: [1, 2] with [1.5, 3]; b: [0, 0.6] with [0.5, 1.5]
    assert throughput.same_gpu_overlaps([("GPU-a", 0.0, 1.0), ("GPU-b", 0.0, 1.0)]) == 0  # two GPUs at once: fine
    assert throughput.same_gpu_overlaps([("GPU-a", 0.0, 5.0), ("GPU-a", 1.0, 2.0), ("GPU-a", 3.0, 4.0)]) == 2


def test_spans_are_read_from_the_store_by_the_checkers_gpu_name(tmp_path: Path) -> None:
    throughput = load_bench("throughput")
    store = Store(tmp_path / "ksearch.db")
    environments = [
        {"gpu_uuid": "GPU-a", "leased_device": "cuda:0", "timed_epoch_s": "100.000-101.500"},
        {"gpu_uuid": "GPU-a", "leased_device": "cuda:0", "timed_epoch_s": "101.000-102.000"},  # overlaps the first
        {"gpu_uuid": "", "leased_device": "cuda:1", "timed_epoch_s": "100.500-101.000"},  # no UUID: the lease names it
        {"leased_device": "cpu"},  # not timed: left out
    ]
    for index, environment in enumerate(environments):
        candidate_id = store.ensure_candidate(Candidate(task="trimul", language="triton", code=f"x = {index}\n"))
        store.record_evaluation(
            candidate_id, "key", Evaluation(verdict=Verdict.PASSED, device="H200", environment=environment)
        )
    store.close()
    spans = sorted(throughput.timed_spans(tmp_path / "ksearch.db"))
    assert spans == [("GPU-a", 100.0, 101.5), ("GPU-a", 101.0, 102.0), ("cuda:1", 100.5, 101.0)]
    assert throughput.same_gpu_overlaps(spans) == 1
    assert throughput.timed_spans(tmp_path / "missing.db") == []
