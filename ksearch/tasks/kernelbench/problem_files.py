"""Finding and loading KernelBench problem files: the checkout's root, its levels and problems, task-name options
(``?allow=``), the canonical ``kernelbench:/absolute/path.py`` name, and the check of a problem file's format.
"""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path
from types import ModuleType
from urllib.parse import parse_qsl

import torch

from ksearch.errors import UserError
from ksearch.tasks._loading import ProblemFormatError, import_file

PREFIX = "kernelbench:"
ROOT_ENV = "KERNELBENCH_ROOT"
ALLOWABLE_RULES = ("reference_op", "no_custom_kernel")
"""Integrity rules a task name may allow (``?allow=``); falling back to PyTorch in an ``except`` never is."""


class KernelBenchError(UserError):
    """A KernelBench problem cannot be found."""


# -- finding problems -----------------------------------------------------------------------------------------------
def kernelbench_root(explicit: str | Path | None = None) -> Path:
    """The checkout's ``KernelBench`` folder (the one holding ``level1``...), from the argument or the environment."""
    raw = str(explicit) if explicit else os.environ.get(ROOT_ENV, "")
    if not raw:
        raise KernelBenchError(
            "KernelBench problems need a KernelBench checkout, and none is set",
            hint=f"pass --kernelbench-root PATH or export {ROOT_ENV}=PATH "
            "(the clone of ScalingIntelligence/KernelBench); or name one file: kernelbench:path/to/problem.py",
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


def parse_options(spec: str) -> tuple[str, tuple[str, ...]]:
    """'1/19?allow=reference_op' -> ('1/19', ('reference_op',)): the problem and the rules it allows."""
    spec, _, query = spec.strip().partition("?")
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(options) - {"allow"})
    if unknown:
        raise KernelBenchError(
            f"unknown KernelBench task option(s) {', '.join(unknown)}",
            hint="the only option is ?allow=" + ",".join(ALLOWABLE_RULES),
        )
    allow = tuple(sorted({r.strip() for r in options.get("allow", "").split(",") if r.strip()}))
    return spec, allow


def options_suffix(allow: frozenset[str] | tuple[str, ...]) -> str:
    """The canonical '?allow=...' part of a task name ('' when nothing is allowed)."""
    return f"?allow={','.join(sorted(allow))}" if allow else ""


def find_problem(spec: str, root: str | Path | None = None) -> Path:
    """The problem file that ``spec`` (``<level>/<id>`` or a path to a .py file, options ignored) names."""
    spec = spec.strip().partition("?")[0]
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
    """``kernelbench:/absolute/path.py[?allow=...]`` for any accepted spelling (with or without the prefix)."""
    problem, allow = parse_options(spec.removeprefix(PREFIX))
    return PREFIX + str(find_problem(problem, root)) + options_suffix(allow)


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
