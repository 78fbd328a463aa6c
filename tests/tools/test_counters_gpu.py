"""On a GPU with Nsight Compute: an evaluation's evidence carries the hardware counters ncu read of its kernel, from
outside the kernel's process, within a bounded time. Skips without CUDA or without ncu."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksearch.contracts.counters import CounterStatus
from ksearch.tools.containment import policy
from ksearch.tools.counters.ncu_command import find_ncu

REPO = Path(__file__).resolve().parents[2]
SOFTMAX = REPO / "examples" / "softmax_expert.py"
COLLECTION_LIMIT_S = 120.0
"""One collection (the containment probe included) on a small task takes well under this."""

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(find_ncu() is None, reason="needs Nsight Compute (ncu on PATH, or KSEARCH_NCU)"),
]


def test_an_evaluations_evidence_carries_ncus_counters_of_its_kernel() -> None:
    from ksearch.agent.evidence_text import evidence_text
    from ksearch.flows.evaluate import evaluate_file

    evaluation = evaluate_file("softmax", SOFTMAX, device="cuda", counters=True, counter_shapes=2)
    assert evaluation.passed, evaluation.summary()
    report = evaluation.counters
    assert report is not None
    assert report.status == CounterStatus.COLLECTED, f"{report.status}: {report.detail}"
    assert report.tool.startswith("ncu 20") and report.layers and 0 < report.wall_s < COLLECTION_LIMIT_S
    layers = report.layers.split(" (")[0].split(",")
    assert "userns" in layers or "userns" not in policy.child_layers("cuda"), report.layers  # ncu inside, contained
    assert set(report.stages) >= {"ncu", "import"}, report.stages
    longest = sorted(evaluation.timings, key=lambda t: -t.headline_ms)[:2]
    assert [s.config for s in report.shapes] == [t.config for t in longest]
    for shape in report.shapes:
        assert shape.launches >= 1 and shape.dram_bytes is not None and shape.minimal_bytes
        kernel = shape.kernels[0]
        assert "softmax" in kernel.name
        assert kernel.registers is not None and kernel.registers > 0
        assert kernel.block_size is not None and kernel.grid_size is not None
        for figure in (kernel.compute_pct, kernel.memory_pct, kernel.dram_pct, kernel.achieved_occupancy_pct):
            assert figure is not None and 0.0 <= figure <= 100.0
        assert kernel.theoretical_occupancy_pct is not None and kernel.occupancy_limiter
        assert kernel.bound in ("compute", "memory", "latency") and kernel.stalls
    text = evidence_text(evaluation)
    assert "Hardware counters (ncu 20" in text
    print(text)  # for the record: what the model reads
    print(f"layers: {report.layers}; stages: {report.stages}")
