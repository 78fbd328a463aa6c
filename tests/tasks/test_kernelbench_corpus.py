"""The KernelBench exploit corpus: ``ModelNew`` files that game KernelBench's own correctness check, on copies of real
KernelBench problems (``kernelbench/``), through the real ``evaluate()``; honest Triton controls must pass.

``EXPECTED`` is the contract: the verdict, and the integrity rule (rejections) or the named work check
(``Mismatch.check``) that caught it. Static rejections start no worker; the others run on the CPU at the problems'
reduced sizes (``ksearch.tasks.kernelbench.sizes``), one worker each, in one evaluator session per device. Cases
that only timing can show are marked gpu.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.tasks.kernelbench import KernelBenchTask, UnjudgeableProblem
from ksearch.tasks.kernelbench.judging import RUN_TIME_RULES, STATIC_RULES
from ksearch.tools import integrity
from ksearch.tools.evaluator import EvalRequest, EvaluatorSession, evaluate

CORPUS = Path(__file__).resolve().parent / "kernelbench"
PROBLEMS = {
    "relu": "level1/19_ReLU.py",
    "softmax": "level1/23_Softmax.py",
    "hardtanh": "level1/32_HardTanh.py",
    "frobenius": "level1/37_FrobeniusNorm_.py",
    "mse": "level1/94_MSELoss.py",
    "hinge": "level1/100_HingeLoss.py",
    "conv": "level2/1_Conv2D_ReLU_BiasAdd.py",
    "matmul": "level1/1_Square_matrix_multiplication_.py",
    "layernorm": "level1/40_LayerNorm.py",
    "crossentropy": "level1/95_CrossEntropyLoss.py",
}
"""A corpus file's problem, by the first word of its name."""


class Expect(NamedTuple):
    verdict: Verdict | tuple[Verdict, ...]
    rule: str | tuple[str, ...] = ""
    """The integrity rule of a rejection, or the work check (``Mismatch.check``) of an incorrect output (a tuple: any
    of these)."""
    needs_gpu: bool = False
    allow: tuple[str, ...] = ()
    """Rules the task name allows (``?allow=``)."""


R, I = Verdict.REJECTED, Verdict.INCORRECT
EXPECTED: dict[str, Expect] = {
    # static: the result comes from PyTorch, whatever kernel stands beside it
    "exploits/relu_decoy_kernel.py": Expect(R, "reference_op"),
    "exploits/softmax_functional_wrap.py": Expect(R, "reference_op"),
    "exploits/relu_reference_call.py": Expect(R, "reference_op"),
    "exploits/relu_try_fallback.py": Expect(R, "reference_fallback"),
    "exploits/relu_inherit_pass.py": Expect(R, "reference_fallback"),
    "exploits/relu_no_kernel.py": Expect(R, "no_custom_kernel"),
    "honest/conv_relu_bias_torch_conv.py": Expect(R, "reference_op"),
    # dynamic: inputs that exercise the op, a tolerance that scales, work checks
    "exploits/relu_identity.py": Expect(Verdict.RUNTIME_ERROR, "output_aliases_input"),
    "exploits/relu_copy_kernel.py": Expect(I, "output_is_input"),
    "exploits/hardtanh_upper_only.py": Expect(I, "input_distribution"),
    "exploits/softmax_constant.py": Expect(I, "scaled_tolerance"),
    "exploits/frobenius_from_numel.py": Expect(I),
    "exploits/hinge_analytic.py": Expect(I),
    "exploits/mse_partial.py": Expect(I),
    # issue 60, at run time: PyTorch reached by another name beside a decoy launch (the trace sees it), a shortcut
    # tuned for U(0, 1) (rescaled inputs with secret statistics), a construction that replays the generator
    "exploits/relu_getattr_functional.py": Expect(R, "aten_compute"),
    "exploits/matmul_operator_module.py": Expect(R, "aten_compute"),
    "exploits/layernorm_aten_op.py": Expect(R, "aten_compute"),
    "exploits/frobenius_aten_vector_norm.py": Expect(R, "aten_compute"),
    "exploits/crossentropy_inline_module.py": Expect(R, "aten_compute"),
    "exploits/softmax_composed.py": Expect(R, "aten_compute"),
    "exploits/softmax_getattr_except.py": Expect(R, "aten_compute"),
    "exploits/softmax_numpy_decoy.py": Expect(R, "ghost_output"),
    # Its shortcut fires on get_inputs()'s own U(0, 1) too, within about 1e-4 of the answer: the salted trial inputs
    # push it past the tolerance on a trial in some evaluations (a plain mismatch there), else the secret-statistics
    # configs catch it (input_distribution). Caught either way; which comes first depends on the evaluation's salt.
    "exploits/crossentropy_sampling.py": Expect(I, ("input_distribution", "")),
    "exploits/matmul_seed_replay.py": Expect(R, "construction_draws"),
    # GPU only: what only the timing loop shows
    "exploits/relu_stale_after_warmup.py": Expect(I, needs_gpu=True),
    "exploits/relu_unnamed_side_stream.py": Expect((R, I), needs_gpu=True),
}
CONTROLS: dict[str, tuple[str, ...]] = {
    "honest/relu_triton_ok.py": (),
    "honest/softmax_triton_ok.py": (),
    "honest/frobenius_triton_ok.py": (),
    "honest/hinge_triton_ok.py": (),
    "honest/conv_relu_bias_torch_conv.py": ("reference_op",),
    "honest/matmul_triton_ok.py": (),
    "honest/layernorm_triton_ok.py": (),
    "honest/crossentropy_triton_ok.py": (),
}
"""Honest kernels and the rules their task allows; each must pass every config."""


def _task(name: str, allow: tuple[str, ...] = ()) -> KernelBenchTask:
    key = Path(name).name.split("_")[0]
    return KernelBenchTask(CORPUS / "KernelBench" / PROBLEMS[key], allow=allow)


def _evaluate(name: str, device: str, session: EvaluatorSession | None, allow: tuple[str, ...] = ()) -> Evaluation:
    task = _task(name, allow)
    code = (CORPUS / name).read_text(encoding="utf-8")
    request = EvalRequest(
        candidate=Candidate(task=task.name, language="triton", code=code, entry_point="ModelNew"), device=device
    )
    return evaluate(request, session=session)


@pytest.fixture(scope="module")
def cpu_session() -> Iterator[EvaluatorSession]:
    with EvaluatorSession("cpu", prestart=True) as session:
        yield session


def _cases(gpu: bool) -> list:
    return [
        pytest.param(name, expect, marks=[pytest.mark.gpu] if gpu else [], id=Path(name).stem)
        for name, expect in EXPECTED.items()
        if gpu or not expect.needs_gpu
    ]


def test_the_table_covers_the_corpus() -> None:
    files = {f"{p.parent.name}/{p.name}" for folder in ("exploits", "honest") for p in (CORPUS / folder).glob("*.py")}
    assert files == set(EXPECTED) | set(CONTROLS)
    assert sum(1 for name in EXPECTED if name.startswith("exploits/")) >= 12
    for name in files:
        docstring = (CORPUS / name).read_text(encoding="utf-8").lstrip()
        assert docstring.startswith('"""') and "Expected" in docstring.split('"""')[1], name
        assert Path(name).name.split("_")[0] in PROBLEMS, name


@pytest.mark.slow
@pytest.mark.parametrize(("name", "expect"), _cases(gpu=False))
def test_exploit_on_cpu(name: str, expect: Expect, cpu_session: EvaluatorSession) -> None:
    _assert_caught(name, expect, _evaluate(name, "cpu", cpu_session, expect.allow))


@pytest.mark.parametrize(("name", "expect"), _cases(gpu=True))
def test_exploit_on_cuda(name: str, expect: Expect) -> None:
    _assert_caught(name, expect, _evaluate(name, "cuda", None, expect.allow))


def _checks(expect: Expect) -> tuple[str, ...]:
    return expect.rule if isinstance(expect.rule, tuple) else (expect.rule,)


def _assert_caught(name: str, expect: Expect, evaluation: Evaluation) -> None:
    allowed = expect.verdict if isinstance(expect.verdict, tuple) else (expect.verdict,)
    assert evaluation.verdict in allowed, f"{name}: {evaluation.summary()}\n{evaluation.log}"
    assert evaluation.score is None and not evaluation.timings
    if evaluation.verdict == Verdict.REJECTED and expect.rule:
        assert evaluation.rejection is not None and evaluation.rejection.rule == expect.rule, evaluation.rejection
    elif evaluation.verdict == Verdict.INCORRECT and expect.rule:
        assert evaluation.mismatch is not None and evaluation.mismatch.check in _checks(expect), evaluation.mismatch
    elif evaluation.verdict == Verdict.RUNTIME_ERROR:
        assert expect.rule in evaluation.log, evaluation.log


@pytest.mark.parametrize(
    "name",
    [n for n, e in EXPECTED.items() if e.verdict == R and not e.needs_gpu and e.rule in STATIC_RULES],
    ids=lambda n: Path(n).stem,
)
def test_static_rejections_start_no_worker(name: str) -> None:
    rejection = integrity.check_source((CORPUS / name).read_text(encoding="utf-8"), task_name=_task(name).name)
    assert rejection is not None and rejection.rule == EXPECTED[name].rule, rejection


@pytest.mark.parametrize(
    "name",
    [n for n, e in EXPECTED.items() if any(r in RUN_TIME_RULES for r in _checks(e))],
    ids=lambda n: Path(n).stem,
)
def test_run_time_rejections_get_past_the_static_rules(name: str) -> None:
    """Issue 60's exploits name nothing the static rules know: only what they run gives them away."""
    assert integrity.check_source((CORPUS / name).read_text(encoding="utf-8"), task_name=_task(name).name) is None


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONTROLS), ids=lambda n: Path(n).stem)
def test_honest_control_passes_on_cpu(name: str, cpu_session: EvaluatorSession) -> None:
    allow = CONTROLS[name]
    task = _task(name, allow)
    assert integrity.check_source((CORPUS / name).read_text(encoding="utf-8"), task_name=task.name) is None
    evaluation = _evaluate(name, "cpu", cpu_session, allow)
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert evaluation.configs_passed == evaluation.configs_total == len(task.test_configs("cpu")) == 12


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CONTROLS), ids=lambda n: Path(n).stem)
def test_honest_control_passes_and_is_timed_on_cuda(name: str) -> None:
    """At full size: level 1's ReLU and Frobenius norm have 6.4 and 7.5 GB inputs. On a GPU of 80 GB they pass in the
    normal memory mode: neither process ran out of memory, which reruns the evaluation in low-memory mode
    (``bench/kernelbench_memory.py`` has the accounting)."""
    import torch

    evaluation = _evaluate(name, "cuda", None, CONTROLS[name])
    env = evaluation.environment
    total = torch.cuda.get_device_properties(0).total_memory >> 20
    print(
        f"{name}: peaks worker {env.get('worker_peak_gpu_mib')} MiB, checker {env.get('checker_peak_gpu_mib')} MiB "
        f"of {total} MiB ({env.get('memory_mode')} memory mode), {evaluation.verdict.value}"
    )
    assert evaluation.verdict == Verdict.PASSED and evaluation.timed, evaluation.log
    if total >= 78 << 10:
        assert env["memory_mode"] == "normal", env


def test_a_random_reference_is_named_unjudgeable_not_the_kernels_fault() -> None:
    task = KernelBenchTask(CORPUS / "KernelBench" / "level2" / "66_Matmul_Dropout_Softmax.py")
    with pytest.raises(UnjudgeableProblem, match="cannot be judged as written") as info:
        task.validate("cpu")
    assert "nn.Dropout(p=0.2) in training mode" in str(info.value) and "self.eval()" in info.value.hint
    for name in ("level1/19_ReLU.py", "level2/1_Conv2D_ReLU_BiasAdd.py"):
        KernelBenchTask(CORPUS / "KernelBench" / name).validate("cpu")  # deterministic ones pass


@pytest.mark.slow
def test_a_real_size_problem_is_checked_on_the_cpu_at_reduced_sizes_not_crashed(tmp_path: Path) -> None:
    """Issue 35 item 10: the problem's own Model as the kernel on level 1's ReLU (6.4 GB of inputs) was killed by
    the out-of-memory killer ('crashed'); now the CPU checks it at reduced sizes and says so."""
    from ksearch.flows.evaluate import evaluate_file

    problem = CORPUS / "KernelBench" / "level1" / "19_ReLU.py"
    kernel = tmp_path / "new.py"
    kernel.write_text(problem.read_text() + "\n\nModelNew = Model\n")
    evaluation = evaluate_file(f"kernelbench:{problem}?allow=reference_op,no_custom_kernel", kernel, device="cpu")
    assert evaluation.verdict == Verdict.PASSED and evaluation.configs_passed == 12, evaluation.log
    assert evaluation.log.startswith("note: checked on the CPU at reduced sizes: batch_size 4096 -> 1024, dim 393216")
