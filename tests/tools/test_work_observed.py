"""Issue 60, where the work happens: the worker's trace of the ATen ops a candidate's call runs outside its custom
launches, the ghost replay with every launch a no-op, and the checker's judgement of both. The corpus's kernels
are called here in this process under Triton's interpreter (the evaluator's wiring is tested by the corpus)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import torch

from ksearch.contracts.work import TracedOp, WorkTrace
from ksearch.tasks.base import WorkPolicy
from ksearch.tasks.kernelbench import KernelBenchTask
from ksearch.tools.evaluator.checker.work_judged import (
    ATEN_COMPUTE,
    GHOST_OUTPUT,
    NO_CUSTOM_LAUNCH,
    TRACE_TAMPERED,
    judge_ghost,
    judge_trace,
)
from ksearch.tools.evaluator.worker import work_observed
from ksearch.tools.evaluator.worker.work_observed import WorkTracer
from ksearch.tools.evaluator.worker.worker_process import interpret_autotune_with_first_config

CORPUS = Path(__file__).resolve().parents[1] / "tasks" / "kernelbench"
PROBLEMS = {
    "relu": "19_ReLU.py",
    "matmul": "1_Square_matrix_multiplication_.py",
    "layernorm": "40_LayerNorm.py",
    "frobenius": "37_FrobeniusNorm_.py",
    "crossentropy": "95_CrossEntropyLoss.py",
    "softmax": "23_Softmax.py",
}
POLICY = WorkPolicy()


@pytest.fixture(scope="module", autouse=True)
def hooks() -> None:
    interpret_autotune_with_first_config()  # as the worker does under the interpreter (no driver to time configs)
    work_observed.LaunchHooks.install()


def _load(name: str) -> ModuleType:
    path = CORPUS / name
    spec = importlib.util.spec_from_file_location(f"corpus_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _call(name: str) -> tuple[KernelBenchTask, list, object, WorkTrace, object, WorkTrace]:
    """(task, inputs, output, trace, ghost output, ghost trace) of a corpus file on its problem's first trial."""
    task = KernelBenchTask(CORPUS / "KernelBench" / "level1" / PROBLEMS[Path(name).name.split("_")[0]])
    config = task.test_configs("cpu")[0]
    module = _load(name)
    inputs = task.make_inputs(config, "cpu")
    output, trace = work_observed.traced(lambda: task.prepare(module, config, "cpu")(*inputs))
    fn = task.prepare(module, config, "cpu")
    ghost_output, ghost_trace = work_observed.ghost(lambda: fn(*inputs))
    return task, inputs, output, trace, ghost_output, ghost_trace


def _largest(inputs: list) -> int:
    return max(x.numel() for x in inputs if isinstance(x, torch.Tensor))


@pytest.mark.parametrize(
    ("name", "ops"),
    [
        ("exploits/relu_getattr_functional.py", {"relu"}),
        ("exploits/matmul_operator_module.py", {"mm"}),
        ("exploits/layernorm_aten_op.py", {"native_layer_norm"}),
        ("exploits/frobenius_aten_vector_norm.py", {"linalg_vector_norm"}),
        ("exploits/crossentropy_inline_module.py", {"_log_softmax", "nll_loss_forward"}),
        ("exploits/softmax_composed.py", {"amax", "sub", "exp", "sum", "div"}),
        ("exploits/softmax_getattr_except.py", {"_softmax"}),
    ],
)
def test_pytorch_reached_by_another_name_is_seen_at_run_time(name: str, ops: set[str]) -> None:
    """Issue 60: each passed the static rules beside a decoy launch (or a launch that fails into an except)."""
    _task, inputs, _output, trace, _ghost, _ghost_trace = _call(name)
    assert trace.intact and ops <= {op.op for op in trace.ops}, trace
    verdict = judge_trace(trace, _largest(inputs), POLICY)
    assert verdict is not None and verdict[0] == ATEN_COMPUTE, verdict
    assert "PyTorch computed on input-sized tensors: aten." in verdict[1]


@pytest.mark.parametrize(
    "name",
    [
        "honest/relu_triton_ok.py",
        "honest/matmul_triton_ok.py",
        "honest/layernorm_triton_ok.py",
        "honest/crossentropy_triton_ok.py",
        "honest/softmax_triton_ok.py",
    ],
)
def test_honest_kernels_trace_only_allocation_and_launches_and_fail_without_them(name: str) -> None:
    task, inputs, output, trace, ghost_output, ghost_trace = _call(name)
    assert trace.intact and trace.launches >= 1, trace
    assert judge_trace(trace, _largest(inputs), POLICY) is None, trace
    config = task.test_configs("cpu")[0]
    assert task.check(config, output, task.expected(config, inputs)) is None
    assert ghost_trace.ghost and ghost_trace.launches == trace.launches
    ghost_matches = ghost_output is not None and task.check(config, ghost_output, task.expected(config, inputs)) is None
    assert not ghost_matches and judge_ghost(ghost_trace, ghost_matches) is None


def test_a_decoy_launch_beside_the_work_fails_the_ghost_replay() -> None:
    task, inputs, _output, _trace, ghost_output, ghost_trace = _call("exploits/relu_decoy_kernel.py")
    config = task.test_configs("cpu")[0]
    matches = task.check(config, ghost_output, task.expected(config, inputs)) is None
    assert matches and ghost_trace.launches == 1
    verdict = judge_ghost(ghost_trace, matches)
    assert verdict is not None and verdict[0] == GHOST_OUTPUT and "1 launches" in verdict[1]


def test_the_ghost_replay_poisons_uninitialised_allocations_and_skips_launches() -> None:
    def forward() -> torch.Tensor:
        out = torch.empty(4)
        counts = torch.empty(3, dtype=torch.int32)
        zeros = torch.zeros(2)
        return torch.cat([out, counts.float(), zeros])

    result, trace = work_observed.ghost(forward)
    assert torch.isnan(result[:4]).all() and (result[4:7] == torch.iinfo(torch.int32).min).all()
    assert torch.equal(result[7:], torch.zeros(2)) and trace.ghost and not trace.raised
    failed, raised = work_observed.ghost(lambda: (_ for _ in ()).throw(ValueError("no answer")))
    assert failed is None and raised.raised == "ValueError: no answer"
    assert judge_ghost(raised, matches_reference=False) is None


def test_the_judgement_counts_elements_over_calls_and_spares_small_glue_and_layout() -> None:
    layout = [TracedOp(op="empty_like", calls=1, elements=1 << 20), TracedOp(op="view", calls=3, elements=3 << 20)]
    glue = WorkTrace(ops=[*layout, TracedOp(op="sum", calls=1, elements=1024)], launches=2)
    assert judge_trace(glue, 1 << 20, POLICY) is None  # a final reduction of per-block partials
    chunked = WorkTrace(ops=[TracedOp(op="relu", calls=16, elements=1 << 20)], launches=1)
    verdict = judge_trace(chunked, 1 << 20, POLICY)  # 16 slices of 1/16 each: the whole input through PyTorch
    assert verdict is not None and verdict[0] == ATEN_COMPUTE and "aten.relu (16 calls, 1048576 elements)" in verdict[1]
    declared = WorkPolicy(glue_ops=frozenset({"relu"}))
    assert judge_trace(chunked, 1 << 20, declared) is None  # the task's declared glue
    none = WorkTrace(ops=layout, launches=0)
    assert judge_trace(none, 1 << 20, POLICY)[0] == NO_CUSTOM_LAUNCH  # type: ignore[index]
    assert judge_trace(none, 1 << 20, WorkPolicy(launches_required=False)) is None
    tampered = WorkTrace(ops=[], launches=1, intact=False)
    assert judge_trace(tampered, 1, POLICY)[0] == TRACE_TAMPERED  # type: ignore[index]
    assert judge_ghost(tampered, matches_reference=False)[0] == TRACE_TAMPERED  # type: ignore[index]


def test_a_trace_reports_when_the_harness_hooks_were_removed() -> None:
    from triton.runtime.jit import JITFunction

    installed = JITFunction.run
    try:
        _result, trace = work_observed.traced(lambda: setattr(JITFunction, "run", JITFunction.run.__wrapped__))
    finally:
        JITFunction.run = installed  # type: ignore[method-assign]
    assert not trace.intact
    _result, trace = work_observed.traced(lambda: torch.ones(2) + 1)
    assert trace.intact and {op.op for op in trace.ops} == {"ones", "add"}


def test_the_harness_own_tuning_wrapper_leaves_the_trace_intact() -> None:
    """The worker's quick tuning wraps ``Autotuner.run`` again during correctness; every launch still meets the
    hooked ``JITFunction.run``/``InterpretedFunction.run``, so the trace is intact (it was read as tampered)."""
    from ksearch.tools.evaluator.worker.tuning import quick_tuning

    with quick_tuning():
        _task, inputs, _output, trace, _ghost, _ghost_trace = _call("honest/matmul_triton_ok.py")
    assert trace.intact and trace.launches == 1 and judge_trace(trace, _largest(inputs), POLICY) is None


def test_a_copy_to_the_host_is_named_so_and_is_not_layout() -> None:
    """numpy can do the work on a host copy where the trace sees nothing: on a GPU the copy itself counts."""
    assert work_observed._leaves_the_device((torch.empty(2, device="meta"),), torch.empty(2))
    assert not work_observed._leaves_the_device((torch.empty(2),), torch.empty(2))
    copied = WorkTrace(ops=[TracedOp(op=work_observed.DEVICE_TO_HOST, calls=1, elements=1 << 20)], launches=1)
    assert judge_trace(copied, 1 << 20, POLICY)[0] == ATEN_COMPUTE  # type: ignore[index]


@pytest.mark.gpu
def test_a_copy_of_a_device_tensor_to_the_host_is_traced_on_a_gpu() -> None:
    x = torch.rand(1 << 16, device="cuda")
    _result, trace = work_observed.traced(lambda: x.cpu().numpy().sum())
    assert work_observed.DEVICE_TO_HOST in {op.op for op in trace.ops}, trace


def test_the_hooks_come_out_before_timing_and_can_go_back() -> None:
    """After the ghost replay the worker takes the hooks out: a timed launch runs exactly Triton's own path."""
    from triton.runtime.jit import JITFunction

    hooked = JITFunction.run
    work_observed.LaunchHooks.uninstall()
    try:
        assert JITFunction.run is hooked.__wrapped__ and not work_observed.LaunchHooks.in_place()
    finally:
        work_observed.LaunchHooks.install()
    assert work_observed.LaunchHooks.in_place() and JITFunction.run is not hooked.__wrapped__


def test_ops_beyond_the_listed_ones_count_as_compute() -> None:
    """A call cannot push its compute out of the record by running many other ops: what is not listed counts."""
    many = WorkTracer()
    many.ops = {f"op{i}": [1, i] for i in range(100)}  # 100 distinct ops, op{i} touching i elements
    trace = many.trace(intact=True)
    assert len(trace.ops) == 64 and trace.ops[0].op == "op99" and trace.unlisted_elements == sum(range(36))
    padded = WorkTrace(ops=[TracedOp(op="view", calls=1, elements=1 << 30)] * 64, unlisted_elements=1 << 20, launches=1)
    assert judge_trace(padded, 1 << 20, POLICY)[0] == ATEN_COMPUTE  # type: ignore[index]
