"""Hardware evidence on a GPU: every timed shape of an evaluation has its roofline position and a profile of one
call; the profile is a small part of the verdict's time; the resources a GPU compile records agree with the CPU's
ahead-of-time figures for the same kernels. The profile's arithmetic is checked on the CPU too."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation
from ksearch.tools.evaluator.profiler.kernel_profile import PROFILE_KERNELS, spans_in, summarise

REPO = Path(__file__).resolve().parents[2]
TRIMUL = REPO / "examples" / "trimul_triton.py"
PROFILE_SHARE_LIMIT = 0.10
"""The profile may cost at most this share of the verdict's wall time (issue 31)."""


def test_the_profile_of_a_call_counts_busy_time_once_and_lists_the_longest_kernels() -> None:
    spans = [("gemm", 0.0, 600.0), ("gemm", 700.0, 1300.0), ("ln", 500.0, 800.0), ("copy", 1400.0, 1450.0)]
    spans += [(f"tiny{i}", 2000.0 + i, 2000.5 + i) for i in range(PROFILE_KERNELS)]
    profile = summarise("b0", 3.0, spans)
    assert profile.kernel_ms == pytest.approx((1300 + 50 + 0.5 * PROFILE_KERNELS) / 1000)  # overlaps counted once
    assert profile.host_gap_ms == pytest.approx(3.0 - profile.kernel_ms)
    assert profile.launches == len(spans)
    assert [k.name for k in profile.kernels[:3]] == ["gemm", "ln", "copy"]
    assert profile.kernels[0].launches == 2 and profile.kernels[0].time_ms == pytest.approx(1.2)
    assert profile.kernels[0].share == pytest.approx(0.4)
    assert len(profile.kernels) == PROFILE_KERNELS and profile.other_kernels == 3
    assert summarise("b1", 0.0, [("k", 0.0, 10.0)]).host_gap_ms == 0.0  # a call never reads shorter than its kernels


def test_the_marked_range_is_no_kernel_of_the_call() -> None:
    """The profiler repeats each marked range on the device timeline; only the host's copy bounds the shape."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from ksearch.tools.evaluator.profiler.kernel_profile import MARK, recorded

    def event(name: str, start: float, end: float, device: DeviceType) -> SimpleNamespace:
        return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), device_type=device)

    profiler = SimpleNamespace(
        events=lambda: [
            event(MARK + "b0", 100.0, 300.0, DeviceType.CPU),
            event(MARK + "b0", 120.0, 290.0, DeviceType.CUDA),
            event("gemm", 130.0, 200.0, DeviceType.CUDA),
            event("aten::empty", 101.0, 102.0, DeviceType.CPU),
        ]
    )
    ranges, spans = recorded(profiler)
    assert ranges == {"b0": (100.0, 300.0)}
    assert spans == [("gemm", 130.0, 200.0)]
    profile = summarise("b0", 0.2, spans_in(*ranges["b0"], spans))
    assert [k.name for k in profile.kernels] == ["gemm"] and profile.kernel_ms == pytest.approx(0.07)


def test_a_real_profilers_marked_ranges_are_read_from_kinetos_results() -> None:
    """The fast path: Kineto's raw events, without PyTorch's event tree; the same ranges as the slow path gives."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from ksearch.tools.evaluator.profiler.kernel_profile import MARK, activity, recorded

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for name in ("b0", "b1"):
            with record_function(MARK + name):
                torch.ones(64, 64) @ torch.ones(64, 64)
    assert profiler.profiler.kineto_results is not None
    ranges, spans = recorded(profiler)
    assert sorted(ranges) == ["b0", "b1"] and spans == []
    assert ranges["b0"][0] < ranges["b0"][1] <= ranges["b1"][0] < ranges["b1"][1]
    widths = {name[len(MARK) :]: end - start for name, _, start, end in activity(profiler) if name.startswith(MARK)}
    slow = {
        e.name[len(MARK) :]: e.time_range.end - e.time_range.start for e in profiler.events() if e.name.startswith(MARK)
    }
    assert widths == pytest.approx(slow, abs=1.0)  # microseconds, both paths


def test_each_shape_gets_the_device_activity_that_started_inside_its_marked_call() -> None:
    spans = [("warm", 5.0, 40.0), ("k1", 105.0, 150.0), ("k2", 151.0, 190.0), ("next", 260.0, 300.0)]
    assert [s[0] for s in spans_in(100.0, 200.0, spans)] == ["k1", "k2"]
    assert [s[0] for s in spans_in(250.0, 320.0, spans)] == ["next"]


@pytest.mark.gpu
def test_eval_json_on_cuda_has_roofline_and_profile_for_every_timed_shape(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ksearch.cli import app

    result = CliRunner().invoke(
        app, ["--workspace", str(tmp_path / "ws"), "eval", "trimul", str(TRIMUL), "--device", "cuda", "--json"]
    )
    assert result.exit_code == 0, result.output
    evaluation = Evaluation.model_validate(json.loads(result.stdout))
    shapes = [t.config for t in evaluation.timings]
    assert len(shapes) == 7
    assert [p.config for p in evaluation.roofline] == shapes
    for point in evaluation.roofline:
        assert 0 < point.fraction <= 1.0 and point.bound in ("memory", "compute") and point.floor_ms > 0
    assert [p.config for p in evaluation.profile] == shapes
    for profile in evaluation.profile:
        names = " ".join(k.name for k in profile.kernels)
        assert "_contract_kernel" in names and profile.launches >= 5, profile
        assert 0 < profile.kernel_ms <= profile.call_ms
    assert {"_ln_proj_kernel", "_contract_kernel", "_epilogue_kernel"} <= {r.name for r in evaluation.resources}
    assert all(r.registers for r in evaluation.resources)  # the driver's figures of the loaded kernels
    assert re.search(r"profile=[0-9.]+s", evaluation.environment["stage_seconds"])
    assert "profile_import=" in evaluation.environment["stage_seconds"]  # taken by the profiling process
    assert "profile" not in evaluation.environment, evaluation.environment["profile"]  # no note: it came in time


@pytest.mark.gpu
def test_profiling_is_a_small_part_of_the_verdict_in_a_live_session() -> None:
    from ksearch.tools.evaluator import EvalRequest, EvaluatorSession, evaluate

    code = TRIMUL.read_text()
    with EvaluatorSession("cuda") as session:
        for tag in ("first", "second"):  # the second is what a search's every later candidate meets
            candidate = Candidate(
                task="trimul", language="triton", code=f"{code}\n# {tag}\n", entry_point="custom_kernel"
            )
            evaluation = evaluate(EvalRequest(candidate=candidate, device="cuda"), session=session)
            assert evaluation.passed, evaluation.log
    stages = dict(re.findall(r"(\w+)=([0-9.]+)s", evaluation.environment["stage_seconds"]))
    share = float(stages["profile"]) / evaluation.duration_s
    assert share < PROFILE_SHARE_LIMIT, (share, evaluation.environment["stage_seconds"], evaluation.duration_s)


@pytest.mark.gpu
def test_a_gpu_compiles_resources_agree_with_the_cpus_ahead_of_time_figures() -> None:
    """The same kernels at the same shapes (the task's CPU configs), compiled by Triton's JIT on this GPU and loaded
    (the driver's registers and local memory), and compiled ahead of time on the CPU for this GPU by the resource
    probe (cuobjdump's figures)."""
    import torch

    from ksearch.tasks.trimul import TrimulTask, as_data
    from ksearch.tools.evaluator import EvalRequest, evaluate
    from ksearch.tools.evaluator.shared.resources import loaded_resources
    from ksearch.tools.gpu_specs import spec_for_device

    gpu = spec_for_device(torch.cuda.get_device_name(0))
    if gpu is None:
        pytest.skip(f"{torch.cuda.get_device_name(0)} is not in ksearch's GPU table")
    candidate = Candidate(task="trimul", language="triton", code=TRIMUL.read_text(), entry_point="custom_kernel")
    ahead = evaluate(EvalRequest(candidate=candidate, device="cpu", target_gpu=gpu.key))
    # The figures are the subject, not the interpreter's verdict: Triton 3.6's interpreter (a GPU node's) with NumPy
    # >= 2.5 fails on a loop bounded by a runtime int after the kernels were specialised and probed.
    assert ahead.resources, ahead.log

    spec = importlib.util.spec_from_file_location("trimul_on_gpu", TRIMUL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["trimul_on_gpu"] = module
    spec.loader.exec_module(module)
    task = TrimulTask()
    for config in task.test_configs("cpu") + task.benchmark_configs("cpu") + task.resource_configs():  # as the probe
        module.custom_kernel(as_data(task.make_inputs(config, "cuda"), config))
    torch.cuda.synchronize()
    on_gpu = loaded_resources(module)

    def figures(resources: list) -> set[tuple]:
        return {(r.name, r.shared_bytes, r.registers, r.spilled_bytes, r.num_warps, r.num_stages) for r in resources}

    assert figures(on_gpu) == figures(ahead.resources)
