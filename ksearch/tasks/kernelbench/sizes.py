"""KernelBench problems at sizes the CPU can check: the problem's size constants scaled down, and said so.

Real KernelBench problems are sized for a GPU (level 1's ReLU draws 4096 x 393216 floats, 6.4 GB); on the CPU the
worker and the checker each hold the inputs, their clones and the outputs, and the Triton interpreter runs every
program of every launch in Python. So on the CPU a problem whose tensors exceed ``CPU_BUDGET_BYTES`` is checked at
reduced sizes: its module-level integer constants (``batch_size = 4096``, ``input_shape = (32768,)``) that are at
least ``MIN_SCALED`` are halved, the largest first, until the inputs, parameters and output fit. Sizes are measured
without allocating anything, by running ``get_init_inputs``, ``Model`` and ``get_inputs`` on PyTorch's ``meta``
device; a halving after which the problem no longer builds or runs there (a divisibility it needs) is undone and
that constant is left alone. The reduced problem is the same source with those constants rewritten, so everything
derived from them (``input_shape = (dim,)``, defaults) follows. A problem that cannot be brought under the budget is
refused at once with what its tensors need (``CpuTooLarge``), never run into the out-of-memory killer.

Pure functions of the problem's source: every process (agent, worker, checker) computes the same reduction.
"""

from __future__ import annotations

import ast
import itertools
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ksearch import pyparse
from ksearch.errors import UserError

CPU_BUDGET_BYTES = 8 << 20
"""Bytes of inputs + parameters + output the CPU checks a problem with (the interpreter is slow; both processes
hold several copies)."""
MIN_SCALED = 16
"""Constants below this are shapes of another kind (kernel sizes, strides, channels of an image): never scaled."""
_MODULES = itertools.count()


class CpuTooLarge(UserError):
    """A KernelBench problem too large for the CPU whose sizes could not be reduced."""


@dataclass(frozen=True)
class Constant:
    """One scalable integer of the source: ``name`` (with ``[i]`` for a tuple element) and where its text is."""

    name: str
    value: int
    line: int
    col: int
    end_col: int


@dataclass
class Reduction:
    """The problem as the CPU checks it."""

    source: str
    changes: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Constant -> (original, reduced); empty when the problem fits as it is."""
    bytes_before: int | None = None
    bytes_after: int | None = None

    def describe(self) -> str:
        """One line for users and prompts ('' when nothing was reduced)."""
        if not self.changes:
            return ""
        sizes = ", ".join(f"{name} {old} -> {new}" for name, (old, new) in self.changes.items())
        memory = f" (tensors {_human(self.bytes_before)} -> {_human(self.bytes_after)})" if self.bytes_before else ""
        return f"checked on the CPU at reduced sizes: {sizes}{memory}"


def reduce_for_cpu(source: str, path: Path, budget: int = CPU_BUDGET_BYTES) -> Reduction:
    """The problem's source with its size constants halved until its tensors fit ``budget`` (unchanged when they
    already do, or when their size cannot be measured). Raises ``CpuTooLarge`` when no reduction fits."""
    before = footprint(source, path)
    if before is None or before <= budget:
        return Reduction(source=source, bytes_before=before, bytes_after=before)
    constants = scalable_constants(source)
    values = {c.name: c.value for c in constants}
    frozen: set[str] = set()
    while True:
        open_ = [c for c in constants if values[c.name] >= MIN_SCALED and c.name not in frozen]
        if not open_:
            break
        largest = max(open_, key=lambda c: (values[c.name], c.name))
        trial = {**values, largest.name: values[largest.name] // 2}
        size = footprint(rewrite(source, constants, trial), path)
        if size is None:
            frozen.add(largest.name)  # the problem needs this value (a divisibility, a fixed relation)
            continue
        values = trial
        if size <= budget:
            changes = {c.name: (c.value, values[c.name]) for c in constants if values[c.name] != c.value}
            return Reduction(
                source=rewrite(source, constants, values), changes=changes, bytes_before=before, bytes_after=size
            )
    raise CpuTooLarge(
        f"{path.name}: its inputs, parameters and output need {_human(before)}, more than the CPU checks "
        f"({_human(budget)}), and halving its size constants ({', '.join(c.name for c in constants) or 'none found'}) "
        "does not bring them under that",
        hint="evaluate this problem on a GPU (--device cuda), or make its module-level size constants smaller",
    )


def scalable_constants(source: str) -> list[Constant]:
    """Module-level ``NAME = <int expression of literals>`` (also ``A = B = 128``) and ``NAME = (<ints>, ...)``."""
    found: list[Constant] = []
    for stmt in pyparse.parse(source).body:
        if not (isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets)):
            continue
        name, value = " = ".join(t.id for t in stmt.targets if isinstance(t, ast.Name)), stmt.value
        if isinstance(value, ast.Tuple):
            for index, element in enumerate(value.elts):
                found.extend(_constant(f"{name}[{index}]", element))
        else:
            found.extend(_constant(name, value))
    return found


def _constant(name: str, node: ast.expr) -> Iterator[Constant]:
    number = _literal_int(node)
    if number is not None and node.end_lineno == node.lineno and node.end_col_offset is not None:
        yield Constant(name=name, value=number, line=node.lineno, col=node.col_offset, end_col=node.end_col_offset)


def _literal_int(node: ast.expr) -> int | None:
    """The value of an integer expression made of literals only (``2048 * 2``, ``1 << 20``), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp):
        left, right = _literal_int(node.left), _literal_int(node.right)
        if left is None or right is None:
            return None
        ops = {
            ast.Add: int.__add__,
            ast.Sub: int.__sub__,
            ast.Mult: int.__mul__,
            ast.FloorDiv: int.__floordiv__,
            ast.LShift: int.__lshift__,
            ast.Pow: int.__pow__,
        }
        op = ops.get(type(node.op))
        if (
            op is None
            or (isinstance(node.op, ast.Pow) and right > 64)
            or (isinstance(node.op, ast.FloorDiv) and not right)
        ):
            return None
        return op(left, right)
    return None


def rewrite(source: str, constants: list[Constant], values: dict[str, int]) -> str:
    """``source`` with each constant's text replaced by its value in ``values`` (right to left, so columns hold)."""
    lines = source.splitlines(keepends=True)
    for c in sorted(constants, key=lambda c: (c.line, c.col), reverse=True):
        if values[c.name] == c.value:
            continue
        text = lines[c.line - 1]
        lines[c.line - 1] = text[: c.col] + str(values[c.name]) + text[c.end_col :]
    return "".join(lines)


def load_source(source: str, path: Path, prefix: str = "ksearch_problem_cpu") -> types.ModuleType:
    """Execute a (rewritten) problem source as a fresh module named after ``path``."""
    name = f"{prefix}_{path.stem.replace('-', '_').replace('.', '_')}_{next(_MODULES)}"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - the user's own problem file
    return module


def footprint(source: str, path: Path) -> int | None:
    """Bytes of the problem's inputs, the reference's parameters and buffers and its output, measured on the meta
    device (nothing is allocated); None when the problem cannot run there. The inputs alone count when only the
    model cannot run on meta."""
    from torch.distributions import Distribution

    validate = Distribution._validate_args  # distributions check their parameters with .item(), which meta refuses
    Distribution.set_default_validate_args(False)
    try:
        with torch.device("meta"), torch.no_grad():
            module = load_source(source, path, prefix="ksearch_problem_meta")
            try:
                inputs = list(module.get_inputs())
            except Exception:  # noqa: BLE001 - the user's problem: unmeasurable, not an error here
                return None
            total = _bytes(inputs)
            try:
                model = module.Model(*module.get_init_inputs())
                output = model(*inputs)
            except Exception:  # noqa: BLE001 - a model that needs real values: count its inputs only
                return total
            return total + _bytes(list(model.parameters()) + list(model.buffers())) + _bytes(output)
    except Exception:  # noqa: BLE001 - a source that does not even import here
        return None
    finally:
        Distribution.set_default_validate_args(validate)
        for name in [n for n in list(sys.modules) if n.startswith("ksearch_problem_meta_")]:  # others import meanwhile
            del sys.modules[name]


def _bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_bytes(v) for v in value.values())
    return 0


def _human(size: int | None) -> str:
    if size is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


__all__ = [
    "CPU_BUDGET_BYTES",
    "CpuTooLarge",
    "Reduction",
    "footprint",
    "load_source",
    "reduce_for_cpu",
    "scalable_constants",
]
