"""Resources checked before the GPU: the GPU table, the figures of compiled kernels, the limit check, and the
resource probe that compiles a candidate's Triton kernels for a target GPU on the CPU (``--target-gpu``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import KernelResources, Verdict
from ksearch.tools.evaluator import EvalRequest, evaluate
from ksearch.tools.evaluator.shared.resources import distinct, over_limits, parse_usage, problems, tuned_notes
from ksearch.tools.gpu_specs import UnknownGpu, gpu_spec, spec_for_device

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "tasks" / "data"
OK = (DATA / "softmax_triton_ok.py").read_text()
H100 = gpu_spec("h100")


def round_8_kernel() -> str:
    """The coder's reply of round 8 of the hand-driven TriMul search (examples/trimul-hand), which the H100 refused."""
    text = (REPO / "examples" / "trimul-hand" / "r08-coder.md").read_text()
    found = re.search(r"```python\n(.*?)```", text, re.S)
    assert found is not None
    return found.group(1)


def test_the_gpu_table_answers_by_target_key_and_by_the_device_name() -> None:
    assert gpu_spec("H100").key == gpu_spec("nvidia-h100").key == "h100"
    assert H100.shared_per_block_optin == 232448 and H100.arch == "sm_90" and H100.triton_capability == 90
    assert gpu_spec("a100").shared_per_block_optin == 166912 and gpu_spec("b200").triton_capability == 100
    with pytest.raises(UnknownGpu, match="known targets are a100.*h100.*b200"):
        gpu_spec("h1000")
    assert spec_for_device("NVIDIA H100 80GB HBM3").key == "h100"
    assert spec_for_device("NVIDIA H100 PCIe").key == "h100-pcie"
    assert spec_for_device("NVIDIA A100-SXM4-40GB").key == "a100-40gb"
    assert spec_for_device("NVIDIA H200").key == "h200"
    assert spec_for_device("Tesla T4") is None
    assert H100.flops_for("fp8") == ("fp8", 1978.9e12) and gpu_spec("a100").flops_for("fp8")[0] == "bf16"
    text = H100.describe()
    for figure in (
        "132 SMs",
        "3.35 TB/s",
        "227 KB",
        "232448 bytes",
        "65536 registers",
        "2048 threads",
        "bf16/fp16 989.4",
    ):
        assert figure in text, figure


def test_cuobjdumps_resource_listing_is_read_per_function() -> None:
    listing = (
        "\nResource usage:\n Common:\n  GLOBAL:0\n Function _other:\n"
        "  REG:40 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:568\n"
        " Function _kernel:\n  REG:168 STACK:16 SHARED:0 LOCAL:8 CONSTANT[0]:600 TEXTURE:0\n"
    )
    assert parse_usage(listing, "_kernel") == (168, 24)
    assert parse_usage(listing, "_missing") == (None, None)
    assert parse_usage(listing.split(" Function _kernel")[0], "_missing") == (40, 0)


def _r(
    name: str, shared: int, *, warps: int = 4, stages: int = 3, registers: int | None = 64, tuned: bool = False
) -> KernelResources:
    return KernelResources(
        name=name,
        shared_bytes=shared,
        registers=registers,
        spilled_bytes=0,
        num_warps=warps,
        num_stages=stages,
        tuned=tuned,
    )


def test_a_kernel_over_the_shared_memory_limit_is_named_with_its_figure_and_the_limit() -> None:
    error = over_limits([_r("_small", 1024), _r("_proj_gate_gemm", 360448, warps=8)], H100)
    assert "_proj_gate_gemm" in error and "shared memory" in error and "360448" in error and "232448" in error
    assert "_small" not in error and "num_stages=3" in error
    assert over_limits([_r("_fits", 232448)], H100) == ""
    assert over_limits([_r("_fits_h100", 200_000)], gpu_spec("a100")) != ""  # 163 KB per block on an A100


def test_threads_and_registers_per_block_are_limits_too() -> None:
    assert "threads per block" in " ".join(problems(_r("_wide", 0, warps=64), H100))
    assert "registers per block" in " ".join(problems(_r("_heavy", 0, warps=16, registers=255), H100))
    assert problems(_r("_ok", 0, warps=8, registers=255), H100) == []  # 255 x 256 threads = 65280 registers


def test_an_autotune_config_that_does_not_fit_is_skipped_unless_none_fits() -> None:
    some = [_r("_tuned", 300_000, tuned=True), _r("_tuned", 100_000, tuned=True)]
    assert over_limits(some, H100) == ""
    assert tuned_notes(some, H100) == [
        f"1 of 2 autotune configs of _tuned do not fit the {H100.name} (the autotuner skips them)"
    ]
    none_fit = [_r("_tuned", 300_000, tuned=True), _r("_tuned", 260_000, tuned=True)]
    assert "no autotune config of kernel _tuned fits (2 tried)" in over_limits(none_fit, H100)
    assert "260000" in over_limits(none_fit, H100)


def test_distinct_keeps_each_figure_once_and_prefers_the_direct_launch() -> None:
    figures = distinct([_r("b", 10, tuned=True), _r("b", 10), _r("a", 5), _r("a", 5), _r("b", 20)])
    assert [(r.name, r.shared_bytes, r.tuned) for r in figures] == [("a", 5, False), ("b", 20, False), ("b", 10, False)]
    assert len(distinct([_r("k", i) for i in range(100)], limit=7)) == 7


def test_a_target_gpu_is_validated_and_is_for_the_cpu_only() -> None:
    candidate = Candidate(task="softmax", language="triton", code=OK)
    assert EvalRequest(candidate=candidate, target_gpu="H100").target_gpu == "h100"
    with pytest.raises(ValidationError, match="known targets are"):
        EvalRequest(candidate=candidate, target_gpu="h1000")
    with pytest.raises(ValidationError, match="on a GPU its own limits apply"):
        EvalRequest(candidate=candidate, device="cuda", target_gpu="h100")


@pytest.mark.slow
def test_round_8_of_the_hand_search_is_a_compile_error_naming_shared_memory_on_an_h100() -> None:
    """The kernel that wasted the last round of examples/trimul-hand on the GPU is caught on the CPU."""
    candidate = Candidate(task="trimul", language="triton", code=round_8_kernel(), entry_point="custom_kernel")
    evaluation = evaluate(EvalRequest(candidate=candidate, device="cpu", target_gpu="h100"))
    assert evaluation.verdict == Verdict.COMPILE_ERROR, evaluation.log
    first = evaluation.log.splitlines()[0]
    assert "_proj_gate_gemm" in first and "shared memory" in first and "360448" in first and "232448" in first
    assert evaluation.environment["target_gpu"] == "h100"
    gemm = [r for r in evaluation.resources if r.name == "_proj_gate_gemm"]
    assert gemm and gemm[0].shared_bytes == 360448 and gemm[0].num_warps == 8 and gemm[0].num_stages == 3
    assert "compile_error" in evaluation.summary() and "shared memory" in evaluation.summary()


def test_a_fitting_kernel_passes_and_ksearch_eval_json_lists_its_resources(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ksearch.cli import app
    from ksearch.contracts.evaluation import Evaluation

    result = CliRunner().invoke(
        app,
        [
            "--workspace",
            str(tmp_path / "ws"),
            "eval",
            "softmax",
            str(DATA / "softmax_triton_ok.py"),
            "--device",
            "cpu",
            "--target-gpu",
            "h100",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["resources"], payload["log"]
    evaluation = Evaluation.model_validate(payload)
    assert evaluation.passed and {r.name for r in evaluation.resources} == {"_softmax_row"}
    row = evaluation.resources[0]
    assert row.registers is not None and row.registers > 0 and row.spilled_bytes == 0 and not row.tuned
    assert set(payload["resources"][0]) >= {
        "name",
        "shared_bytes",
        "registers",
        "spilled_bytes",
        "num_warps",
        "num_stages",
    }


def test_without_a_target_no_probe_runs_and_no_limit_is_claimed() -> None:
    candidate = Candidate(task="softmax", language="triton", code=OK)
    evaluation = evaluate(EvalRequest(candidate=candidate, device="cpu"))
    assert evaluation.passed and evaluation.resources == [] and "target_gpu" not in evaluation.environment


def test_the_kernels_of_a_module_are_found_through_their_wrappers_and_odd_objects_are_no_failure(
    tmp_path: Path,
) -> None:
    """In a worker on a GPU the figures are read from the module's JIT functions, through Triton's own wrappers (read
    by exact type, ``triton_objects``); a global whose attributes raise (a lazy proxy, say) must not turn an honest
    kernel's evaluation into a crash."""
    from collections import namedtuple
    from types import ModuleType

    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    from ksearch.tools.evaluator.shared.resources import candidate_kernels, loaded_resources

    metadata = namedtuple("KernelMetadata", ["name", "num_stages", "num_warps", "shared"])("_k", 2, 4, 4096)
    compiled = object.__new__(CompiledKernel)
    vars(compiled).update(metadata=metadata, module=object(), _module_pid=None, n_regs=40, n_spills=2)
    jit = JITFunction.__new__(JITFunction)
    jit.device_caches = {0: ({"k": compiled}, {}, None, None, None)}
    heuristics = object.__new__(Heuristics)
    vars(heuristics).update(fn=jit)
    tuned = object.__new__(Autotuner)
    vars(tuned).update(fn=heuristics)  # autotune(heuristics(jit))

    class Raising:
        def __getattr__(self, name: str) -> object:
            raise RuntimeError("lazy proxy")

    module = ModuleType("candidate")
    module.kernel, module.proxy, module.number = tuned, Raising(), 3
    assert candidate_kernels(module) == [jit]
    [figure] = loaded_resources(module)
    assert (figure.name, figure.shared_bytes, figure.registers, figure.spilled_bytes) == ("_k", 4096, 40, 8)
    assert (figure.num_warps, figure.num_stages) == (4, 2)


def test_aiming_at_a_gpu_answers_for_it_and_restores_tritons_driver() -> None:
    from triton.runtime.driver import driver

    from ksearch.tools.evaluator.worker.aot import aimed_at

    before = dict(vars(driver))
    with aimed_at(gpu_spec("b200")):
        assert (driver.active.get_current_target().arch, driver.active.get_current_device()) == (100, 0)
        assert driver.active.utils.get_device_properties(0)["max_shared_mem"] == 232448
    assert dict(vars(driver)) == before


def test_a_probe_stuck_in_the_candidate_never_holds_a_failed_evaluation_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a verdict the figures cannot change (here a timeout), the probe gets a short grace, not its own limit."""
    import time

    from ksearch.tools.evaluator.parent import probe as probe_mod

    monkeypatch.setattr(probe_mod, "PROBE_GRACE_S", 1.0)
    hang = "import time\nimport triton\n\nwhile True:\n    time.sleep(0.1)\n\ndef kernel(x):\n    return x\n"
    started = time.monotonic()
    evaluation = evaluate(
        EvalRequest(
            candidate=Candidate(task="softmax", language="triton", code=hang),
            device="cpu",
            target_gpu="h100",
            compile_timeout_s=4,
            run_timeout_s=60,
        )
    )
    assert evaluation.verdict == Verdict.TIMEOUT, evaluation.log
    assert time.monotonic() - started < 4 + 30  # not the probe's own 64 s
    assert "the resource check for the target GPU did not finish in time" in evaluation.log


def test_trimul_resource_configs_are_small_and_cover_every_gpu_width() -> None:
    from ksearch.tasks.trimul import TrimulTask, shape_of

    task = TrimulTask()
    configs = task.resource_configs()
    gpu_widths = {shape_of(c)[2] for c in task.test_configs("cuda") + task.benchmark_configs("cuda")}
    assert {shape_of(c)[2] for c in configs} == gpu_widths == {128, 256, 384, 768}
    assert all(shape_of(c)[:2] == (1, 16) and not c.params["nomask"] for c in configs)  # cheap, and the mask path
    assert {c.name for c in configs}.isdisjoint(
        c.name for c in task.test_configs("cpu") + task.benchmark_configs("cpu")
    )
    assert task.resource_configs() == configs  # deterministic: the probe of a replayed run compiles the same


@pytest.mark.slow
def test_a_kernel_tiled_by_the_width_is_checked_at_the_gpus_widths_not_only_the_cpus() -> None:
    """Issue 33's search: its fused input kernel takes a [BM, next_power_of_2(C)] tile. The CPU configs (C of 16 and
    32) compiled it at 12 KB of shared memory; the H200 compiled it at 49 KB for C=128. Opened to every width, the
    same kernel needs far more than a block may have at C=768, and the CPU must say so before the GPU does."""
    best = (REPO / "examples" / "trimul-record" / "submission.py").read_text()
    assert best.count("if BC <= 128:") == 1
    wide = best.replace("if BC <= 128:", "if BC <= 1024:")  # the fused path at every width
    candidate = Candidate(task="trimul", language="triton", code=wide, entry_point="custom_kernel")
    evaluation = evaluate(EvalRequest(candidate=candidate, device="cpu", target_gpu="h100"))
    assert evaluation.verdict == Verdict.COMPILE_ERROR, evaluation.log
    first = evaluation.log.splitlines()[0]
    assert "_ln_proj_rows" in first and "shared memory" in first and "232448" in first, first
    fused = sorted(r.shared_bytes for r in evaluation.resources if r.name == "_ln_proj_rows")
    assert fused[0] <= 16384 and fused[-1] > 232448  # the CPU's widths fit; the GPU's widest does not
