"""Hardware counters as the model reads them: compact, every figure labelled, and a plain sentence when there are
none; kept beside their evaluation in the store and attached whenever it is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksearch.agent.counters_text import WHY_NONE, counters_request_hint, counters_text, kernel_line
from ksearch.agent.evidence_text import evidence_text
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.counters import CounterReport, CounterStatus
from ksearch.contracts.evaluation import Evaluation, Timing
from ksearch.store import Store
from ksearch.store.counters import find_counters, record_counters, run_spend
from ksearch.tools.counters.ncu_csv import parse_raw_page, range_of, shape_counters

NCU = Path(__file__).parents[1] / "tools" / "ncu"


def _report() -> CounterReport:
    launches = parse_raw_page((NCU / "raw_page.csv").read_text())
    shape_of = {
        launch.id: range_of(launch.name) for launch in parse_raw_page((NCU / "raw_page_by_range.csv").read_text())
    }
    shapes = shape_counters(launches, shape_of, ["b5", "b2"], {"b5": 402653184.0})
    return CounterReport(
        status=CounterStatus.COLLECTED,
        shapes=shapes,
        tool="ncu 2025.3.0.0",
        device="NVIDIA H100 80GB HBM3",
        wall_s=14.2,
    )


def _passed() -> Evaluation:
    timing = Timing(config="b5", median_ms=1.2, mean_ms=1.2, stdev_ms=0.01, samples=50)
    return Evaluation(
        verdict="passed", device="NVIDIA H100 80GB HBM3", timed=True, timings=[timing], score=1 / 1.2, latency_ms=1.2
    )


def test_a_kernel_line_carries_the_figures_a_kernel_engineer_reads_first() -> None:
    ln = _report().shapes[0].kernels[0]
    line = kernel_line(ln)
    assert line.startswith("_ln_proj_rows x2, 422.4 us; latency-bound; SOL compute 33 %, memory 45 %")
    for part in (
        "DRAM 40 %, L2 22 %, L2 hit 61 %",
        "tensor pipe 12 %",
        "occupancy 18 % of 25 % theoretical (limited by registers)",
        "162 regs/thread, 49.2 KB smem/block, block 256 x grid 4096 (3.1 waves)",
        "stalls long scoreboard 8.14, barrier 2.01, mio throttle 1.12",
    ):
        assert part in line, part


def test_the_block_names_the_tool_the_method_and_each_shapes_traffic() -> None:
    text = counters_text(_report())
    head, *rest = text.splitlines()
    assert "ncu 2025.3.0.0 on NVIDIA H100 80GB HBM3" in head and "base clocks" in head and "not the score" in head
    assert rest[0] == "  b5 (4 launches profiled): DRAM 1.88 GB moved, 4.7x the task's minimum 403 MB"
    assert rest[1].startswith("    _ln_proj_rows x2")
    assert any(line.startswith("  b2 (2 launches profiled): DRAM") for line in rest)
    assert len(text) < 2000  # compact: two shapes, five kernels


@pytest.mark.parametrize(
    ("status", "detail"),
    [
        (CounterStatus.NO_NCU, "ncu is not on PATH"),
        (CounterStatus.NO_PERMISSION, "ERR_NVGPUCTRPERM"),
        (CounterStatus.TIMEOUT, "killed after 240 s"),
        (CounterStatus.SKIPPED, "counters have taken 40 s against 200 s of evaluations"),
    ],
)
def test_no_counters_is_one_short_line_for_the_model_and_the_whole_reason_for_people(
    status: CounterStatus, detail: str
) -> None:
    report = CounterReport(status=status, detail=detail)
    text = counters_text(report)
    assert text == f"Hardware counters: not collected ({status.value}: {WHY_NONE[status]})"
    assert len(text) < 100 and detail not in text
    assert counters_text(report, detail=True) == f"{text}: {detail}"
    assert counters_text(None) == ""
    evaluation = _passed().model_copy(update={"counters": report})
    assert detail not in evidence_text(evaluation) and detail in evidence_text(evaluation, detail=True)


def test_the_evaluations_evidence_carries_its_counters() -> None:
    plain = evidence_text(_passed())
    assert "Hardware counters" not in plain
    text = evidence_text(_passed().model_copy(update={"counters": _report()}))
    assert "Per timed shape:" in text and "Hardware counters (ncu 2025.3.0.0" in text
    assert "counters_for" in counters_request_hint()


def test_the_store_keeps_counters_beside_the_evaluation_and_attaches_them(tmp_path: Path) -> None:
    store = Store(tmp_path / "ksearch.db")
    try:
        candidate = store.ensure_candidate(Candidate(task="trimul", language="triton", code="# k\n"))
        eid = store.record_evaluation(candidate, "key", _passed())
        assert store.get_evaluation(eid).counters is None and find_counters(store, eid) is None
        record_counters(store, eid, "run-1", _report())
        record_counters(store, eid, "run-1", CounterReport(status=CounterStatus.FAILED, detail="second"))
        assert store.get_evaluation(eid).counters == _report()  # the first report stays
        found = store.find_evaluation(candidate, "key")
        assert found is not None and found[1].counters == _report()
        store.record_attempt(
            {
                "run_id": "run-1",
                "cycle_id": "c1",
                "attempt": 1,
                "round_index": 0,
                "node_id": "root",
                "prompt_kind": "x",
                "candidate_id": candidate,
                "evaluation_id": eid,
                "verdict": "passed",
                "score": 1.0,
                "error": None,
            }
        )
        assert run_spend(store, "run-1") == (0.0, pytest.approx(14.2))
    finally:
        store.close()
