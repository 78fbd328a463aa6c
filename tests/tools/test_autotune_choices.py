"""``autotune_choices``: the config each ``@triton.autotune`` kernel kept at a timed shape (issue 57), read without
running any code of the candidate's (issue 59): Triton's real autotuner, and objects of a candidate's that record every
method, property, comparison or formatting the harness would run on them."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

triton = pytest.importorskip("triton")

from ksearch.tools.evaluator.worker.autotune_choices import (  # noqa: E402
    autotuners,
    describe_config,
    forget_choices,
    tuned_choices,
)

AUTOTUNED = Path(__file__).resolve().parents[1] / "tasks" / "data" / "softmax_triton_autotuned.py"
SWEEP_MODULE = """
import triton
import triton.language as tl


@triton.heuristics({"C": lambda args: 1})
@triton.autotune(configs=[triton.Config({"B": 16}), triton.Config({"B": 32}, num_warps=8)], key=["n"])
@triton.jit
def swept(x, n, B: tl.constexpr, C: tl.constexpr):
    pass


@triton.autotune(configs=[triton.Config({"R": 1}), triton.Config({"R": 2})], key=["n"])
@triton.heuristics({"C": lambda args: 1})
@triton.jit
def inner(x, n, R: tl.constexpr, C: tl.constexpr):
    pass


@triton.jit
def plain(x):
    pass
"""


def _load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> ModuleType:
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__(name)
    return sys.modules[name]


def test_the_config_each_autotuned_kernel_kept_is_read_per_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launch-parameter sweep's result: after a shape's timing, each autotuner's last choice, through either order
    of the ``heuristics`` wrapper; one that did not run at the shape reports nothing there."""
    module = _load(tmp_path, monkeypatch, "swept_module", SWEEP_MODULE)
    tuners = autotuners(module)
    assert sorted(t.kernel for t in tuners) == ["inner", "swept"]  # the plain kernel has no autotuner
    swept = next(t for t in tuners if t.kernel == "swept")
    # the grid as written (a test may have made this process's autotuners keep their first config only)
    module.swept.fn.configs = [triton.Config({"B": 16}), triton.Config({"B": 32}, num_warps=8)]
    module.swept.fn.best_config = module.swept.fn.configs[1]  # what Triton's run sets on every call
    (choice,) = tuned_choices(tuners, "b0")
    assert (choice.config, choice.kernel, choice.choice, choice.configs) == (
        "b0",
        "swept",
        "B=32, num_warps=8, num_stages=3",
        2,
    )
    assert choice.describe() == "swept: B=32, num_warps=8, num_stages=3 (of 2 configs)"
    forget_choices(tuners)
    assert swept.fields["best_config"] is None and module.swept.fn.best_config is None
    assert tuned_choices(tuners, "b1") == []


class _Log:
    calls: list[str] = []


class _Meta(type):
    """A class that answers comparisons, hashing and isinstance checks with code of its own."""

    def __eq__(cls, other: object) -> bool:
        _Log.calls.append("metaclass __eq__")
        return True

    def __hash__(cls) -> int:
        _Log.calls.append("metaclass __hash__")
        return 0

    def __instancecheck__(cls, instance: object) -> bool:
        _Log.calls.append("metaclass __instancecheck__")
        return True


class _Trap(metaclass=_Meta):
    """Records every attribute read, formatting and conversion the harness would make of it."""

    def __getattribute__(self, name: str) -> Any:
        _Log.calls.append(f"read {name}")
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        _Log.calls.append(f"missing {name}")
        return _Trap()

    def __format__(self, spec: str) -> str:
        _Log.calls.append("format")
        return "trap"

    def __str__(self) -> str:
        _Log.calls.append("str")
        return "trap"

    __repr__ = __str__


class _LyingDict(dict):
    def get(self, key: Any, default: Any = None) -> Any:
        _Log.calls.append(f"dict get {key}")
        return super().get(key, default)


def test_no_code_of_the_candidates_runs_while_its_choices_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Objects that look like kernels, an autotuner subclass with a property, a lying instance dictionary and a
    parameter that formats itself: none of their code runs, and the honest autotuner beside them is still read, with
    the parameter that is not a plain value left out."""
    from triton.runtime.autotuner import Autotuner

    module = _load(tmp_path, monkeypatch, "trapped_module", SWEEP_MODULE)
    honest = module.swept.fn  # the autotuner under the heuristics wrapper

    class Subclass(Autotuner):
        @property
        def best_config(self) -> Any:
            _Log.calls.append("property best_config")
            return honest.configs[0]

    sub = object.__new__(Subclass)
    vars(sub).update(fn=honest.fn, configs=honest.configs)
    lying = object.__new__(Autotuner)
    lying.__dict__ = _LyingDict(fn=honest.fn, configs=honest.configs)
    wrapped_trap = object.__new__(Autotuner)
    vars(wrapped_trap).update(fn=_Trap(), configs=[])
    module.trap, module.sub, module.lying, module.wrapped_trap = _Trap(), sub, lying, wrapped_trap
    honest.best_config = triton.Config({"B": 32, "EXTRA": _Trap()}, num_warps=8)
    _Log.calls = []

    tuners = autotuners(module)
    assert sorted(t.kernel for t in tuners) == ["inner", "swept"]
    forget_choices(tuners)
    honest.best_config = triton.Config({"B": 32, "EXTRA": _Trap()}, num_warps=8)
    choices = tuned_choices(tuners, "b0")
    assert [c.choice for c in choices] == ["B=32, num_warps=8, num_stages=3"]
    assert _Log.calls == []


def test_a_config_shows_plain_values_with_string_keys_only() -> None:
    assert describe_config({"kwargs": {"BLOCK_M": 64, "SPLIT": True, "F": 0.5, "MODE": "a"}, "num_warps": 4}) == (
        "BLOCK_M=64, SPLIT=True, F=0.5, MODE=a, num_warps=4"
    )
    assert describe_config({"kwargs": {1: 2, "N": None}, "num_stages": 2}) == "num_stages=2"
    assert describe_config({"kwargs": _LyingDict(B=1), "num_warps": 2}) == "num_warps=2"


@pytest.fixture
def cpu_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSEARCH_CPU_TIMING", "1")


@pytest.mark.serial  # it times a kernel: alone, in the test command's second pass
@pytest.mark.usefixtures("cpu_timing")
def test_an_evaluation_on_the_cpus_timing_reports_the_kept_config_at_every_timed_shape() -> None:
    """The whole evaluator on the CPU (its sandbox and containment included): the autotuned softmax is timed, and
    each timed shape says what its autotuner kept there (under the interpreter, the first of its configs)."""
    from ksearch.contracts.candidate import Candidate
    from ksearch.contracts.evaluation import Verdict
    from ksearch.tools.evaluator import EvalRequest, evaluate

    candidate = Candidate(task="softmax", language="triton", code=AUTOTUNED.read_text())
    evaluation = evaluate(
        EvalRequest(candidate=candidate, task="softmax", device="cpu", timing=True, timing_method="gpumode-benchmark")
    )
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert [t.config for t in evaluation.tuning] == [t.config for t in evaluation.timings] != []
    assert {(c.kernel, c.choice, c.configs) for c in evaluation.tuning} == {
        ("_softmax_row", "num_warps=2, num_stages=1", 1)
    }


@pytest.mark.gpu
def test_an_evaluation_reports_the_config_the_sweep_kept_at_every_timed_shape() -> None:
    """On a GPU: the autotuned softmax is timed, and every timed shape says which of its 3 configs won there."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from ksearch.contracts.candidate import Candidate
    from ksearch.tools.evaluator import EvalRequest, evaluate

    candidate = Candidate(task="softmax", language="triton", code=AUTOTUNED.read_text())
    evaluation = evaluate(EvalRequest(candidate=candidate, task="softmax", device="cuda", timing=True))
    assert evaluation.passed and evaluation.timed, evaluation.log
    assert [t.config for t in evaluation.tuning] == [t.config for t in evaluation.timings]
    for choice in evaluation.tuning:
        assert choice.kernel == "_softmax_row" and choice.configs == 3
        assert re.fullmatch(r"num_warps=(2|4|8), num_stages=1", choice.choice), choice
