"""CUDA graphs and tensor subclasses: work that is replayed, or not done when the call claims it is.

Rules: ``cuda_graph_replay`` (CUDA graphs and the ``torch.compile`` settings that use them, however the module
writes them) and
``tensor_subclass`` (subclasses and dispatch hooks that can defer the work until the output is checked).

Side streams are not refused here: a kernel that joins its side streams to the current stream before it returns
(``wait_stream``, ``record_stream``) is honest. Work left running on one when the call returns is caught at run time:
the output changes after a device-wide synchronisation (``deferred_work``), and the parent's clock sees wall time
that the reported events do not account for (``timing_forgery``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ksearch.tools.integrity.base import Finding, ScannerBase, binds, binds_otherwise
from ksearch.tools.integrity.vocabulary import (
    GRAPH_CALLS,
    SUBCLASS_CALLS,
    SUBCLASS_DEFS,
    SUBCLASS_METHODS,
    TENSOR_BASES,
    matches,
)

GRAPH_COMPILE_SETTINGS = {"mode": frozenset({"reduce-overhead", "max-autotune"}), "backend": frozenset({"cudagraphs"})}
"""``torch.compile`` settings that replay CUDA graphs (``max-autotune-no-cudagraphs`` does not)."""


def _is_compile(name: str | None) -> bool:
    return name is not None and (name == "torch.compile" or name.endswith(".torch.compile"))


class StreamRules(ScannerBase):
    def _stream_call(self, node: ast.Call, name: str | None, method: str | None) -> Iterator[Finding]:
        if not name:
            return
        if matches(name, GRAPH_CALLS):
            yield self.finding("cuda_graph_replay", node, f"calls {name}")
        if _is_compile(name) or any(  # torch.compile(...), or functools.partial(torch.compile, mode=...)
            isinstance(arg, (ast.Name, ast.Attribute)) and _is_compile(self.resolve(arg)) for arg in node.args
        ):
            yield from self._compile_settings(node)
        if matches(name, SUBCLASS_CALLS) or method in SUBCLASS_METHODS:
            yield self.finding("tensor_subclass", node, f"calls {name}")

    def _compile_settings(self, node: ast.Call) -> Iterator[Finding]:
        """``torch.compile``'s settings that turn CUDA graphs on: ``mode`` and ``backend`` (``GRAPH_COMPILE_SETTINGS``)
        and an ``options`` key naming ``cudagraphs`` that is not off. Each is read wherever the module binds it to
        literals (a name assigned a string, either branch of a conditional); a setting the rules cannot read (a
        parameter, ``**settings``, options built at run time) is refused rather than guessed (a red-team pass,
        2026-11-30: a mode held in a name, ``**settings``, ``options`` and ``functools.partial`` all got past)."""
        for kw in node.keywords:
            if kw.arg is None:
                yield self.finding(
                    "cuda_graph_replay",
                    node,
                    "torch.compile(**settings) hides its mode and options from "
                    "the rules: pass mode=, backend= and options= by name, as literals",
                )
            elif kw.arg == "backend" and self._is_function(kw.value):
                continue  # a backend function of the module's: what it compiles to is read where it is written
            elif kw.arg in ("mode", "backend"):
                values = self._literal_values(kw.value)
                if values is None:
                    yield self.finding(
                        "cuda_graph_replay",
                        node,
                        f"torch.compile's {kw.arg} is not a literal the rules can read: give it as a string",
                    )
                    continue
                for value in sorted(v for v in values if v in GRAPH_COMPILE_SETTINGS[kw.arg]):
                    yield self.finding(
                        "cuda_graph_replay", node, f"torch.compile({kw.arg}={value!r}) replays CUDA graphs"
                    )
            elif kw.arg == "options":
                yield from self._compile_options(node, kw.value)

    def _is_function(self, value: ast.expr) -> bool:
        """A lambda, or a name the module defines with ``def`` (nothing else binds it)."""
        if isinstance(value, ast.Lambda):
            return True
        if not isinstance(value, ast.Name):
            return False
        binders = [node for node in ast.walk(self.tree) if binds(node, value.id)]
        return len(binders) == 1 and isinstance(binders[0], (ast.FunctionDef, ast.AsyncFunctionDef))

    def _compile_options(self, node: ast.Call, value: ast.expr) -> Iterator[Finding]:
        if (
            isinstance(value, ast.Call)
            and self.is_builtin(value.func, frozenset({"dict"}))
            and not value.args
            and all(kw.arg is not None for kw in value.keywords)
        ):  # dict(max_autotune=True): its keys are its keyword names
            if any("cudagraph" in kw.arg for kw in value.keywords if kw.arg is not None):
                yield self.finding("cuda_graph_replay", node, "torch.compile's options turn CUDA graphs on")
            return
        table = self._bound_dict(value)
        if table is None:
            yield self.finding(
                "cuda_graph_replay",
                node,
                "torch.compile's options are not a dict literal the rules can read: write them in the call",
            )
            return
        for key, setting in zip(table.keys, table.values):
            keys = self._literal_values(key) if key is not None else None
            if keys is None:
                yield self.finding(
                    "cuda_graph_replay", node, "torch.compile's options hold a key the rules cannot read"
                )
                continue
            settings = self._literal_values(setting)
            if any(isinstance(k, str) and "cudagraph" in k for k in keys) and (settings is None or any(settings)):
                yield self.finding("cuda_graph_replay", node, "torch.compile's options turn CUDA graphs on")

    def _literal_values(self, value: ast.expr, seen: frozenset[str] = frozenset()) -> set | None:
        """Every constant ``value`` can hold as the module writes it, or None where that cannot be read."""
        if isinstance(value, ast.Constant):
            return {value.value}
        if isinstance(value, ast.IfExp):
            body, orelse = self._literal_values(value.body, seen), self._literal_values(value.orelse, seen)
            return None if body is None or orelse is None else body | orelse
        if not isinstance(value, ast.Name) or value.id in seen:
            return None
        bound = self._bindings(value.id)
        values: set = set()
        for expression in bound:
            held = self._literal_values(expression, seen | {value.id})
            if held is None:
                return None
            values |= held
        return values if bound else None

    def _bound_dict(self, value: ast.expr) -> ast.Dict | None:
        """``value`` as a dict literal: written in place, or a name bound once to one and never changed in place."""
        if isinstance(value, ast.Dict):
            return value
        if not isinstance(value, ast.Name):
            return None
        changed = any(
            isinstance(node, (ast.Subscript, ast.Attribute))
            and isinstance(node.value, ast.Name)
            and node.value.id == value.id
            for node in ast.walk(self.tree)
        )
        bound = self._bindings(value.id)
        return bound[0] if not changed and len(bound) == 1 and isinstance(bound[0], ast.Dict) else None

    def _bindings(self, name: str) -> list[ast.expr]:
        """What the module assigns to ``name`` (``name = ...``, ``name: T = ...``; flow-insensitive); empty when
        anything else binds it (a parameter, a loop, unpacking, ``+=``, an import, a definition), as its value cannot
        be read then."""
        plain: dict[int, ast.expr] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign):
                plain.update((id(target), node.value) for target in node.targets if isinstance(target, ast.Name))
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                plain[id(node.target)] = node.value
        found: list[ast.expr] = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
                if id(node) not in plain:
                    return []
                found.append(plain[id(node)])
            elif binds_otherwise(node, name):
                return []
        return found

    def _tensor_subclass(self, node: ast.ClassDef) -> Iterator[Finding]:
        for base in node.bases:
            name = self.resolve(base)
            if matches(name, TENSOR_BASES):
                yield self.finding("tensor_subclass", node, f"class {node.name} subclasses {name}")

    def _dispatch_hook(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[Finding]:
        if node.name in SUBCLASS_DEFS:
            yield self.finding("tensor_subclass", node, f"defines {node.name}")
