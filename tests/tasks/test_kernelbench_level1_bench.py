"""bench/kernelbench_level1.py's honest kernels: each names a vendored problem, and each passes every check on the
CPU (the bench times them on a GPU at full size)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Verdict
from ksearch.tasks.kernelbench import KernelBenchTask
from ksearch.tasks.kernelbench.problem_files import find_problem
from ksearch.tools import integrity
from ksearch.tools.evaluator import EvalRequest, EvaluatorSession, evaluate

REPO = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kernelbench_level1_bench", REPO / "bench" / "kernelbench_level1.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


BENCH = _bench()


def test_every_bench_problem_is_vendored_and_its_kernel_passes_the_static_rules() -> None:
    assert len(BENCH.KERNELS) >= 10 and set(BENCH.ORDER) <= set(BENCH.KERNELS) and len(BENCH.ORDER) >= 10
    for problem, kernel in BENCH.KERNELS.items():
        task = KernelBenchTask(find_problem(f"1/{problem}", BENCH.ROOT))
        assert integrity.check_source(kernel.read_text(encoding="utf-8"), task_name=task.name) is None, kernel


@pytest.fixture(scope="module")
def cpu_session() -> Iterator[EvaluatorSession]:
    with EvaluatorSession("cpu", prestart=True) as session:
        yield session


@pytest.mark.slow
@pytest.mark.parametrize("problem", [p for p, k in BENCH.KERNELS.items() if k.parent == BENCH.BENCH], ids=str)
def test_bench_kernel_passes_on_cpu(problem: int, cpu_session: EvaluatorSession) -> None:
    """The corpus's honest kernels (1, 2, 8, 13 share the matmul; 40; 95) are the corpus tests'; these are the rest."""
    task = KernelBenchTask(find_problem(f"1/{problem}", BENCH.ROOT))
    code = BENCH.KERNELS[problem].read_text(encoding="utf-8")
    candidate = Candidate(task=task.name, language="triton", code=code, entry_point="ModelNew")
    evaluation = evaluate(EvalRequest(candidate=candidate, device="cpu"), session=cpu_session)
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert evaluation.configs_passed == evaluation.configs_total == len(task.test_configs("cpu"))
