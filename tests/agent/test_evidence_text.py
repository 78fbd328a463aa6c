"""The evidence text the planner and the coder read: per shape time, roofline position and the difference to a
reference (marked when it is within noise), the per-kernel profile and the compiled kernels' resources."""

from __future__ import annotations

import pytest

from ksearch.agent.evidence_text import (
    aggregate_change,
    evidence_text,
    parent_change,
    perf_text,
    profile_line,
    ranked,
    resources_text,
    roofline_summary,
    score_weights,
    shape_lines,
    within_noise,
)
from ksearch.contracts.evaluation import (
    Evaluation,
    KernelResources,
    ProfiledKernel,
    RooflinePoint,
    ShapeProfile,
    Timing,
    TunedChoice,
)
from ksearch.tasks.softmax import SoftmaxTask


def _timing(config: str, ms: float, stdev: float = 0.001, samples: int = 100) -> Timing:
    return Timing(
        config=config,
        median_ms=ms,
        mean_ms=ms,
        stdev_ms=stdev,
        samples=samples,
        method="gpumode-benchmark",
        headline="mean",
    )


def _evaluation(*timings: Timing, **extra: object) -> Evaluation:
    latency = timings[0].headline_ms if timings else None
    return Evaluation(
        verdict="passed",
        device="NVIDIA H100 80GB HBM3",
        timed=True,
        timings=list(timings),
        score=1 / latency if latency else None,
        latency_ms=latency,
        **extra,
    )  # type: ignore[arg-type]


def test_a_difference_inside_the_noise_says_so() -> None:
    assert within_noise(_timing("b0", 1.01), _timing("b0", 1.0))  # 1 %: below the 2 % floor
    assert not within_noise(_timing("b0", 1.10), _timing("b0", 1.0))
    noisy = _timing("b0", 1.10, stdev=0.5, samples=10)  # standard error 0.16 ms
    assert within_noise(noisy, _timing("b0", 1.0, stdev=0.5, samples=10))
    lines = shape_lines(
        _evaluation(_timing("b0", 1.01), _timing("b1", 0.5)),
        _evaluation(_timing("b0", 1.0), _timing("b1", 1.0)),
        "cycle best",
    )
    assert lines[0].endswith("; cycle best 1.0000 ms, x0.99 (within noise)")
    assert lines[1].endswith("; cycle best 1.0000 ms, x2.00 (faster)")


def test_each_timed_shape_carries_its_roofline_position() -> None:
    point = RooflinePoint(
        config="b4",
        measured_ms=1.98,
        floor_ms=0.31,
        memory_ms=0.31,
        compute_ms=0.28,
        bound="memory",
        fraction=0.31 / 1.98,
        dtype="bf16",
        gpu="H100 SXM5 80GB",
    )
    ev = _evaluation(_timing("b4", 1.98), roofline=[point])
    assert shape_lines(ev)[0].endswith("; floor 0.31 ms (memory-bound), 16% of roofline")
    assert roofline_summary(ev) == "roofline: mean 16% of roofline; per shape b4 16% (memory)"
    assert "memory-bound" in point.describe() and "16% of roofline" in point.describe()


def test_every_shape_gets_its_profile_set_against_the_timed_statistic_and_resources_are_bounded() -> None:
    kernels = [ProfiledKernel(name=f"k{i}", launches=1 + i, time_ms=0.1, share=0.05) for i in range(3)]
    shapes = [
        ShapeProfile(
            config=f"b{i}", call_ms=2.0, kernel_ms=0.3, host_gap_ms=1.7, launches=3, kernels=kernels, other_kernels=2
        )
        for i in range(7)
    ]
    ev = _evaluation(
        *[_timing(f"b{i}", 0.5 + i / 10) for i in range(7)],
        tuning=[TunedChoice(config="b6", kernel="_k", choice="BM=64, num_warps=4", configs=12)],
        profile=shapes,
        resources=[
            KernelResources(name="_k", shared_bytes=1024, registers=40, spilled_bytes=0, num_warps=4, num_stages=3)
        ]
        * 12,
    )
    lines = shape_lines(ev)
    assert len(lines) == 15  # every shape: its timing, then its kernels (and at b6, what its sweep kept)
    assert lines[2] == "    autotune kept: _k: BM=64, num_warps=4 (of 12 configs)"
    assert lines[0].startswith("  b6: mean 1.1000 ms") and lines[-2].startswith("  b0: mean 0.5000 ms")
    assert (
        lines[1] == "    kernels 0.3 ms in 3 launches, 27% of the timed 1.1 ms: k0 0.1 ms (33%); k1 0.1 ms x2 (33%); "
        "k2 0.1 ms x3 (33%); 2 more kernels"
    )
    assert "host gap" not in "\n".join(lines) and "2 ms" not in "\n".join(lines)  # never the profiled call's wall time
    text = resources_text(ev)
    assert text.splitlines()[0] == "Compiled kernels (for NVIDIA H100 80GB HBM3):"
    assert text.splitlines()[1] == "  _k: 1024 B shared memory, 40 registers/thread, num_warps=4, num_stages=3"
    assert text.splitlines()[-1] == "  ... 2 more" and len(text.splitlines()) == 12
    full = evidence_text(ev)
    assert full.startswith("Per timed shape:\n  b6") and "\n    kernels 0.3 ms" in full and "Compiled kernels" in full
    assert evidence_text(Evaluation(verdict="compile_error", device="cpu")) == ""


def test_a_profiled_call_colder_than_the_timed_ones_says_so() -> None:
    profile = ShapeProfile(config="b0", call_ms=1.0, kernel_ms=0.6, host_gap_ms=0.4, launches=1, kernels=[])
    assert profile_line(profile, 0.5).startswith("kernels 0.6 ms in 1 launches, 120% of the timed 0.5 ms (one profiled")
    assert profile_line(profile, None) == "kernels 0.6 ms in 1 launches: "


def test_a_shapes_weight_is_measured_with_the_tasks_score() -> None:
    timings = [_timing("b0", 0.3), _timing("b1", 3.0)]
    geomean = score_weights(SoftmaxTask().score, timings)
    assert geomean == {"b0": pytest.approx(0.5, abs=1e-3), "b1": pytest.approx(0.5, abs=1e-3)}
    assert [t.config for t in ranked(timings, geomean)] == ["b1", "b0"]  # equal weights: longest first

    def mean_speedup(ts: list[Timing]) -> tuple[float, float]:  # a baseline of 1 ms per shape
        speedups = [1.0 / t.headline_ms for t in ts]
        return 1.0, sum(speedups) / len(speedups)

    weights = score_weights(mean_speedup, timings)
    assert weights["b0"] > 0.9 > 0.1 > weights["b1"]  # the shape with the larger speedup weighs more
    assert [t.config for t in ranked(timings, weights)] == ["b0", "b1"]
    text = evidence_text(_evaluation(*timings), score=mean_speedup)
    assert text.startswith("Per timed shape, by weight in the score, heaviest first") and "b0 0.91, b1 0.09" in text
    assert "each of the 2 shapes weighs 1/2" in evidence_text(_evaluation(*timings), score=SoftmaxTask().score)
    assert score_weights(SoftmaxTask().score, timings[:1]) == {"b0": 1.0}


def test_the_aggregate_change_has_a_noise_band_from_the_spread() -> None:
    steady = _evaluation(_timing("b0", 1.0), _timing("b1", 2.0))
    assert steady.latency_ms == 1.0  # the helper's: the first shape's
    slower = _evaluation(_timing("b0", 1.017), _timing("b1", 2.0))
    change = aggregate_change(slower, steady)
    assert change is not None and change.within_noise and change.describe("parent") == "x0.98 vs parent (within noise)"
    far_ev = _evaluation(_timing("b0", 1.1))
    far = aggregate_change(far_ev, steady)
    assert far is not None and not far.within_noise and far.describe("parent") == "x0.91 vs parent (slower)"
    noisy = _evaluation(_timing("b0", 1.1, stdev=0.5, samples=10))  # 16 % standard error
    assert aggregate_change(noisy, _evaluation(_timing("b0", 1.0, stdev=0.5, samples=10))).within_noise  # type: ignore[union-attr]
    assert aggregate_change(Evaluation(verdict="compile_error", device="cpu"), steady) is None
    # without the parent's evaluation: the scores against the floor alone
    assert parent_change(slower, None, 1.0).within_noise  # type: ignore[union-attr]
    assert not parent_change(far_ev, None, 1.0).within_noise  # type: ignore[union-attr]
    assert parent_change(slower, None, None) is None


def test_results_are_given_in_ms_and_a_score_only_where_it_is_not_one_over_the_latency() -> None:
    assert perf_text(0.5, 2.0) == "0.5000 ms"
    assert perf_text(0.5, 1.3) == "0.5000 ms (the task's score 1.3, higher is better)"
    assert perf_text(None, None) == "correct, not timed"
