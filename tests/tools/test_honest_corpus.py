"""The honest corpus: kernels written the way GPU MODE leaderboard entries are, through the real checks.

Each file in ``honest/`` is a correct kernel using patterns real submissions use (template header, a Lock around a
lazy ``load_inline`` build, build variables, derived weights cached in the weights dict, ``lru_cache`` on shape
helpers, TF32 switches, prints and logging, autotune, workspace caches, device queries, cuBLAS, hybrid PyTorch, a
``torch.library`` custom op, two joined CUDA streams, ``torch.compile``, pattern matching on shapes). Every
static rule must let all of them through, and the real ``evaluate()`` must pass them: a false rejection of an honest
kernel is as much a defect as a missed hack. ``CASES`` is the contract.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.tasks.registry import resolve_task
from ksearch.tools import integrity
from ksearch.tools.evaluator import EvalRequest, EvaluatorSession, evaluate

HONEST = Path(__file__).resolve().parent / "honest"


class Case(NamedTuple):
    task: str
    language: str
    cpu: bool
    """Runs on the CPU (Triton interpreter); False for GPU-only code (load_inline, CUDA streams), whose docstring
    says "GPU only"."""


CASES: dict[str, Case] = {
    "softmax_autotune.py": Case("softmax", "triton", cpu=True),
    "softmax_debug_print.py": Case("softmax", "triton", cpu=True),
    "softmax_heuristics_workspace.py": Case("softmax", "triton", cpu=True),
    "softmax_persistent.py": Case("softmax", "triton", cpu=True),
    "trimul_autotune.py": Case("trimul", "triton", cpu=True),
    "trimul_cublas_lock.py": Case("trimul", "cuda", cpu=False),
    "trimul_cuda_cached_build.py": Case("trimul", "cuda", cpu=False),
    "trimul_einsum_epilogue.py": Case("trimul", "triton", cpu=True),
    "trimul_gpumode_helpers.py": Case("trimul", "triton", cpu=True),
    "trimul_lock_plans.py": Case("trimul", "triton", cpu=True),
    "trimul_persistent_contract.py": Case("trimul", "triton", cpu=True),
    "trimul_template_hybrid.py": Case("trimul", "triton", cpu=True),
    "trimul_tf32_debug.py": Case("trimul", "triton", cpu=True),
    "trimul_torch_compile_small.py": Case("trimul", "triton", cpu=True),
    "trimul_weights_dict_cache.py": Case("trimul", "triton", cpu=True),
    "trimul_workspace_devprops.py": Case("trimul", "triton", cpu=True),
    # issue 30's red team: legitimate code the trust defences must not refuse
    "softmax_custom_op_triton.py": Case("softmax", "triton", cpu=True),
    "softmax_joined_streams.py": Case("softmax", "triton", cpu=False),
    "softmax_match_shapes.py": Case("softmax", "triton", cpu=True),
    "softmax_torch_compile.py": Case("softmax", "triton", cpu=True),
    "trimul_fused_id_cache.py": Case("trimul", "triton", cpu=True),
    # issue 59: CUDA graph capture called where it stands is judged at run time
    "softmax_cuda_graph.py": Case("softmax", "triton", cpu=False),
}


def _params(*, gpu: bool) -> list:
    params = []
    for name, case in CASES.items():
        if not gpu and not case.cpu:
            continue
        marks = [pytest.mark.gpu] if gpu else [pytest.mark.slow]
        params.append(pytest.param(name, case, marks=marks, id=name.removesuffix(".py")))
    return params


def _evaluate(name: str, case: Case, device: str, session: EvaluatorSession | None = None) -> Evaluation:
    code = (HONEST / name).read_text(encoding="utf-8")
    candidate = Candidate(
        task=case.task, language=case.language, code=code, entry_point=resolve_task(case.task).entry_point
    )
    return evaluate(EvalRequest(candidate=candidate, device=device), session=session)


def test_the_table_covers_the_corpus() -> None:
    files = {p.name for p in HONEST.glob("*.py")}
    assert files == set(CASES), f"unlisted: {sorted(files - set(CASES))}; missing: {sorted(set(CASES) - files)}"
    assert len(files) >= 21
    manifest = (HONEST / "README.md").read_text(encoding="utf-8")
    for name, case in CASES.items():
        docstring = (HONEST / name).read_text(encoding="utf-8").lstrip()
        assert docstring.startswith('"""') and "CPU interpreter:" in docstring.split('"""')[1], name
        assert name.startswith(case.task) and f"`{name}`" in manifest, name
        assert case.cpu == ("GPU only" not in docstring), name


@pytest.mark.parametrize(("name", "case"), [pytest.param(n, c, id=n.removesuffix(".py")) for n, c in CASES.items()])
def test_every_static_rule_lets_it_through(name: str, case: Case) -> None:
    code = (HONEST / name).read_text(encoding="utf-8")
    assert integrity.scan(code, task_name=case.task) == []
    assert integrity.check_source(code, task_name=case.task) is None


@pytest.mark.parametrize(("name", "case"), _params(gpu=False))
def test_it_passes_on_the_cpu(name: str, case: Case, cpu_session: EvaluatorSession) -> None:
    evaluation = _evaluate(name, case, "cpu", cpu_session)
    assert evaluation.verdict == Verdict.PASSED, f"{evaluation.summary()}\n{evaluation.log}"
    assert evaluation.configs_passed == evaluation.configs_total > 0


@pytest.mark.parametrize(("name", "case"), _params(gpu=True))
def test_it_passes_and_is_timed_on_cuda(name: str, case: Case) -> None:
    evaluation = _evaluate(name, case, "cuda")
    assert evaluation.verdict == Verdict.PASSED, f"{evaluation.summary()}\n{evaluation.log}"
    assert evaluation.configs_passed == evaluation.configs_total > 0
    assert evaluation.timed and evaluation.score is not None and evaluation.score > 0
