"""KernelBench problems as ksearch tasks.

A problem is a Python file in KernelBench's format: ``class Model(nn.Module)``, ``get_inputs()`` (CPU tensors) and
``get_init_inputs()`` (constructor arguments). A solution is a module defining ``class ModelNew(nn.Module)`` with
the same constructor and forward signature; here its kernels are written in Triton.

Task names (see ``ksearch.tasks.registry``):

- ``kernelbench:<level>/<id>``: problem ``<id>`` of ``level<level>`` in a KernelBench checkout, found at
  ``<root>/KernelBench/level<level>/<id>_*.py`` where ``<root>`` is ``--kernelbench-root`` or ``$KERNELBENCH_ROOT``
  (a root that is itself the ``KernelBench`` folder also works);
- ``kernelbench:path/to/problem.py``: any single file in the format.

Both are canonicalised to ``kernelbench:/absolute/path/to/problem.py`` (``canonical_name``) before a run starts,
because the evaluator's worker runs in a private directory with a scrubbed environment and must find the file again.

Correctness follows KernelBench: 5 trials whose seeds derive from seed 42 exactly as KernelBench derives them; per
trial the global RNG is seeded before ``get_init_inputs()``, before building ``Model``/``ModelNew`` (so their
weights match) and before ``get_inputs()``; outputs compare with ``torch.allclose``-style tolerances per dtype
(fp32 1e-4, fp16/bf16 1e-2, atol = rtol). The reference runs in a different process from the candidate, so both
sides are built deterministically: ``prepare`` builds ``ModelNew`` and ``expected`` builds ``Model`` under
``torch.manual_seed(config.seed)`` inside ``torch.random.fork_rng`` (the caller's RNG state is untouched).
Speedups over PyTorch eager (or ``torch.compile``) come from ``ksearch.tasks.kernelbench.baseline``.
"""

from __future__ import annotations

import copy
import inspect
import os
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from ksearch.errors import UserError
from ksearch.tasks._loading import ProblemFormatError, import_file, to_device, tolerance_for
from ksearch.tasks.base import Task, TaskConfig
from ksearch.tasks.fresh_values import probed_activation_inputs
from ksearch.contracts.evaluation import Mismatch

PREFIX = "kernelbench:"
ROOT_ENV = "KERNELBENCH_ROOT"
NUM_CORRECT_TRIALS = 5
SEED_NUM = 42
"""KernelBench's default ``seed_num``: trial seeds are drawn from a generator seeded with it."""
BENCHMARK_SEED = 2025
ENTRY_POINT = "ModelNew"


class KernelBenchError(UserError):
    """A KernelBench problem cannot be found."""


def trial_seeds(n: int = NUM_CORRECT_TRIALS, seed_num: int = SEED_NUM) -> list[int]:
    """The per-trial seeds, drawn the way KernelBench draws them (``torch.randint(0, 2**32 - 1, (1,))`` after
    ``torch.manual_seed(seed_num)``), but from a private generator."""
    generator = torch.Generator(device="cpu").manual_seed(seed_num)
    return [int(torch.randint(0, 2**32 - 1, (1,), generator=generator).item()) for _ in range(n)]


# -- finding problems -----------------------------------------------------------------------------------------------
def kernelbench_root(explicit: str | Path | None = None) -> Path:
    """The checkout's ``KernelBench`` folder (the one holding ``level1``...), from the argument or the environment."""
    raw = str(explicit) if explicit else os.environ.get(ROOT_ENV, "")
    if not raw:
        raise KernelBenchError(
            "KernelBench problems need a KernelBench checkout, and none is set",
            hint=f"pass --kernelbench-root PATH or export {ROOT_ENV}=PATH (the clone of ScalingIntelligence/KernelBench); "
            "or name one file: kernelbench:path/to/problem.py",
        )
    root = Path(raw).expanduser().resolve()
    for candidate in (root / "KernelBench", root):
        if candidate.is_dir() and any(candidate.glob("level*")):
            return candidate
    raise KernelBenchError(
        f"{root} is not a KernelBench checkout: neither {root}/KernelBench/level*/ nor {root}/level*/ exists",
        hint=f"point --kernelbench-root (or {ROOT_ENV}) at the repository clone",
    )


def levels(root: Path) -> list[int]:
    found = []
    for folder in root.glob("level*"):
        suffix = folder.name.removeprefix("level")
        if folder.is_dir() and suffix.isdigit():
            found.append(int(suffix))
    return sorted(found)


def problems(root: Path, level: int) -> dict[int, Path]:
    """Problem id -> file for one level (files named ``<id>_<Name>.py``)."""
    folder = root / f"level{level}"
    if not folder.is_dir():
        have = ", ".join(str(n) for n in levels(root)) or "none"
        raise KernelBenchError(f"KernelBench level {level} not found under {root} (levels there: {have})")
    found: dict[int, Path] = {}
    for path in folder.glob("*.py"):
        head = path.name.split("_", 1)[0]
        if head.isdigit():
            found[int(head)] = path
    return dict(sorted(found.items()))


def compact_ranges(ids: list[int]) -> str:
    """[1, 2, 3, 7, 9, 10] -> '1-3, 7, 9-10'."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def parse_ids(text: str) -> list[int]:
    """'1-3,7' -> [1, 2, 3, 7] (the --problems syntax)."""
    ids: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise KernelBenchError(f"bad problem selection {part!r}: use ids and ranges like 1-20,25")
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        if high < low:
            raise KernelBenchError(f"bad problem range {part!r}: the end is before the start")
        ids.update(range(low, high + 1))
    return sorted(ids)


_LEVEL_ID = re.compile(r"^(?:level)?(\d+)/(\d+)(?:_\w*)?$")


def parse_level(text: str) -> int:
    match = re.fullmatch(r"(?:level)?(\d+)", text.strip())
    if not match:
        raise KernelBenchError(f"{text!r} is not a KernelBench level (expected e.g. 1 or level1)")
    return int(match.group(1))


def find_problem(spec: str, root: str | Path | None = None) -> Path:
    """The problem file that ``spec`` (``<level>/<id>`` or a path to a .py file) names."""
    spec = spec.strip()
    if spec.endswith(".py"):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise KernelBenchError(f"KernelBench problem file {spec} not found")
        return path.resolve()
    match = _LEVEL_ID.match(spec)
    if not match:
        raise KernelBenchError(
            f"kernelbench:{spec} names neither a problem nor a file",
            hint="use kernelbench:<level>/<id> (e.g. kernelbench:1/19) or kernelbench:path/to/problem.py",
        )
    level, problem_id = int(match.group(1)), int(match.group(2))
    base = kernelbench_root(root)
    found = problems(base, level)
    if problem_id not in found:
        have = compact_ranges(list(found)) or "none"
        raise KernelBenchError(f"KernelBench level {level} has no problem {problem_id} (problems there: {have})")
    return found[problem_id]


def canonical_name(spec: str, root: str | Path | None = None) -> str:
    """``kernelbench:/absolute/path.py`` for any accepted spelling (with or without the prefix)."""
    return PREFIX + str(find_problem(spec.removeprefix(PREFIX), root))


# -- loading a problem file -----------------------------------------------------------------------------------------
def is_kernelbench_module(module: ModuleType) -> bool:
    """Meant as a KernelBench problem: defines ``Model`` or ``get_init_inputs`` (missing names are reported by
    ``load_problem``)."""
    return hasattr(module, "Model") or hasattr(module, "get_init_inputs")


def load_problem(path: Path) -> ModuleType:
    """Import a problem file and check its format: ``Model`` (an nn.Module), ``get_inputs``, ``get_init_inputs``."""
    module = import_file(path, prefix="ksearch_problem")
    missing = []
    model = getattr(module, "Model", None)
    if not (inspect.isclass(model) and issubclass(model, torch.nn.Module)):
        missing.append("class Model(nn.Module)")
    for name in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, name, None)):
            missing.append(f"function {name}()")
    if missing:
        raise ProblemFormatError(
            f"{path} is not a KernelBench problem: it lacks {', '.join(missing)}",
            hint="a problem defines class Model(nn.Module), get_inputs() and get_init_inputs() at module level",
        )
    return module


def describe_level_path(path: Path) -> str:
    """'level1/19_ReLU' for a file inside a checkout, else the file name."""
    parent = path.parent.name
    return f"{parent}/{path.stem}" if parent.startswith("level") else path.name


class KernelBenchTask(Task):
    """One KernelBench problem. The candidate defines ``ModelNew``; the reference is the problem's ``Model``."""

    entry_point = ENTRY_POINT
    languages = ("triton",)
    atol = 1e-4
    rtol = 1e-4

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).resolve()
        self.problem = load_problem(self.path)
        self.name = PREFIX + str(self.path)
        self.title = f"KernelBench {describe_level_path(self.path)}"
        self.source = self.path.read_text(encoding="utf-8")

    # -- configs and inputs -------------------------------------------------------------------------------------
    def test_configs(self, device: str) -> list[TaskConfig]:
        return [TaskConfig(name=f"trial{i}", params={}, seed=seed) for i, seed in enumerate(trial_seeds())]

    def benchmark_configs(self, device: str) -> list[TaskConfig]:
        return [TaskConfig(name="benchmark", params={}, seed=BENCHMARK_SEED)]

    def make_inputs(self, config: TaskConfig, device: str) -> list[Any]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            inputs = self.problem.get_inputs()
        return list(to_device(list(inputs), device))

    def init_inputs(self, config: TaskConfig) -> list[Any]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            return list(self.problem.get_init_inputs())

    def build(self, cls: type, config: TaskConfig, device: str) -> torch.nn.Module:
        """``cls(*get_init_inputs())`` with the global RNG seeded by the config's seed, moved to ``device``."""
        init = self.init_inputs(config)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            model = cls(*init)
        return model.to(device) if isinstance(model, torch.nn.Module) else model

    def prepare(self, module: Any, config: TaskConfig, device: str) -> Callable[..., Any]:
        model = self.build(getattr(module, self.entry_point), config, device)

        def run(*inputs: Any) -> Any:
            with torch.no_grad():
                return model(*inputs)

        return run

    def expected(self, config: TaskConfig, inputs: list[Any]) -> Any:
        device = _device_of(inputs)
        model = self.build(self.problem.Model, config, device)
        with torch.no_grad():
            return model(*inputs)

    def reference(self, *inputs: Any) -> Any:
        return self.expected(self.test_configs("cpu")[0], list(inputs))

    def activation_inputs(self, config: TaskConfig) -> tuple[int, ...]:
        """Every input tensor, when no input's shape, dtype or Python value depends on the seed (found by making
        the inputs of two seeds, on the meta device where the code allows); none otherwise."""
        return probed_activation_inputs(self, config)

    # -- checking -----------------------------------------------------------------------------------------------
    def check(self, config: TaskConfig, output: Any, expected: Any) -> Mismatch | None:
        """Per-dtype tolerance (KernelBench's); tuple/list outputs are compared element by element."""
        if isinstance(expected, (tuple, list)):
            if not isinstance(output, (tuple, list)) or len(output) != len(expected):
                got = f"{type(output).__qualname__} of {len(output)}" if isinstance(output, (tuple, list)) else type(output).__qualname__
                return Mismatch(config=config.name, message=f"{config.name}: expected a sequence of {len(expected)} outputs, got {got}")
            for index, (out, exp) in enumerate(zip(output, expected, strict=True)):
                mismatch = self.check(config, out, exp)
                if mismatch is not None:
                    return mismatch.model_copy(update={"message": f"output {index}: {mismatch.message}"})
            return None
        if not isinstance(expected, torch.Tensor):
            if output == expected:
                return None
            return Mismatch(config=config.name, message=f"{config.name}: got {output!r}, expected {expected!r}")
        tol = tolerance_for(expected.dtype)
        checker = copy.copy(self)
        checker.atol = checker.rtol = tol
        return Task.check(checker, config, output, expected)

    # -- prompts ------------------------------------------------------------------------------------------------
    def spec(self, language: str) -> str:
        if language not in self.languages:
            raise ValueError(f"task {self.name!r} has no spec for language {language!r}; it supports {self.languages}")
        return f"""Task: {self.title} (KernelBench format).

Write a Python module defining `class ModelNew(nn.Module)` that computes exactly what `Model` below computes, with
the same constructor arguments (`ModelNew(*get_init_inputs())`) and the same forward signature
(`ModelNew(...)(*get_inputs())`), using custom {language.capitalize()} kernels (`@triton.jit`) for the computation.
Keep the parameters the reference creates (same names, shapes and creation order) so that, with the same seed,
`ModelNew` gets the same weights as `Model`: the harness seeds the RNG before building each of them.

Correctness: {NUM_CORRECT_TRIALS} trials with different seeds; outputs must match the reference within
atol = rtol = 1e-4 for float32 outputs and 1e-2 for float16/bfloat16 outputs (no TF32 or lower-precision shortcuts
for float32). The inputs come from `get_inputs()` moved to the GPU; they must not be modified.
Timing: the forward call on `get_inputs()` at the sizes below; the score is the speedup over PyTorch eager.

Reference (the problem file):
```python
{self.source.rstrip()}
```
"""

    def reference_source(self) -> str:
        return self.source

    def starter_code(self, language: str) -> str | None:
        return None

    def flops_and_bytes(self, config: TaskConfig) -> tuple[float, float]:
        """Unknown for an arbitrary problem: (0, 0) means "no roofline floor"."""
        return 0.0, 0.0


def _device_of(inputs: list[Any]) -> str:
    for value in inputs:
        if isinstance(value, torch.Tensor):
            return str(value.device)
    return "cpu"


__all__ = [
    "KernelBenchError",
    "KernelBenchTask",
    "canonical_name",
    "find_problem",
    "kernelbench_root",
    "load_problem",
    "parse_ids",
    "problems",
    "trial_seeds",
]
