"""The evidence text the planner and the coder read: per shape time, roofline position and the difference to a
reference (marked when it is within noise), the per-kernel profile and the compiled kernels' resources."""

from __future__ import annotations

from ksearch.agent.evidence_text import (
    evidence_text,
    profile_text,
    resources_text,
    roofline_summary,
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
)


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


def test_the_profile_and_resources_are_listed_and_bounded() -> None:
    kernels = [ProfiledKernel(name=f"k{i}", launches=1, time_ms=0.1, share=0.05) for i in range(3)]
    shapes = [
        ShapeProfile(
            config=f"b{i}", call_ms=2.0, kernel_ms=0.3, host_gap_ms=1.7, launches=3, kernels=kernels, other_kernels=2
        )
        for i in range(7)
    ]
    ev = _evaluation(
        _timing("b0", 2.0),
        profile=shapes,
        resources=[
            KernelResources(name="_k", shared_bytes=1024, registers=40, spilled_bytes=0, num_warps=4, num_stages=3)
        ],
    )
    text = profile_text(ev, limit=600)
    assert text.startswith("Profile of one call per timed shape") and len(text) < 700
    assert "host gap 1.7 ms" in text and "k0: 1x, 0.1 ms (5%)" in text and "2 more kernels" in text
    assert "more shapes not shown" in text
    assert resources_text(ev) == (
        "Compiled kernels (for NVIDIA H100 80GB HBM3):\n  _k: 1024 B shared memory, 40 "
        "registers/thread, num_warps=4, num_stages=3"
    )
    full = evidence_text(ev)
    assert full.startswith("Per timed shape:") and "Profile of one call" in full and "Compiled kernels" in full
    assert evidence_text(Evaluation(verdict="compile_error", device="cpu")) == ""
