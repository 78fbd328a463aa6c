"""bench/flashinfer.py without a GPU: it imports (an earlier version imported a name that no longer existed and no
test noticed), and its table puts every kernel's robust and flashinfer-method latencies side by side per workload,
with the mean speedups and verdicts; the evaluator is replaced by a stand-in that returns fixed timings."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.helpers.bench_scripts import load_bench

pytest.importorskip("flashinfer_bench", reason="flashinfer-bench is not installed")


bench = load_bench("flashinfer")


def _timing(config: str, ms: float) -> SimpleNamespace:
    return SimpleNamespace(config=config, headline_ms=ms)


def test_measure_times_the_reference_then_each_solution_and_the_table_shows_them_side_by_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gqa = bench.defs.GQA_DECODE
    asked: list[tuple[str, str]] = []

    def baseline(task, device, timing_method):  # noqa: ANN001, ANN202
        asked.append(("reference", timing_method))
        names = [c.name for c in task.benchmark_configs("cuda")]
        evaluation = SimpleNamespace(verdict="passed", configs_passed=12, configs_total=12, device="NVIDIA H100")
        return {n: 1.0 for n in names}, evaluation

    def evaluate(request):  # noqa: ANN001, ANN202
        asked.append((request.candidate.language, request.timing_method))
        task = bench.resolve_task(request.task)
        assert task.baseline_ms, "solutions are scored against the reference's latencies"
        timings = [
            _timing(c.name, 0.25 if request.candidate.language == "triton" else 0.5)
            for c in task.benchmark_configs("cuda")
        ]
        return SimpleNamespace(
            verdict="passed",
            configs_passed=12,
            configs_total=12,
            device="NVIDIA H100",
            passed=True,
            timings=timings,
            score=task.score(timings)[1],
            log="",
        )

    monkeypatch.setattr(bench, "measure_flashinfer_baseline", baseline)
    monkeypatch.setattr(bench, "evaluate", evaluate)
    columns = [
        c
        for method in ("robust", "flashinfer")
        for c in bench.measure(gqa, method, "cuda", tmp_path, 3, ["triton", "cuda"])
    ]
    assert asked == [
        ("reference", "robust"),
        ("triton", "robust"),
        ("cuda", "robust"),
        ("reference", "flashinfer"),
        ("triton", "flashinfer"),
        ("cuda", "flashinfer"),
    ]
    text = bench.table(gqa, columns)
    lines = text.splitlines()
    assert lines[2] == (
        "| workload | reference robust | ours (Triton) robust | ours (CUDA) robust | reference flashinfer "
        "| ours (Triton) flashinfer | ours (CUDA) flashinfer |"
    )
    rows = [line for line in lines if line.startswith("| gqa-")]
    assert len(rows) == 3 and all(
        row.endswith("| 1.0000 | 0.2500 | 0.5000 | 1.0000 | 0.2500 | 0.5000 |") for row in rows
    )
    assert "| mean speedup over the reference |  | 4.00x | 2.00x |  | 4.00x | 2.00x |" in lines
    assert "NVIDIA H100" in lines[0]


def test_a_failing_reference_is_reported_and_its_solutions_are_not_timed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def baseline(task, device, timing_method):  # noqa: ANN001, ANN202
        raise bench.defs.FlashInferError("the reference of x did not pass on cuda: crashed")

    monkeypatch.setattr(bench, "measure_flashinfer_baseline", baseline)
    monkeypatch.setattr(bench, "evaluate", lambda request: pytest.fail("a solution was timed without a baseline"))
    columns = bench.measure(bench.defs.MOE, "robust", "cuda", tmp_path, 2, ["triton"])
    assert [c.kernel for c in columns] == ["reference"]
    assert "did not pass" in bench.table(bench.defs.MOE, columns)
