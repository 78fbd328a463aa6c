"""Timing statistics pinned to textbook values, stop rules at each of their edges, and the physics floor at its own
(``ksearch.tools.timing.stats`` and ``roofline``). Every sample set is small enough to work out by hand; the working
is in the comments."""

from __future__ import annotations

import math

import pytest

from ksearch.tools.timing.roofline import FLOOR_FACTOR, device_peak, physics_floor
from ksearch.tools.timing.stats import (
    gpumode_should_stop,
    mean_ci,
    relative_standard_error,
    robust_should_stop,
    summarize,
    t_quantile_975,
)

# ---- relative standard error ----------------------------------------------------------------------------------------


def test_relative_standard_error_is_the_sample_stdev_over_root_n_over_the_mean() -> None:
    # [1, 3]: mean 2, sample variance ((1)^2 + (1)^2) / (2 - 1) = 2, SE sqrt(2 / 2) = 1, RSE 1 / 2
    assert relative_standard_error([1.0, 3.0]) == 0.5
    # [1, 2, 3, 4]: mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3, SE sqrt(5/3 / 4), RSE / 2.5
    assert relative_standard_error([1.0, 2.0, 3.0, 4.0]) == pytest.approx(math.sqrt(5 / 12) / 2.5, rel=1e-12)
    # [2, 4, 6]: mean 4, variance (4 + 0 + 4) / 2 = 4, SE 2 / sqrt(3), RSE / 4
    assert relative_standard_error([2.0, 4.0, 6.0]) == pytest.approx(2 / math.sqrt(3) / 4, rel=1e-12)
    assert relative_standard_error([5.0, 5.0]) == 0.0


def test_relative_standard_error_is_infinite_without_two_samples_or_a_positive_mean() -> None:
    assert relative_standard_error([]) == math.inf
    assert relative_standard_error([2.0]) == math.inf
    assert relative_standard_error([0.0, 0.0]) == math.inf
    assert relative_standard_error([-1.0, 1.0]) == math.inf
    assert relative_standard_error([-3.0, -1.0]) == math.inf
    assert relative_standard_error([0.0, 2.0]) == 1.0  # mean 1 > 0: variance 2, SE 1


# ---- the robust stop rule -------------------------------------------------------------------------------------------


def test_robust_stops_only_once_the_error_is_strictly_below_its_target() -> None:
    pair = [1.0, 3.0]  # RSE exactly 0.5
    assert not robust_should_stop(pair, 0.0, min_samples=2, target_rel_se=0.5)
    assert robust_should_stop(pair, 0.0, min_samples=2, target_rel_se=0.5000001)


def test_robust_defaults_ten_samples_one_percent_two_seconds_five_thousand() -> None:
    steady = [1.0] * 10
    assert not robust_should_stop(steady[:9], 100.0)  # fewer than 10, even past the time cap
    assert robust_should_stop(steady, 0.0)
    # 1.0 and 1.3 alternating, 100 samples: mean 1.15, sample stdev 0.15 * sqrt(100/99), RSE ~0.0131
    noisy = [1.0, 1.3] * 50
    assert relative_standard_error(noisy) > 0.01
    assert not robust_should_stop(noisy, 2.0)  # the cap is exceeded only strictly after 2 s
    assert robust_should_stop(noisy, 2.001)
    wide = [0.001, 100.0] * 2500  # RSE ~0.0141 even over 5000 samples: only the sample cap stops it
    assert relative_standard_error(wide) > 0.01
    assert not robust_should_stop(wide[:4999], 0.0)
    assert robust_should_stop(wide, 0.0)
    # 1.0 and 1.1 alternating, 120 samples: RSE ~0.0044, below 1 %: stop; ~0.0131 is not
    assert relative_standard_error([1.0, 1.1] * 60) < 0.01 < relative_standard_error(noisy)
    assert robust_should_stop([1.0, 1.1] * 60, 0.0) and not robust_should_stop(noisy, 0.0)


# ---- GPU MODE's stop rule -------------------------------------------------------------------------------------------


def test_gpumode_relative_error_is_the_standard_error_of_the_mean() -> None:
    # [1, 2, 3]: mean 2, variance 2 / 2 = 1, std err 1 / sqrt(3) ~ 0.57735, relative 0.288675
    assert gpumode_should_stop([1.0, 2.0, 3.0], 0.0, target_rel_err=0.2887)
    assert not gpumode_should_stop([1.0, 2.0, 3.0], 0.0, target_rel_err=0.2886)
    # [1, 3, 1, 3]: mean 2, variance 4 / 3, std err sqrt(4/3) / 2 ~ 0.57735, relative 0.288675 too
    assert gpumode_should_stop([1.0, 3.0, 1.0, 3.0], 0.0, target_rel_err=0.2887)
    assert not gpumode_should_stop([1.0, 3.0, 1.0, 3.0], 0.0, target_rel_err=0.2886)


def test_gpumode_limits_are_strict_and_its_defaults_are_upstreams() -> None:
    spread = [9_000.0, 10_000.0, 11_000.0]  # relative error ~0.058: never below 0.001
    assert not gpumode_should_stop(spread, 0.0)  # 30 s of kernel time exactly: not beyond 30
    assert gpumode_should_stop([9_000.0, 10_000.0, 11_001.0], 0.0)  # 30.001 s
    assert not gpumode_should_stop(spread[:2], 1000.0)  # fewer than 3 runs: nothing decides yet
    small = [1.0, 2.0, 3.0]
    assert not gpumode_should_stop(small, 120.0)
    assert gpumode_should_stop(small, 120.001)
    assert not gpumode_should_stop([1.0, 2.0] * 49 + [1.0], 0.0)  # 99 repeats
    assert gpumode_should_stop([1.0, 2.0] * 50, 0.0)
    assert gpumode_should_stop([1.0, 2.0, 3.0], 0.0, max_repeats=3)
    assert not gpumode_should_stop([0.0, 0.0, 0.0], 0.0)  # a zero mean decides nothing by its error


def _gpumode_rel_err(samples: list[float]) -> float:
    """GPU MODE's ``calculate_stats`` then its test, step by step (as ``gpumode_should_stop`` computes it)."""
    runs = len(samples)
    mean = sum(samples) / runs
    variance = sum((x - mean) ** 2 for x in samples)
    err = math.sqrt(variance / (runs - 1)) / math.sqrt(runs)
    return err / mean


def test_gpumode_stops_only_strictly_below_its_target() -> None:
    samples = [1.0, 2.0, 4.0]
    exact = _gpumode_rel_err(samples)  # the same float arithmetic as the rule's: equal, not below
    assert not gpumode_should_stop(samples, 0.0, target_rel_err=exact)
    assert gpumode_should_stop(samples, 0.0, target_rel_err=exact * (1 + 1e-12))


def test_gpumode_default_target_is_a_tenth_of_a_percent() -> None:
    tight = [1.0, 1.0017, 1.0034]  # relative error ~0.00098
    loose = [1.0, 1.0018, 1.0036]  # ~0.00104
    assert _gpumode_rel_err(tight) < 0.001 < _gpumode_rel_err(loose)
    assert gpumode_should_stop(tight, 0.0) and not gpumode_should_stop(loose, 0.0)


# ---- summaries and intervals ----------------------------------------------------------------------------------------


def test_summarize_a_single_sample_and_a_pair() -> None:
    assert summarize([4.0]) == {"median_ms": 4.0, "mean_ms": 4.0, "stdev_ms": 0.0, "samples": 1}
    assert summarize([1.0, 3.0]) == {"median_ms": 2.0, "mean_ms": 2.0, "stdev_ms": math.sqrt(2), "samples": 2}


@pytest.mark.parametrize(
    ("df", "t"),
    [
        (1, 12.706),
        (2, 4.303),
        (4, 2.776),
        (10, 2.228),
        (20, 2.086),
        (24, 2.086),
        (25, 2.060),
        (29, 2.060),
        (30, 2.042),
        (59, 2.021),
        (60, 2.000),
        (119, 2.000),
        (120, 1.980),
        (121, 1.960),
        (10_000, 1.960),
    ],
)
def test_t_quantiles_are_the_textbook_two_sided_95_percent_values_rounded_down_in_df(df: int, t: float) -> None:
    assert t_quantile_975(df) == t


def test_t_quantile_without_degrees_of_freedom_is_infinite() -> None:
    assert t_quantile_975(0) == math.inf and t_quantile_975(-3) == math.inf


def test_mean_ci_is_the_t_interval_with_n_minus_one_degrees_of_freedom() -> None:
    # [1..5]: mean 3, stdev sqrt(2.5), t(4) = 2.776, half = 2.776 * sqrt(2.5) / sqrt(5) = 2.776 / sqrt(2)
    mean, low, high = mean_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.776 / math.sqrt(2)
    assert mean == 3.0 and low == pytest.approx(3.0 - half, rel=1e-12) and high == pytest.approx(3.0 + half, rel=1e-12)
    # [1, 3]: mean 2, stdev sqrt(2), t(1) = 12.706, half = 12.706 * sqrt(2) / sqrt(2)
    assert mean_ci([1.0, 3.0]) == pytest.approx((2.0, 2.0 - 12.706, 2.0 + 12.706), rel=1e-12)
    assert mean_ci([7.0]) == (7.0, -math.inf, math.inf)


# ---- the physics floor ----------------------------------------------------------------------------------------------


def test_the_floor_is_strict_and_is_the_larger_of_memory_and_compute_time() -> None:
    assert FLOOR_FACTOR == 0.8
    # H100 SXM: 3.35 TB/s, so 3.35e9 bytes take 1 ms; 67e9 fp32 FLOPs take 1 ms at 67 TFLOP/s
    memory = physics_floor(0.8, 1.0, 3.35e9, "NVIDIA H100 80GB HBM3")
    assert memory.floor_ms == pytest.approx(0.8) and not memory.violated
    assert physics_floor(0.7999, 1.0, 3.35e9, "NVIDIA H100 80GB HBM3").violated
    compute = physics_floor(1.0, 2 * 67e9, 3.35e9, "NVIDIA H100 80GB HBM3", "fp32")  # compute 2 ms > memory 1 ms
    assert compute.floor_ms == pytest.approx(1.6) and compute.violated
    assert "2 ms" in compute.evidence and "67 TFLOP/s fp32" in compute.evidence and "3.35 TB/s" in compute.evidence
    unknown_dtype = physics_floor(1.0, 1979e9, 1.0, "NVIDIA H100 80GB HBM3", "int2")  # the highest peak: fp8
    assert unknown_dtype.floor_ms == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H20", "H20"),
        ("NVIDIA A100-SXM4-80GB", None),
    ],
)
def test_the_most_specific_device_name_wins(name: str, peak: str | None) -> None:
    found = device_peak(name)
    assert (found.name if found else None) == peak
