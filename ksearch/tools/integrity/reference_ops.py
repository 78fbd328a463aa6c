"""KernelBench candidates that hand the work back to PyTorch: the reference's own ops, torch.nn layers, fallbacks.

For tasks that name their reference class (``reference_class``: KernelBench's ``Model``), only in code that
``ModelNew`` runs (its class, and the module-level functions and classes it reaches by name, a copied ``Model``
included when ``ModelNew`` inherits from it or calls it; never inside a ``@triton.jit`` kernel, never in an unused
copy of the reference):

- ``reference_op``: a call of a PyTorch op the reference computes with (matched by op name through torch.*,
  torch.nn.functional, tensor methods and nn layer classes: ``torch.relu``, ``F.relu``, ``x.relu()`` and
  ``nn.ReLU()(x)`` are one op), of a high-level PyTorch compute op (KernelBench's static checker's list: matmul,
  convolutions, pooling, activations, softmax, norms, losses, clamp, dropout, any torch.nn.functional), ``a @ b``,
  or of a torch.nn layer the module holds (``self.conv(x)``; holding one for its weights is fine). A decoy kernel
  launched beside the PyTorch call does not change that the result comes from PyTorch. CUDA/C++ host code in the
  file's strings (``load_inline``) is read too: ``at::relu(x)``, ``torch::nn::functional::relu(x)``, ``x.relu()``.
- ``no_custom_kernel``: ``ModelNew`` launches no ``@triton.jit`` kernel (KernelBench's backend check).
- ``reference_fallback`` (the rule of ``library``, widened): an ``except`` handler in that code calls any of the
  above (``self.fallback(x)``, ``x.clamp(min=0)``): a fallback is never allowed.

A task may allow ``reference_op`` and ``no_custom_kernel`` (``KernelBenchTask.allowed_rules``, from the task name's
``?allow=``): KernelBench's own setting where some operators stay in PyTorch. ``waived`` says which allowed rules a
kernel relied on, so a sweep's fast_p can say so. Allocation, description and data movement (``torch.empty``,
``.view``, ``.contiguous``, ``.t()``) never count.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import TYPE_CHECKING

from ksearch import pyparse
from ksearch.tools.integrity.base import Finding, ScannerBase, is_main_test
from ksearch.tools.integrity.reference_op_names import HARMLESS_OPS, HIGH_LEVEL_OPS, canonical
from ksearch.tools.integrity.vocabulary import C_SOURCE_MARK

if TYPE_CHECKING:
    from ksearch.tasks.base import Task

RULE_NAMES = ("reference_op", "no_custom_kernel")
"""The rules of this module a task may allow (``reference_fallback`` is ``library``'s, and never allowed)."""
JIT_DECORATORS = ("triton.jit", "triton.autotune", "triton.heuristics", "triton.runtime.jit")


@lru_cache(maxsize=64)
def reference_ops(source: str, reference_class: str) -> frozenset[str]:
    """Canonical names of the ops the reference class of ``source`` (a problem file) computes with."""
    try:
        tree = pyparse.parse(source)
    except SyntaxError:
        return frozenset()
    scan = _Reachable(source, tree, start=reference_class, forward_only=True)
    ops = {op for _shown, op, _node, _where in scan.op_calls(known=frozenset(), every_op=True)}
    return frozenset(op for op in ops if op and op not in HARMLESS_OPS)


def findings(
    code: str, tree: ast.Module, task: Task | _Strict | None, *, allow: frozenset[str] = frozenset()
) -> list[Finding]:
    """This module's findings for ``code`` (already parsed) against ``task``'s reference, minus the rules the task
    or the caller allows; [] for tasks without a reference class."""
    reference_class = task.reference_class if task is not None else None
    if task is None or not reference_class:
        return []
    allowed = allow | frozenset(task.allowed_rules)
    known = reference_ops(task.reference_source(), reference_class) | HIGH_LEVEL_OPS
    scan = _Reachable(code, tree, start=task.entry_point)
    if not scan.reached:
        return []  # no ModelNew: the worker reports the missing entry point
    found: list[Finding] = []
    for shown, _op, node, in_handler in scan.op_calls(known=known):
        rule = "reference_fallback" if in_handler else "reference_op"
        detail = f"{'the except handler ' if in_handler else ''}calls {shown}, a PyTorch op, so PyTorch does the work"
        found.append(scan.finding(rule, node, detail))
    for node, shown in native_op_calls(tree, known):
        found.append(
            scan.finding(
                "reference_op", node, f"the CUDA/C++ source calls {shown}, a PyTorch op, so PyTorch does the work"
            )
        )
    if not scan.launches():
        kernels = ", ".join(sorted(scan.kernels)) or "none defined"
        found.append(
            scan.finding(
                "no_custom_kernel", scan.reached[0], f"ModelNew launches no @triton.jit kernel (kernels: {kernels})"
            )
        )
    return [f for f in found if f.rule not in allowed]


def waived(code: str, task: Task) -> list[str]:
    """The allowed rules (``allowed_rules``) that ``code`` breaks: what its speedup owes to PyTorch's own ops."""
    allowed = frozenset(task.allowed_rules)
    if not allowed:
        return []
    try:
        tree = pyparse.parse(code)
    except (SyntaxError, ValueError):
        return []
    strict = _Strict(task)
    return sorted({f.rule for f in findings(code, tree, strict)} & allowed)


class _Strict:
    """``task`` with nothing allowed."""

    allowed_rules: frozenset[str] = frozenset()

    def __init__(self, task: Task) -> None:
        self.reference_class = task.reference_class
        self.entry_point = task.entry_point
        self._source = task.reference_source()

    def reference_source(self) -> str:
        return self._source


class _Reachable(ScannerBase):
    """The code a class runs: its own body and the module-level definitions it reaches by name."""

    def __init__(self, code: str, tree: ast.Module, *, start: str, forward_only: bool = False) -> None:
        super().__init__(code, tree, forbidden=(), entry_point=start)
        self.definitions = self._definitions()
        self.kernels = {name for name, nodes in self.definitions.items() if any(self._is_kernel(n) for n in nodes)}
        self.reached = self._reach(start)
        self.layer_classes = self._layers()
        if forward_only:  # reading the reference: what its forward computes, not how __init__ sets weights up
            self.reached = self._reach_forward(start)
        """Attribute or variable name -> the torch.nn class assigned to it (``self.conv = nn.Conv2d(...)``)."""
        self.methods = {
            n.name
            for top in self.reached
            if isinstance(top, ast.ClassDef)
            for n in top.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }

    # -- what the class reaches ---------------------------------------------------------------------------------
    def _definitions(self) -> dict[str, list[ast.stmt]]:
        found: dict[str, list[ast.stmt]] = {}
        for stmt in self.tree.body:
            if isinstance(stmt, ast.If) and is_main_test(stmt.test):
                continue  # a self-test never runs when the harness imports the module
            names: list[str] = []
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [stmt.name]
            elif isinstance(stmt, ast.Assign):
                names = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                names = [stmt.target.id]
            for name in names:
                found.setdefault(name, []).append(stmt)
        return found

    def _reach(self, start: str) -> list[ast.stmt]:
        seen, queue, reached = {start}, [start], []
        while queue:
            for stmt in self.definitions.get(queue.pop(), []):
                reached.append(stmt)
                if stmt in self._kernel_nodes():
                    continue
                for node in ast.walk(stmt):
                    if isinstance(node, ast.Name) and node.id in self.definitions and node.id not in seen:
                        seen.add(node.id)
                        queue.append(node.id)
        return reached

    def _reach_forward(self, class_name: str) -> list[ast.stmt]:
        """The class's ``forward``, the methods it calls through ``self``, and the module-level definitions those
        reach by name."""
        classes = [n for n in self.definitions.get(class_name, []) if isinstance(n, ast.ClassDef)]
        methods = {n.name: n for c in classes for n in c.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if "forward" not in methods:
            return []
        wanted, reached, seen = ["forward"], [], {"forward"}
        names: set[str] = set()
        while wanted:
            method = methods[wanted.pop()]
            reached.append(method)
            for node in ast.walk(method):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                    if node.attr in methods and node.attr not in seen:
                        seen.add(node.attr)
                        wanted.append(node.attr)
                elif isinstance(node, ast.Name) and node.id in self.definitions and node.id != class_name:
                    names.add(node.id)
        for name in sorted(names):
            reached.extend(s for s in self._reach(name) if s not in reached)
        return reached

    def _kernel_nodes(self) -> list[ast.stmt]:
        return [n for name in self.kernels for n in self.definitions[name]]

    def _is_kernel(self, node: ast.stmt) -> bool:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        for decorator in node.decorator_list:
            name = self.resolve(decorator.func if isinstance(decorator, ast.Call) else decorator) or ""
            if any(name == d or name.startswith(d + ".") for d in JIT_DECORATORS):
                return True
        return False

    def _layers(self) -> dict[str, str]:
        layers: dict[str, str] = {}
        for node in self._walk_reached():
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                cls = self.resolve(node.value.func) or ""
                if (
                    cls.startswith("torch.nn.")
                    and cls.split(".")[-1][:1].isupper()
                    and not isinstance(node.value.func, ast.Call)
                ):
                    if canonical(cls) in HARMLESS_OPS:
                        continue
                    for target in node.targets:
                        key = _target_key(target)
                        if key:
                            layers[key] = cls
        return layers

    def _walk_reached(self) -> Iterator[ast.AST]:
        kernels = set(map(id, self._kernel_nodes()))
        for stmt in self.reached:
            if id(stmt) not in kernels:
                yield from ast.walk(stmt)

    # -- what it calls ------------------------------------------------------------------------------------------
    def op_calls(self, *, known: frozenset[str], every_op: bool = False) -> Iterator[tuple[str, str, ast.AST, bool]]:
        """(the call as written, its canonical op, the node, whether it is inside an ``except`` handler) for every
        PyTorch compute call whose canonical op is in ``known`` (``every_op``: any torch call or tensor method, for
        reading the reference), every call of a held torch.nn layer, and ``a @ b``."""
        handlers = {
            id(n)
            for h in self._walk_reached()
            if isinstance(h, ast.ExceptHandler)
            for stmt in h.body
            for n in ast.walk(stmt)
        }
        for node in self._walk_reached():
            found = self._op(node, known, every_op)
            if found:
                yield found[0], found[1], node, id(node) in handlers

    def _op(self, node: ast.AST, known: frozenset[str], every_op: bool) -> tuple[str, str] | None:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return ("@ (matmul)", "matmul") if every_op or "matmul" in known else None
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        key = _target_key(func)
        if key in self.layer_classes:
            return f"{key} (a {self.layer_classes[key]} layer)", canonical(self.layer_classes[key])
        name = self.resolve(func) or ""
        if name.startswith("torch."):
            constructor = (
                name.startswith("torch.nn.") and name.split(".")[-1][:1].isupper() and not isinstance(func, ast.Call)
            )
            if constructor:
                return None  # building a layer (to hold weights) is not calling it
            op = canonical(name)
            if op in HARMLESS_OPS:
                return None
            functional = name.startswith("torch.nn.functional.")
            return (name, op) if every_op or functional or op in known else None
        if isinstance(func, ast.Attribute) and not self._is_module_ref(func.value):
            if isinstance(func.value, ast.Name) and func.value.id == "self" and func.attr in self.methods:
                return None  # the class's own method
            if isinstance(func.value, ast.Call) and (self.resolve(func.value.func) or "") == "super":
                return None
            op = canonical(func.attr)
            if op in HARMLESS_OPS or (not every_op and op not in known):
                return None
            if every_op and not _tensor_like(func.value):
                return None
            return f".{func.attr}()", op
        return None

    def launches(self) -> bool:
        """Whether the reached code launches one of the module's Triton kernels (``kernel[grid](...)``)."""
        for node in self._walk_reached():
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
                if (self.resolve(node.func.value) or "") in self.kernels:
                    return True
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run":
                if (self.resolve(node.func.value) or "") in self.kernels:
                    return True
        return False


NATIVE_OP_CALL = re.compile(
    r"(?<![\w:])(?:at|torch|F)(?:::(?:nn|functional|native))*::(\w+)\s*\(|(?:\.|->)\s*(\w+)\s*\("
)
"""An ATen or libtorch call in C++ (``at::softmax(x, 1)``, ``torch::nn::functional::relu(x)``, ``x.matmul(w)``)."""


def native_op_calls(tree: ast.Module, known: frozenset[str]) -> Iterator[tuple[ast.Constant, str]]:
    """(the string, the call as written) for each PyTorch op of ``known`` that a CUDA/C++ source string calls: host
    code handed to ``load_inline`` that calls ``at::softmax`` hands the work back to PyTorch as surely as Python's
    ``torch.softmax`` (a red-team review of 2026-11-29: the rule read Python only)."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and C_SOURCE_MARK.search(node.value)):
            continue
        for match in NATIVE_OP_CALL.finditer(node.value):
            name = match.group(1) or match.group(2)
            op = canonical(name)
            if op in known and op not in HARMLESS_OPS:
                yield node, match.group(0).rstrip("( ")
                break


def _target_key(node: ast.AST) -> str | None:
    """'self.conv' or 'relu' for an attribute of ``self`` or a plain name, else None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return f"self.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return None


def _tensor_like(node: ast.AST) -> bool:
    """In the reference: a method call on a local value (``x.sum()``), not on ``self`` or a constant."""
    return isinstance(node, (ast.Name, ast.Call, ast.Subscript, ast.BinOp, ast.Attribute)) and not (
        isinstance(node, ast.Name) and node.id == "self"
    )


__all__ = ["RULE_NAMES", "findings", "reference_ops", "waived"]
