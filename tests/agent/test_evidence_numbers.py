"""The arithmetic behind the evidence text, at figures where each term matters: the noise band of one shape and of a
geometric mean, a change against the parent by evaluations or by scores, shape weights by the task's score, and the
guards a zero or a missing figure takes (issue 57)."""

from __future__ import annotations

import math

import pytest

from ksearch.agent.evidence_text import (
    aggregate_change,
    parent_change,
    perf_text,
    profile_line,
    ranked,
    resources_text,
    roofline_summary,
    score_weights,
    shape_lines,
    versus,
    within_noise,
)
from ksearch.contracts.evaluation import (
    Evaluation,
    KernelResources,
    ProfiledKernel,
    RooflinePoint,
    ShapeProfile,
    Timing,
)
from ksearch.tasks.softmax import SoftmaxTask


def _t(config: str, ms: float, stdev: float = 0.0, n: int = 100, headline: str = "mean") -> Timing:
    return Timing(config=config, median_ms=ms, mean_ms=ms, stdev_ms=stdev, samples=n, headline=headline)


def _ev(latency: float | None, *timings: Timing, **extra: object) -> Evaluation:
    timed = latency is not None
    return Evaluation(
        verdict="passed",
        device="gpu",
        timed=timed,
        latency_ms=latency,
        score=1 / latency if timed else None,
        timings=list(timings),
        **extra,
    )  # type: ignore[arg-type]


def test_one_shapes_band_is_two_standard_errors_of_the_means_or_the_floor() -> None:
    # n = 100, stdev 0.2 at 2.0 ms: standard errors of 1 % each, a band of 2.8 %; a 5 % difference is outside it
    assert not within_noise(_t("b", 2.1, 0.2), _t("b", 2.0, 0.2))
    assert within_noise(_t("b", 2.05, 0.2), _t("b", 2.0, 0.2))  # 2.5 %: inside
    # one sample each, stdev 0.2: errors of 10 %; a 10 % difference is inside two of them, not one
    assert within_noise(_t("b", 2.2, 0.2, n=1), _t("b", 2.0, 0.2, n=1))
    # the difference is relative to the old time: 0.1 / 2.0 = 5 % against a band of 4.9 %, not 0.1 / 2.1
    assert not within_noise(_t("b", 2.1, 0.0355, n=1), _t("b", 2.0, 0.0355, n=1))
    assert versus(_t("b", 2.1, 0.0355, n=1), _t("b", 2.0, 0.0355, n=1), "base") == "; base 2.0000 ms, x0.95 (slower)"
    assert not within_noise(_t("b", 1.0), _t("b", 0.0))  # a zero old time is never "within noise"
    assert not within_noise(_t("b", 0.0, 0.1), _t("b", 1.0))  # a zero time has no relative error to divide
    assert not within_noise(_t("b", 1.05, 0.5, n=0), _t("b", 1.0, 0.5, n=0))  # no samples: the 2 % floor alone
    assert within_noise(_t("b", 1.0, 0.5, n=0), _t("b", 1.01, 0.5, n=0))  # no samples: the floor alone
    assert versus(_t("b", 0.0), _t("b", 1.0), "base") == ""  # nothing to divide by


def test_a_geometric_means_band_shrinks_with_the_shapes() -> None:
    # two shapes with 5 % errors each: the mean's error is 5 % / sqrt(2) per evaluation, 5 % combined, a 10 % band
    spread = [_t("a", 1.0, 0.1, n=4), _t("b", 1.0, 0.1, n=4)]
    base = _ev(1.0, *spread)
    assert not aggregate_change(_ev(1.0 / 0.85, *spread), base).within_noise  # type: ignore[union-attr]
    assert aggregate_change(_ev(1.05, *spread), base).within_noise  # type: ignore[union-attr]
    change = aggregate_change(_ev(1.15, *spread), base)
    assert change is not None and not change.within_noise and change.speedup == pytest.approx(1 / 1.15)
    assert aggregate_change(_ev(1.0 / 0.95, *spread), base).within_noise  # type: ignore[union-attr]
    # without timings there is no spread: the floor alone
    assert not aggregate_change(_ev(1.5), _ev(1.0)).within_noise  # type: ignore[union-attr]
    assert aggregate_change(_ev(1.0), _ev(None)) is None and aggregate_change(_ev(None), _ev(1.0)) is None
    assert aggregate_change(_ev(4.06), _ev(4.0)).within_noise  # type: ignore[union-attr]  # 0.06 / 4.0 = 1.5 %
    # relative to the old latency: 0.1 / 2.0
    far = aggregate_change(_ev(2.1), _ev(2.0))
    assert far is not None and not far.within_noise and far.describe("p") == "x0.95 vs p (slower)"


def test_a_change_against_the_parent_by_its_evaluation_or_by_scores() -> None:
    noisy = [_t("a", 1.0, 0.5, n=4)]
    child, parent = _ev(1.05, *noisy), _ev(1.0, *noisy)
    by_evaluations = parent_change(child, parent, 1.0)
    assert by_evaluations is not None and by_evaluations.within_noise  # the spreads' band, not the 2 % floor
    by_scores = parent_change(child, None, 1.0)
    assert by_scores is not None and not by_scores.within_noise and by_scores.speedup == pytest.approx(1 / 1.05)
    assert parent_change(_ev(1.0), None, 0.5).speedup == pytest.approx(2.0)  # type: ignore[union-attr]
    assert parent_change(_ev(1.0), _ev(None), 0.5).speedup == pytest.approx(2.0)  # type: ignore[union-attr]
    assert parent_change(_ev(None), None, 1.0) is None
    assert parent_change(_ev(1.0), None, None) is None
    assert parent_change(_ev(1.0), None, 0.0) is None
    zero = Evaluation(verdict="passed", device="gpu", timed=True, score=0.0, latency_ms=1.0)
    assert parent_change(zero, None, 1.0) is None


def test_a_time_in_ms_with_or_without_a_score() -> None:
    assert perf_text(0.5, None) == "0.5000 ms"
    assert perf_text(0.5, 2.0 * (1 + 1.5e-6)) == "0.5000 ms (the task's score 2, higher is better)"
    assert perf_text(None, 3.0) == "score 3 (higher is better)"


def test_weights_follow_the_statistic_the_score_uses() -> None:
    score = SoftmaxTask().score
    for headline in ("mean", "median"):
        timings = [_t("a", 1.0, headline=headline), _t("b", 2.0, headline=headline)]
        weights = score_weights(score, timings)
        assert weights["a"] == pytest.approx(0.5, abs=1e-9) and weights["b"] == pytest.approx(0.5, abs=1e-9)

    def first_only(ts: list[Timing]) -> tuple[float, float]:
        return ts[0].headline_ms, 1 / ts[0].headline_ms

    assert score_weights(first_only, [_t("a", 1.0), _t("b", 2.0)]) == {"a": pytest.approx(1.0), "b": 0.0}
    weights = {"a": 0.4, "b": 0.6}
    timings = [_t("a", 3.0), _t("b", 1.0)]
    assert [t.config for t in ranked(timings, weights)] == ["b", "a"]
    assert [line.split(":")[0].strip() for line in shape_lines(_ev(1.0, *timings), weights=weights)] == ["b", "a"]


def test_near_equal_weights_read_as_equal_and_unequal_ones_are_listed() -> None:
    def tilted(ts: list[Timing]) -> tuple[float, float]:  # a 0.498, b 0.502: 0.004 apart, equal to the eye
        return 1.0, ts[0].headline_ms ** -0.498 * ts[1].headline_ms ** -0.502

    def leaning(ts: list[Timing]) -> tuple[float, float]:  # a 0.496, b 0.504: 0.008 apart, listed
        return 1.0, ts[0].headline_ms ** -0.496 * ts[1].headline_ms ** -0.504

    from ksearch.agent.evidence_text import evidence_text

    timings = [_t("a", 1.0), _t("b", 2.0)]
    assert "each of the 2 shapes weighs 1/2" in evidence_text(_ev(1.0, *timings), score=tilted)
    assert "by weight in the score, heaviest first" in evidence_text(_ev(1.0, *timings), score=leaning)
    assert math.isclose(score_weights(leaning, timings)["b"], 0.504, abs_tol=1e-6)


def test_a_profile_without_a_timed_figure_or_kernel_time_divides_by_nothing() -> None:
    kernels = [ProfiledKernel(name="k", launches=1, time_ms=0.0, share=0.0)]
    idle = ShapeProfile(config="b", call_ms=1.0, kernel_ms=0.0, host_gap_ms=1.0, launches=1, kernels=kernels)
    assert profile_line(idle, 0.0) == "kernels 0 ms in 1 launches: k 0 ms"
    assert profile_line(idle, 0.5) == "kernels 0 ms in 1 launches, 0% of the timed 0.5 ms: k 0 ms"
    named = idle.model_copy(update={"kernels": [kernels[0].model_copy(update={"name": "k" * 70})]})
    assert profile_line(named, None) == f"kernels 0 ms in 1 launches: {'k' * 60} 0 ms"
    full = idle.model_copy(update={"kernel_ms": 0.5, "kernels": []})
    assert profile_line(full, 0.5) == "kernels 0.5 ms in 1 launches, 100% of the timed 0.5 ms: "


def test_resources_name_the_target_and_list_up_to_their_limit_and_the_roofline_mean() -> None:
    resource = KernelResources(name="k", shared_bytes=0, registers=32, num_warps=4, num_stages=1)
    aimed = _ev(None, resources=[resource] * 2, environment={"target_gpu": "h100"})
    assert resources_text(aimed, limit=2) == (
        "Compiled kernels (for h100):\n  k: 0 B shared memory, 32 registers/thread, num_warps=4, num_stages=1\n"
        "  k: 0 B shared memory, 32 registers/thread, num_warps=4, num_stages=1"
    )
    points = [
        RooflinePoint(
            config=c,
            measured_ms=1.0,
            floor_ms=f,
            memory_ms=f,
            compute_ms=0.0,
            bound="memory",
            fraction=f,
            dtype="bf16",
            gpu="H100",
        )
        for c, f in (("a", 0.2), ("b", 0.4))
    ]
    assert roofline_summary(_ev(1.0, roofline=points)).startswith("roofline: mean 30% of roofline; per shape a 20%")
