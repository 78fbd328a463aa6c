"""Your own operator as a ksearch task: ``ksearch run path/to/my_op.py``.

The operator file is plain Python (it is trusted: ksearch imports it in each evaluator worker and checker, and
in a loader without the API key where its own process holds one, ``ksearch.tasks.keyless``; only the generated kernel
is untrusted). It defines:

Required
    ``reference(*inputs) -> Tensor``
        What the kernel must compute, in PyTorch. Must be deterministic (ksearch runs it twice to check).
    ``make_inputs(config: dict, seed: int, device: str) -> list``
        Fresh inputs for one configuration, deterministic in ``seed``, already on ``device``; or instead
    ``get_inputs(config: dict) -> list``
        CPU tensors; ksearch seeds the global RNG with the config's seed first (inside ``torch.random.fork_rng``)
        and moves them to the device (KernelBench style).
    ``CONFIGS`` (or ``SHAPES``): a non-empty list of dicts, the correctness configurations. Values are
        int/float/str/bool. Reserved keys: ``name`` (default: ``k=v`` pairs joined by commas) and ``seed``
        (default: 1000 + its position).

Optional
    ``BENCHMARK_CONFIGS``: configurations that are timed on a GPU (default: ``CONFIGS``).
    ``CPU_CONFIGS``: small configurations used instead of both lists on ``--device cpu`` (the Triton interpreter
        is slow); default: ``CONFIGS`` for correctness and the first of them for the (untimed) benchmark pass.
    ``ATOL``, ``RTOL``: tolerance, ``|out - ref| <= ATOL + RTOL * |ref|`` elementwise (default: 1e-4 for float32
        outputs, 1e-2 for float16/bfloat16, as KernelBench).
    ``ENTRY_POINT``: name of the function the candidate module must define (default ``kernel``); it is called
        as ``kernel(*inputs)`` and must return a new tensor like ``reference`` does, without modifying its inputs.
    ``TITLE``: one line for ``ksearch tasks`` and prompts (default: the first line of the module docstring).
    The module docstring is shown to the model as the description of the operator.
    ``flops_and_bytes(config: dict) -> (flops, bytes)``: minimal work, for a roofline plausibility floor.

Files in KernelBench's format (``Model`` + ``get_inputs`` + ``get_init_inputs``) given as a plain path become
KernelBench tasks instead (``ksearch.tasks.kernelbench``). PROTOCOL.md in this folder has a worked example.
"""

from __future__ import annotations

import inspect
import keyword
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from ksearch.contracts.evaluation import Mismatch
from ksearch.tasks._loading import (
    OPERATOR_FORMAT_HINT,
    ProblemFormatError,
    import_file,
    to_device,
    tolerance_for,
)
from ksearch.tasks.base import Task, TaskConfig, device_kind
from ksearch.tasks.fresh_values import probed_activation_inputs
from ksearch.tasks.seeding import drawn_on

DEFAULT_ENTRY_POINT = "kernel"
_RESERVED = ("name", "seed")
_VALUE_TYPES = (bool, int, float, str)


def _require(condition: bool, path: Path, message: str) -> None:
    if not condition:
        raise ProblemFormatError(f"{path}: {message}", hint=OPERATOR_FORMAT_HINT)


def _configs(raw: Any, path: Path, label: str, seed_base: int) -> list[TaskConfig]:
    _require(isinstance(raw, (list, tuple)), path, f"{label} must be a list of dicts, not {type(raw).__qualname__}")
    _require(len(raw) > 0, path, f"{label} is empty: give at least one configuration (a dict of parameters)")
    configs: list[TaskConfig] = []
    for index, entry in enumerate(raw):
        _require(isinstance(entry, dict), path, f"{label}[{index}] must be a dict, not {type(entry).__qualname__}")
        params = {k: v for k, v in entry.items() if k not in _RESERVED}
        for key, value in params.items():
            _require(
                isinstance(key, str) and isinstance(value, _VALUE_TYPES),
                path,
                f"{label}[{index}][{key!r}] = {value!r}: values must be int, float, str or bool",
            )
        name = str(entry.get("name") or ",".join(f"{k}={v}" for k, v in params.items()) or f"{label.lower()}{index}")
        seed = entry.get("seed", seed_base + index)
        _require(isinstance(seed, int) and not isinstance(seed, bool), path, f"{label}[{index}]['seed'] must be an int")
        configs.append(TaskConfig(name=name, params=params, seed=seed))
    names = [c.name for c in configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    _require(not duplicates, path, f"{label} has duplicate config names: {', '.join(duplicates)} (set 'name' keys)")
    return configs


class UserOpTask(Task):
    """A task defined by a user's operator file (see the module docstring for the protocol)."""

    languages = ("triton",)

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).resolve()
        module = import_file(self.path, prefix="ksearch_problem")
        self.module = module
        self.name = str(self.path)
        self.source = self.path.read_text(encoding="utf-8")
        _require(callable(getattr(module, "reference", None)), self.path, "defines no function reference(*inputs)")
        self._make = getattr(module, "make_inputs", None)
        self._get = getattr(module, "get_inputs", None)
        _require(
            callable(self._make) or callable(self._get),
            self.path,
            "defines neither make_inputs(config, seed, device) nor get_inputs(config)",
        )
        raw = getattr(module, "CONFIGS", None)
        if raw is None:
            raw = getattr(module, "SHAPES", None)
        _require(raw is not None, self.path, "defines no CONFIGS (or SHAPES): a list of dicts of parameters")
        self._tests = _configs(raw, self.path, "CONFIGS", 1000)
        bench = getattr(module, "BENCHMARK_CONFIGS", None)
        self._bench = _configs(bench, self.path, "BENCHMARK_CONFIGS", 2000) if bench is not None else list(self._tests)
        cpu = getattr(module, "CPU_CONFIGS", None)
        self._cpu = _configs(cpu, self.path, "CPU_CONFIGS", 3000) if cpu is not None else None
        entry = getattr(module, "ENTRY_POINT", DEFAULT_ENTRY_POINT)
        _require(
            isinstance(entry, str) and entry.isidentifier() and not keyword.iskeyword(entry),
            self.path,
            f"ENTRY_POINT must be a Python identifier, not {entry!r}",
        )
        self.entry_point = entry
        self._atol = getattr(module, "ATOL", None)
        self._rtol = getattr(module, "RTOL", None)
        for label, value in (("ATOL", self._atol), ("RTOL", self._rtol)):
            _require(
                value is None or (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0),
                self.path,
                f"{label} must be a non-negative number, not {value!r}",
            )
        doc = inspect.getdoc(module) or ""
        self.description = doc
        title = getattr(module, "TITLE", None) or (doc.splitlines()[0] if doc else f"User operator {self.path.name}")
        self.title = str(title)
        self.atol = float(self._atol) if self._atol is not None else 1e-4
        self.rtol = float(self._rtol) if self._rtol is not None else 1e-4

    def data_paths(self) -> tuple[str, ...]:
        return (str(self.path),)

    # -- configs and inputs -------------------------------------------------------------------------------------
    def test_configs(self, device: str) -> list[TaskConfig]:
        if device_kind(device) == "cpu" and self._cpu is not None:
            return list(self._cpu)
        return list(self._tests)

    def benchmark_configs(self, device: str) -> list[TaskConfig]:
        if device_kind(device) == "cpu":
            return list(self._cpu[:1] if self._cpu is not None else self._tests[:1])
        return list(self._bench)

    def make_inputs(self, config: TaskConfig, device: str) -> list[Any]:
        params = dict(config.params)
        if callable(self._make):
            inputs = self._make(params, config.seed, device)
        else:
            inputs = to_device(drawn_on(device, config.seed, lambda: self._get(params)), device)
        if not isinstance(inputs, (list, tuple)):
            raise ProblemFormatError(
                f"{self.path}: make_inputs/get_inputs must return a list of inputs, got {type(inputs).__qualname__}"
            )
        wanted = torch.device(device)
        for position, value in enumerate(inputs):
            if isinstance(value, torch.Tensor) and not _same_device(value.device, wanted):
                raise ProblemFormatError(
                    f"{self.path}: input {position} for config {config.name} is on {value.device}, "
                    f"but device {device} was asked for",
                    hint=(
                        "create tensors with device=device in make_inputs (or use get_inputs and let ksearch move them)"
                    ),
                )
        return list(inputs)

    def reference(self, *inputs: Any) -> Any:
        return self.module.reference(*inputs)

    def activation_inputs(self, config: TaskConfig) -> tuple[int, ...]:
        """Every input tensor, when no input's shape, dtype or Python value depends on the seed (found by making
        the inputs of two seeds, on the meta device where the code allows); none otherwise."""
        return probed_activation_inputs(self, config)

    def check(self, config: TaskConfig, output: Any, expected: Any) -> Mismatch | None:
        if isinstance(expected, torch.Tensor) and (self._atol is None or self._rtol is None):
            import copy

            checker = copy.copy(self)
            tol = tolerance_for(expected.dtype)
            checker.atol = self.atol if self._atol is not None else tol
            checker.rtol = self.rtol if self._rtol is not None else tol
            return Task.check(checker, config, output, expected)
        return super().check(config, output, expected)

    # -- validation (in the agent's process, once, before a run) ------------------------------------------------
    def validate(self, device: str = "cpu") -> None:
        """Run the reference on the first test and benchmark config: inputs on ``device``, deterministic
        inputs and reference, a tensor out. Raises ProblemFormatError with what to fix."""
        first_test, first_bench = self.test_configs(device)[0], self.benchmark_configs(device)[0]
        for config in [first_test] if first_bench == first_test else [first_test, first_bench]:
            first = self.make_inputs(config, device)
            again = self.make_inputs(config, device)
            if not all(_equal(a, b) for a, b in zip(first, again, strict=True)):
                raise ProblemFormatError(
                    f"{self.path}: make_inputs is not deterministic: two calls for config {config.name} with seed "
                    f"{config.seed} gave different values",
                    hint="draw random values from a torch.Generator seeded with `seed` (or use get_inputs)",
                )
            given = [_clone(x) for x in first]
            out1 = self.reference(*given)
            if not all(_equal(a, b) for a, b in zip(given, first, strict=True)):
                raise ProblemFormatError(
                    f"{self.path}: reference modified its inputs (config {config.name}); it must leave them as they are"
                )
            out2 = self.reference(*[_clone(x) for x in first])
            if not isinstance(out1, torch.Tensor):
                raise ProblemFormatError(
                    f"{self.path}: reference must return a torch.Tensor, got {type(out1).__qualname__} (config "
                    f"{config.name})"
                )
            if not _equal(out1, out2):
                raise ProblemFormatError(
                    f"{self.path}: reference is not deterministic: two runs on the same inputs (config {config.name}) "
                    "gave different outputs",
                    hint="avoid randomness and non-deterministic ops in reference(), or compute it in float64",
                )

    # -- prompts ------------------------------------------------------------------------------------------------
    def spec(self, language: str) -> str:
        if language not in self.languages:
            raise ValueError(f"task {self.name!r} has no spec for language {language!r}; it supports {self.languages}")
        tol = (
            f"atol={self.atol:g}, rtol={self.rtol:g}"
            if self._atol is not None and self._rtol is not None
            else "atol = rtol = 1e-4 for float32 outputs, 1e-2 for float16/bfloat16 (unless set below)"
        )
        shapes = "; ".join(c.name for c in self._bench)
        return f"""Task: {self.title}

{self.description or "(no description: see the reference)"}

Write a Python module defining `def {self.entry_point}(*inputs)` that returns the same tensor as `reference(*inputs)`
below, computed with custom {language.capitalize()} kernels (`@triton.jit`). Do not modify the inputs.
Correctness: every configuration in CONFIGS, elementwise |out - ref| <= atol + rtol * |ref| with {tol}.
Timed configurations: {shapes}.

The operator file (reference, input generator and configurations):
```python
{self.source.rstrip()}
```
"""

    def reference_source(self) -> str:
        return self.source

    def flops_and_bytes(self, config: TaskConfig) -> tuple[float, float]:
        fn = getattr(self.module, "flops_and_bytes", None)
        if callable(fn):
            flops, nbytes = fn(dict(config.params))
            return float(flops), float(nbytes)
        return 0.0, 0.0


def _same_device(have: torch.device, want: torch.device) -> bool:
    if have.type != want.type:
        return False
    return want.index is None or have.index is None or have.index == want.index


def _clone(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b) or _nan_equal(a, b))
    return type(a) is type(b) and a == b


def _nan_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if not (a.is_floating_point() or a.is_complex()):
        return False
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def is_userop_module(module: ModuleType) -> bool:
    """Meant as an operator file: defines any of the protocol's names (missing ones are reported by UserOpTask)."""
    return any(hasattr(module, n) for n in ("reference", "make_inputs", "get_inputs", "CONFIGS", "SHAPES"))


__all__ = ["UserOpTask"]
