"""The test-only executors (``tests/helpers/in_process_executor.py``, ``tests/fakes.py``) give the sandboxed
evaluator's verdicts on the kernels graph, CLI and flow tests use: tests that trust them must not see another
verdict than a real run would."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.tools.evaluator import EvalRequest, EvaluatorSession, evaluate
from ksearch.tools.fingerprint import probe_device
from tests.fakes import FakeExecutor, cpu_device_info
from tests.helpers.in_process_executor import InProcessExecutor
from tests.helpers.scripts import WRONG_KERNEL, demo_replies, row_kernel

EXPLOITS = Path(__file__).resolve().parent / "tools" / "exploits"

KERNELS = {
    "correct": (row_kernel(1), Verdict.PASSED),
    "wrong": (WRONG_KERNEL.format(sleep=0.0, variant=2), Verdict.INCORRECT),
    "syntax": ("def kernel(x) return x\n", Verdict.COMPILE_ERROR),
    "no_entry_point": ("import torch\nx = 1\n", Verdict.COMPILE_ERROR),
    "raises": ("import torch\ndef kernel(x):\n    raise ValueError('no')\n", Verdict.RUNTIME_ERROR),
    "static_rule": ((EXPLOITS / "sys_modules_patch.py").read_text(encoding="utf-8"), Verdict.REJECTED),
    "wrong_shape": ("import torch\ndef kernel(x):\n    return (x * 2.0)[:, :1]\n", Verdict.INCORRECT),
}
DEMO_KERNELS = {
    key: re.search(r"```python\n(.*?)```", reply, re.S).group(1)  # type: ignore[union-attr]
    for key, reply in demo_replies().items()
    if key.startswith("write:")
}
"""The scripted demo's kernels, which several graph and CLI tests run."""
FAKE_KNOWS = {"correct", "wrong", "syntax", "static_rule"}
"""The kernels of ``KERNELS`` the fake has a verdict for without a table (the shared kernels, a module that does not
parse, the static rules)."""


def _shape(evaluation: Evaluation) -> tuple:
    return (
        evaluation.verdict,
        evaluation.configs_passed,
        evaluation.configs_total,
        evaluation.mismatch.config if evaluation.mismatch else None,
        evaluation.rejection.rule if evaluation.rejection else None,
    )


@pytest.fixture(scope="module")
def session() -> Iterator[EvaluatorSession]:
    with EvaluatorSession("cpu") as live:
        yield live


@pytest.mark.parametrize("name", list(KERNELS))
def test_it_gives_the_sandboxed_evaluators_verdict(name: str, session: EvaluatorSession) -> None:
    code, verdict = KERNELS[name]
    request = EvalRequest(candidate=Candidate(task="softmax", language="triton", code=code), device="cpu")
    fake = InProcessExecutor().evaluate(request)
    real = evaluate(request, session=session)
    assert (fake.verdict, fake.configs_passed, fake.configs_total) == (
        real.verdict,
        real.configs_passed,
        real.configs_total,
    ), f"in process: {fake.summary()}\n{fake.log}\nsandboxed: {real.summary()}\n{real.log}"
    assert fake.verdict == verdict
    if name in FAKE_KNOWS:
        assert _shape(FakeExecutor().evaluate(request)) == _shape(real), real.log


@pytest.mark.parametrize("key", list(DEMO_KERNELS))
def test_it_agrees_on_the_demos_kernels(key: str, session: EvaluatorSession) -> None:
    request = EvalRequest(candidate=Candidate(task="softmax", language="triton", code=DEMO_KERNELS[key]), device="cpu")
    fake = InProcessExecutor().evaluate(request)
    real = evaluate(request, session=session)
    assert (fake.verdict, fake.configs_passed) == (real.verdict, real.configs_passed), f"{fake.log}\n{real.log}"
    assert _shape(FakeExecutor().evaluate(request)) == _shape(real), real.log


def test_it_refuses_what_it_cannot_do() -> None:
    request = EvalRequest(candidate=Candidate(task="softmax", language="triton", code=row_kernel(1)), device="cuda")
    with pytest.raises(AssertionError, match="real executor"):
        InProcessExecutor().evaluate(request)


def test_the_fake_refuses_what_it_cannot_know_and_keys_evaluations_as_the_real_executor() -> None:
    unknown = EvalRequest(candidate=Candidate(task="softmax", language="triton", code="import torch\nx = 1\n"))
    with pytest.raises(AssertionError, match="no verdict for this candidate"):
        FakeExecutor().evaluate(unknown.model_copy(update={"device": "cpu"}))
    timed = EvalRequest(candidate=Candidate(task="softmax", language="triton", code=row_kernel(1)), device="cuda")
    with pytest.raises(AssertionError, match="untimed requests only"):
        FakeExecutor().evaluate(timed)
    marked = Candidate(task="softmax", language="triton", code="# fake-verdict: incorrect passed=2\n")
    evaluation = FakeExecutor().evaluate(EvalRequest(candidate=marked, device="cpu"))
    assert (evaluation.verdict, evaluation.configs_passed, evaluation.configs_total) == (Verdict.INCORRECT, 2, 8)
    assert cpu_device_info() == probe_device("cpu")  # the same evaluation cache key
