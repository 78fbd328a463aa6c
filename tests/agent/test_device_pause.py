"""A paired comparison or a skill's edge measurement that waits for the device (a run driven with --prompts-only) is a
pause that must reach LangGraph, not a failed measurement: caught as one, the incumbent would be kept for good."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from langgraph.errors import GraphInterrupt

from ksearch.agent.skill_use import _measure_edge
from ksearch.agent.state import BestRef
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Timing, Verdict
from ksearch.nodes.prune import promotion_decision
from ksearch.store import Store


def _context(tmp_path: Path) -> tuple[SimpleNamespace, str, str]:
    store = Store(tmp_path / "ksearch.db")
    ids = [store.ensure_candidate(Candidate(task="softmax", language="triton", code=f"# kernel {i}\n")) for i in (1, 2)]
    timed = Evaluation(
        verdict=Verdict.PASSED,
        device="cuda",
        configs_passed=1,
        configs_total=1,
        timed=True,
        score=1.0,
        timings=[Timing(config="b0", median_ms=1.0, mean_ms=1.0, stdev_ms=0.01, samples=10)],
    )
    for cid in ids:
        store.record_evaluation(cid, "key", timed)

    def waits_for_the_device(*args, **kwargs):
        raise GraphInterrupt(())

    @contextmanager
    def lease():
        yield "cuda"

    ctx = SimpleNamespace(
        compare=waits_for_the_device,
        confirm_bests=False,
        store=store,
        eval_key="key",
        device_lease=lease,
        eval_request=lambda candidate, device: (candidate.id, device),
        config=SimpleNamespace(promotion_rounds=5),
        run_id="r",
    )
    return ctx, ids[0], ids[1]


def test_a_promotion_whose_comparison_waits_for_the_device_pauses(tmp_path):
    ctx, incumbent, challenger = _context(tmp_path)
    best = BestRef(candidate_id=incumbent, evaluation_id="e", node_id="n", score=1.0)
    with pytest.raises(GraphInterrupt):
        promotion_decision(ctx, best, challenger, 2.0)  # type: ignore[arg-type]


def test_a_skill_edge_whose_comparison_waits_for_the_device_pauses(tmp_path):
    ctx, base, candidate = _context(tmp_path)
    with pytest.raises(GraphInterrupt):
        _measure_edge(ctx, base, candidate)  # type: ignore[arg-type]
