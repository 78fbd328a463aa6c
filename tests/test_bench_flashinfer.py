"""bench/flashinfer.py without a GPU: it imports (an earlier version imported a name that no longer existed and no
test noticed), and its table puts every kernel's robust and flashinfer-method latencies side by side per workload,
with the mean speedups and verdicts; the evaluator is replaced by a stand-in that returns fixed timings."""

from __future__ import annotations

import sys
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
        row.endswith("| 1.0000 | 0.2500 (4.0x) | 0.5000 (2.0x) | 1.0000 | 0.2500 (4.0x) | 0.5000 (2.0x) |")
        for row in rows
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


def _stand_ins(monkeypatch: pytest.MonkeyPatch, production: object) -> list[str]:
    """The reference at 1 ms, the Triton solution at 0.25 ms, and ``production`` standing in for FlashInfer's."""
    asked: list[str] = []

    def baseline(task, device, timing_method):  # noqa: ANN001, ANN202
        asked.append("reference")
        evaluation = SimpleNamespace(verdict="passed", configs_passed=3, configs_total=3, device="NVIDIA H100")
        return {c.name: 1.0 for c in task.benchmark_configs("cuda")}, evaluation

    def evaluate(request):  # noqa: ANN001, ANN202
        asked.append(request.candidate.language)
        task = bench.resolve_task(request.task)
        timings = [_timing(c.name, 0.25) for c in task.benchmark_configs("cuda")]
        return SimpleNamespace(
            verdict="passed",
            configs_passed=3,
            configs_total=3,
            device="NVIDIA H100",
            passed=True,
            timings=timings,
            score=task.score(timings)[1],
            log="",
        )

    def measure_production(task, device, method):  # noqa: ANN001, ANN202
        asked.append("production")
        assert task.baseline_ms, "FlashInfer's kernel is scored against the reference's latencies too"
        return production(task)

    monkeypatch.setattr(bench, "measure_flashinfer_baseline", baseline)
    monkeypatch.setattr(bench, "evaluate", evaluate)
    monkeypatch.setattr(bench, "measure_flashinfer_production", measure_production)
    return asked


def test_production_is_timed_after_the_solutions_with_its_speedups_and_where_we_lose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def production(task):  # noqa: ANN001, ANN202
        configs = [c.name for c in task.benchmark_configs("cuda")]
        timings = [_timing(name, 0.5 if i else 0.125) for i, name in enumerate(configs)]  # beats ours on the first
        return SimpleNamespace(
            verdict="passed",
            configs_passed=3,
            configs_total=3,
            device="NVIDIA H100",
            passed=True,
            timings=timings,
            score=task.score(timings)[1],
            log="",
        )

    asked = _stand_ins(monkeypatch, production)
    gqa = bench.defs.GQA_DECODE
    columns = bench.measure(gqa, "robust", "cuda", tmp_path, 3, ["triton"], production=True)
    assert asked == ["reference", "triton", "production"]
    lines = bench.table(gqa, columns).splitlines()
    assert lines[2] == "| workload | reference robust | ours (Triton) robust | FlashInfer 0.7.4 robust |"
    rows = [line for line in lines if line.startswith("| gqa-")]
    assert rows[0].endswith("| 1.0000 | 0.2500 (4.0x) | 0.1250 (8.0x) |")
    assert rows[1].endswith("| 1.0000 | 0.2500 (4.0x) | 0.5000 (2.0x) |")
    first = rows[0].split(" | ")[0].removeprefix("| ")
    assert lines[-1] == f"- ours (Triton) robust is slower than FlashInfer 0.7.4 on {first}"
    # Without --production, or for MLA prefill (no production module), nothing of FlashInfer's is timed.
    asked.clear()
    bench.measure(gqa, "robust", "cuda", tmp_path, 3, ["triton"])
    bench.measure(bench.defs.MLA_PREFILL, "robust", "cuda", tmp_path, 3, ["triton"], production=True)
    assert "production" not in asked


def test_a_failing_production_kernel_is_one_line_and_the_bench_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = "Traceback (most recent call last):\n  File x\nRuntimeError: Ninja build failed.\n  more detail\n"

    def production(task):  # noqa: ANN001, ANN202
        return SimpleNamespace(
            verdict="runtime_error",
            configs_passed=0,
            configs_total=3,
            device="NVIDIA H100",
            passed=False,
            timings=[],
            score=None,
            log=log,
        )

    _stand_ins(monkeypatch, production)
    columns = bench.measure(bench.defs.MLA_DECODE, "robust", "cuda", tmp_path, 2, ["triton"], production=True)
    assert [c.kernel for c in columns] == ["reference", "triton", "production"]
    assert columns[-1].error == "RuntimeError: Ninja build failed."
    assert "- FlashInfer 0.7.4 robust: RuntimeError: Ninja build failed." in bench.table(bench.defs.MLA_DECODE, columns)


def test_production_without_flashinfer_says_why_in_one_line_and_times_the_rest(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[bool] = []
    monkeypatch.setattr(bench, "flashinfer_unavailable", lambda: "flashinfer is not installed: pip install x")
    monkeypatch.setattr(bench, "measure", lambda *args: seen.append(args[-1]) or [])
    monkeypatch.setattr(bench, "table", lambda definition, columns: "")
    monkeypatch.setattr(sys, "argv", ["flashinfer.py", "--defs", "gqa", "--methods", "robust", "--production"])
    monkeypatch.delenv("OUT", raising=False)
    assert bench.main() == 0
    assert "production baseline: flashinfer is not installed: pip install x" in capsys.readouterr().out
    assert seen == [False]
