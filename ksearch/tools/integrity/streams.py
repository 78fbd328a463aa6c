"""CUDA graphs and tensor subclasses: work that is replayed, or not done when the call claims it is.

Rules: ``cuda_graph_replay`` and ``tensor_subclass`` (subclasses and dispatch hooks that can defer the work until
the output is checked).

``cuda_graph_replay`` asks that every compile or graph API be called where it stands, with settings the rules can
read: ``torch.compile`` (and ``torch.compiler.compile``, the same function) without the modes and options that turn
CUDA graphs on, Inductor's and Dynamo's ``config.patch`` without a CUDA-graph setting, and graph capture
(``torch.cuda.CUDAGraph``, ``torch.cuda.graph``) called directly. Any other reference to them (``getattr(torch,
"compile")``, one held in a container or a default argument, passed as an argument) is refused, since what it
compiles to cannot be read. Honest capture (per shape, the input copied in, replay, the output copied out) passes
here: what a replay returns is judged at run time, where audited calls are checked like any kernel's; a replay of
stale inputs returns a stale output there. The remaining graph helpers (``make_graphed_callables``, graph pools,
``do_bench_cudagraph``) are refused wherever they appear.

Side streams are not refused here: a kernel that joins its side streams to the current stream before it returns
(``wait_stream``, ``record_stream``) is honest. Work left running on one when the call returns is caught at run time:
the output changes after a device-wide synchronisation (``deferred_work``), and the parent's clock sees wall time
that the reported events do not account for (``timing_forgery``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ksearch.tools.integrity.base import Finding, ScannerBase, binds, binds_otherwise
from ksearch.tools.integrity.compute_vocabulary import (
    COMPILE_APIS,
    COMPILER_PATCHES,
    GRAPH_CALLS,
    GRAPH_CAPTURE,
    SUBCLASS_CALLS,
    SUBCLASS_DEFS,
    SUBCLASS_METHODS,
    TENSOR_BASES,
)
from ksearch.tools.integrity.vocabulary import COMPILER_SETTINGS_DENIED, matches

GRAPH_COMPILE_SETTINGS = {"mode": frozenset({"reduce-overhead", "max-autotune"}), "backend": frozenset({"cudagraphs"})}
"""``torch.compile`` settings that replay CUDA graphs (``max-autotune-no-cudagraphs`` does not)."""


GRAPH_APIS = (*COMPILE_APIS, *COMPILER_PATCHES, *GRAPH_CAPTURE)
"""APIs a kernel may use only by calling them where they stand (``_graph_reference``)."""


def _is_compile(name: str | None) -> bool:
    return name is not None and (
        name in COMPILE_APIS or any(name.endswith(f".{api}") for api in COMPILE_APIS)  # ``task.torch.compile`` too
    )


class StreamRules(ScannerBase):
    def _stream_call(self, node: ast.Call, name: str | None, method: str | None) -> Iterator[Finding]:
        yield from self._graph_getattr(node)
        if not name:
            return
        if matches(name, GRAPH_CALLS):
            yield self.finding("cuda_graph_replay", node, f"calls {name}")
        if matches(name, COMPILER_PATCHES) and _plain(node.func):  # not the call of what ``patch(...)`` returned
            yield from self._compiler_patch(node, name)
        if _is_compile(name):  # passed as a value (``functools.partial(torch.compile, ...)``) it is refused outright
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

    def _graph_getattr(self, node: ast.Call) -> Iterator[Finding]:
        """``getattr(torch, "compile")`` and its family: a compile or graph API reached by a string is a value whose
        settings the rules cannot read where it is called."""
        builtin = self.is_builtin(node.func, frozenset({"getattr", "setattr", "delattr", "hasattr"}))
        if builtin is None or len(node.args) < 2 or not _plain(node.args[0]):
            return  # an object a call made (``getattr(torch.cuda.CUDAGraph(), "replay")``) is not the module
        base = self.resolve(node.args[0])
        names = self._folded_names(node.args[1]) if base else None
        for name in names or ():
            full = f"{base}.{name}"
            if matches(full, GRAPH_APIS) or matches(full, GRAPH_CALLS) or _is_compile(full):
                yield self.finding(
                    "cuda_graph_replay",
                    node,
                    f"{builtin} reaches {full}: call it where it stands, with literal settings",
                )

    def _graph_reference(self, node: ast.Name | ast.Attribute) -> Iterator[Finding]:
        """A compile or graph API referenced other than by calling it where it stands (held in a container, a default
        argument, passed as an argument, returned): what it compiles to or replays cannot be read. A bare decorator
        (``@torch.compile``: the default settings), an annotation and a plain alias (``compile_ = torch.compile``,
        whose calls are judged where they stand) are not values."""
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return  # a step of a longer chain: judged at the chain's outermost node
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            return
        name = self.resolve(node) if _plain(node) else None
        api = matches(name, GRAPH_APIS) or (name if _is_compile(name) else None)
        if not api:
            return
        if isinstance(parent, ast.Call) and parent.func is node:
            return
        if id(node) in self._annotation_nodes():
            return
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node in parent.decorator_list:
            if _is_compile(name):
                return
        if (
            isinstance(parent, ast.Assign)
            and parent.value is node
            and all(isinstance(t, ast.Name) for t in parent.targets)
        ):
            return
        yield self.finding(
            "cuda_graph_replay",
            node,
            f"{name} is used as a value (held, passed or returned): call it where it stands, with literal settings",
        )

    def _annotation_nodes(self) -> set[int]:
        """Ids of every node inside an annotation (parameters, returns, annotated assignments)."""
        cached = getattr(self, "_annotations", None)
        if cached is not None:
            return cached
        roots: list[ast.AST] = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.arg) and node.annotation is not None:
                roots.append(node.annotation)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
                roots.append(node.returns)
            elif isinstance(node, ast.AnnAssign):
                roots.append(node.annotation)
        found = {id(inner) for root in roots for inner in ast.walk(root)}
        self._annotations = found
        return found

    def _compiler_patch(self, node: ast.Call, name: str) -> Iterator[Finding]:
        """``config.patch("triton.cudagraphs", True)``, ``config.patch({...})``, ``config.patch(key=value)``: a setting
        that replays CUDA graphs (``COMPILER_SETTINGS_DENIED``'s ``cudagraph``) not literally off, or a key or value
        the rules cannot read, is refused."""
        pairs: list[tuple[ast.expr | None, ast.expr | None]] = []
        if len(node.args) == 2:
            pairs.append((node.args[0], node.args[1]))
        elif len(node.args) == 1:
            table = self._bound_dict(node.args[0])
            if table is None:
                pairs.append((None, None))
            else:
                pairs.extend(zip(table.keys, table.values))
        elif node.args:
            pairs.append((None, None))
        for kw in node.keywords:
            pairs.append((ast.Constant(kw.arg) if kw.arg is not None else None, kw.value))
        graph_keys = tuple(k for k in COMPILER_SETTINGS_DENIED if "graph" in k)
        for key, value in pairs:
            keys = self._literal_values(key) if key is not None else None
            if keys is None:
                yield self.finding("cuda_graph_replay", node, f"{name} holds a setting the rules cannot read")
                continue
            if not any(isinstance(k, str) and any(g in k for g in graph_keys) for k in keys):
                continue
            values = self._literal_values(value) if value is not None else None
            if values is None or any(values):
                yield self.finding("cuda_graph_replay", node, f"{name} turns CUDA graphs on")

    def _tensor_subclass(self, node: ast.ClassDef) -> Iterator[Finding]:
        for base in node.bases:
            name = self.resolve(base)
            if matches(name, TENSOR_BASES):
                yield self.finding("tensor_subclass", node, f"class {node.name} subclasses {name}")

    def _dispatch_hook(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[Finding]:
        if node.name in SUBCLASS_DEFS:
            yield self.finding("tensor_subclass", node, f"defines {node.name}")


def _plain(node: ast.AST) -> bool:
    """A chain of names and attributes only (``torch.cuda.graph``), not one through a call or an item."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)
