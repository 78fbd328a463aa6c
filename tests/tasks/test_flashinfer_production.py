"""FlashInfer's production modules (ksearch/tasks/flashinfer/production) without a GPU: each maps its definition's
inputs onto flashinfer-python 0.7.4's API as a stand-in (tests/tasks/fake_flashinfer.py) that refuses what the real API
refuses and computes what it documents, so the module's output must pass the task's own check against the reference;
the package and the modules import without flashinfer, a missing or broken flashinfer reads as one line; they pass the
evaluator's door only as the harness's own baseline. GPU-marked: each module with the real flashinfer against the
reference on CUDA."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("flashinfer_bench", reason="flashinfer-bench is not installed")

from ksearch.contracts.candidate import Candidate  # noqa: E402
from ksearch.contracts.evaluation import Verdict  # noqa: E402
from ksearch.flows import baselines  # noqa: E402
from ksearch.tasks.flashinfer import definitions as defs  # noqa: E402
from ksearch.tasks.flashinfer import production  # noqa: E402
from ksearch.tasks.flashinfer.task import FlashInferTask, canonical_name  # noqa: E402
from ksearch.tools import integrity  # noqa: E402
from ksearch.tools.evaluator import EvalRequest  # noqa: E402
from ksearch.tools.evaluator.parent.evaluate import static_verdict  # noqa: E402
from tests.tasks import fake_flashinfer  # noqa: E402

DEFINITIONS = [defs.GQA_DECODE, defs.MLA_DECODE, defs.MOE]


def load(definition: str) -> types.ModuleType:
    """The production module as the worker loads it: its source, executed as a fresh module."""
    module = types.ModuleType(f"production_{definition}")
    exec(compile(production.production_source(definition), f"<production {definition}>", "exec"), module.__dict__)  # noqa: S102
    return module


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = fake_flashinfer.module()
    monkeypatch.setitem(sys.modules, "flashinfer", module)
    return module


def _run_and_check(definition: str, module: types.ModuleType) -> None:
    task = FlashInferTask(canonical_name(definition))
    for config in task.test_configs("cpu"):
        inputs = task.make_inputs(config, "cpu")
        before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        output = module.run(*inputs)
        mismatch = task.check(config, output, task.expected(config, inputs))
        assert mismatch is None, mismatch.message
        for got, was in zip(inputs, before, strict=True):  # the module leaves its inputs alone
            assert torch.equal(got, was) if isinstance(got, torch.Tensor) else got == was


def test_gqa_maps_the_definition_onto_the_decode_wrapper(fake: types.ModuleType) -> None:
    _run_and_check(defs.GQA_DECODE, load(defs.GQA_DECODE))
    kinds = [c[0] for c in fake.calls]
    assert kinds.count("BatchDecodeWithPagedKVCacheWrapper") == 1, "one wrapper, kept across calls"
    assert ("BatchDecodeWithPagedKVCacheWrapper", "NHD", True) in fake.calls
    plans = [c for c in fake.calls if c[0] == "decode.plan"]
    assert plans and all(c[1] == (32, 4, 128) and c[2] == 1 and c[3] == c[4] == torch.bfloat16 for c in plans)
    assert [c for c in fake.calls if c[0] == "decode.run"] == [("decode.run", True)] * len(plans)


def test_mla_maps_the_definition_onto_the_mla_wrapper(fake: types.ModuleType) -> None:
    _run_and_check(defs.MLA_DECODE, load(defs.MLA_DECODE))
    plans = [c for c in fake.calls if c[0] == "mla.plan"]
    assert plans and all(c[1:] == ("split", "split", "base2", False) for c in plans)
    assert [c[0] for c in fake.calls].count("BatchMLAPagedAttentionWrapper") == 1


@pytest.mark.parametrize(("major", "path"), [(9, "cutlass_fused_moe"), (10, "trtllm_fp8_block_scale_moe")])
def test_moe_maps_the_definition_onto_the_fused_moe_of_each_architecture(
    fake: types.ModuleType, monkeypatch: pytest.MonkeyPatch, major: int, path: str
) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, 0))
    _run_and_check(defs.MOE, load(defs.MOE))
    used = {c[0] for c in fake.calls}
    assert path in used and ("fused_topk_deepseek" in used) == (major == 9)
    if major == 9:  # expert parallel: 256 experts over ranks of 32, the rank from the workload's offset
        ranks = {c[2] for c in fake.calls if c[0] == "cutlass_fused_moe"}
        assert {c[1] for c in fake.calls if c[0] == "cutlass_fused_moe"} == {8} and ranks == {0, 7, 3}


def test_a_wrong_mapping_is_caught_by_the_stand_in(fake: types.ModuleType) -> None:
    """The stand-in is strict enough to matter: an HND layout for NHD caches is refused, a natural-log LSE fails the
    definition's check."""
    source = production.production_source(defs.GQA_DECODE).replace('kv_layout="NHD"', 'kv_layout="HND"')
    module = types.ModuleType("wrong")
    exec(compile(source, "<wrong>", "exec"), module.__dict__)  # noqa: S102
    with pytest.raises(fake_flashinfer.ApiMisuse, match="k_cache"):
        _run_and_check(defs.GQA_DECODE, module)
    source = production.production_source(defs.MLA_DECODE).replace('lse_mode="base2"', 'lse_mode="basee"')
    module = types.ModuleType("wrong_lse")
    exec(compile(source, "<wrong lse>", "exec"), module.__dict__)  # noqa: S102
    with pytest.raises(AssertionError, match="output 'lse'"):
        _run_and_check(defs.MLA_DECODE, module)


def test_the_package_and_the_modules_import_without_flashinfer() -> None:
    code = (
        "import sys; sys.modules['flashinfer'] = None\n"
        "import ksearch.tasks.flashinfer.production as p\n"
        "for d in p.PRODUCTION:\n"
        "    ns = {}; exec(compile(p.production_source(d), d, 'exec'), ns)\n"
        "    assert callable(ns['run'])\n"
        "print(p.flashinfer_unavailable())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flashinfer is not installed: pip install flashinfer-python==0.7.4")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ModuleNotFoundError("No module named 'tvm_ffi'", name="tvm_ffi"), "flashinfer does not import: tvm_ffi is"),
        (RuntimeError("CUDA driver too old\nsecond line"), "flashinfer does not import: RuntimeError: CUDA driver"),
    ],
)
def test_a_broken_flashinfer_gives_one_line(monkeypatch: pytest.MonkeyPatch, error: Exception, expected: str) -> None:
    def fail(name: str) -> Any:
        raise error

    monkeypatch.setattr(production.importlib, "import_module", fail)
    reason = production.flashinfer_unavailable()
    assert reason is not None and reason.startswith(expected) and "\n" not in reason


def test_flashinfer_importing_gives_no_reason(fake: types.ModuleType) -> None:
    assert production.flashinfer_unavailable() is None


@pytest.mark.parametrize("definition", DEFINITIONS)
def test_only_the_harness_baseline_may_import_flashinfer(definition: str) -> None:
    """The door is the reference's: a candidate that imports flashinfer is refused (unlisted_import), the same module
    as the harness's own baseline is not; nothing else in it breaks a rule."""
    task = FlashInferTask(canonical_name(definition))
    code = production.production_source(definition)
    rejection = integrity.check_source(code, task_name=task.name)
    assert rejection is not None and rejection.rule == "unlisted_import"
    assert integrity.check_source(code, task_name=task.name, allow=integrity.HARNESS_BASELINE_RULES) is None
    candidate = Candidate(task=task.name, language="triton", code=code, entry_point="run")
    refused = static_verdict(EvalRequest(candidate=candidate, device="cpu"), task)
    assert refused is not None and refused.verdict == Verdict.REJECTED
    assert static_verdict(EvalRequest(candidate=candidate, device="cpu", harness_baseline=True), task) is None


def test_measure_flashinfer_production_evaluates_the_module_as_the_harness_baseline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[EvalRequest] = []
    monkeypatch.setattr(baselines, "evaluate", lambda request: seen.append(request) or "evaluation")
    task = FlashInferTask(canonical_name(defs.MLA_DECODE, search=2))
    assert baselines.measure_flashinfer_production(task, "cuda", "robust") == "evaluation"
    (request,) = seen
    assert request.harness_baseline and request.timing and not request.profile
    assert request.candidate.code == production.production_source(defs.MLA_DECODE)
    assert request.candidate.task == task.name and request.timing_method == "robust"


def test_every_production_module_is_named_and_mla_prefill_has_none() -> None:
    assert set(production.PRODUCTION) == set(DEFINITIONS)
    assert not production.has_production(defs.MLA_PREFILL)
    for name in production.PRODUCTION.values():
        assert (Path(production.__file__).parent / name).is_file()
    with pytest.raises(KeyError, match="no FlashInfer production module"):
        production.production_source(defs.MLA_PREFILL)


# -- on a GPU, with the real flashinfer -----------------------------------------------------------------------------
def _real_flashinfer() -> None:
    reason = production.flashinfer_unavailable()
    if reason:
        pytest.skip(reason)


def _smallest_and_largest(task: FlashInferTask) -> list[Any]:
    configs = task.test_configs("cuda")
    return [configs[0], configs[-1]] if len(configs) > 1 else configs


@pytest.mark.gpu
@pytest.mark.parametrize("definition", DEFINITIONS)
def test_production_module_matches_the_reference_on_cuda(definition: str) -> None:
    """The module with the real flashinfer (JIT-compiled on first use: minutes) on the smallest and the largest
    workload, judged by the task's own check. On an H100 the MoE's CUTLASS module alone takes long to build."""
    _real_flashinfer()
    task = FlashInferTask(canonical_name(definition))
    spec = importlib.util.spec_from_loader(f"production_{definition}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(production.production_source(definition), definition, "exec"), module.__dict__)  # noqa: S102
    for config in _smallest_and_largest(task):
        inputs = task.make_inputs(config, "cuda")
        with torch.no_grad():
            output = module.run(*inputs)
        torch.cuda.synchronize()
        mismatch = task.check(config, output, task.expected(config, inputs))
        assert mismatch is None, mismatch.message
        del inputs, output
        torch.cuda.empty_cache()
