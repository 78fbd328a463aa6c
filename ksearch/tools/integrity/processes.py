"""Threads, processes and harness introspection: work that outlives the timer, programs started, the harness poked.

Rules: ``thread_injection`` (threads, processes, async code, signal handlers), ``subprocess_or_network`` (programs,
package installs, sockets) and ``harness_introspection`` (frames, ``sys.modules``, ``gc``, ``globals()``, raw memory).
Imports are judged here for every family (``IMPORT_RULES``), since an import is where most facilities come in; an
import whose name the module never uses is not judged (it starts nothing). ``import threading`` passes when every use
of it is ``.Lock``/``.RLock`` (``SAFE_THREADING``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ksearch.tools.integrity.base import Finding, ScannerBase
from ksearch.tools.integrity.vocabulary import (
    FRAME_ATTRS,
    IMPORT_RULES,
    INTROSPECTION_CALLS,
    NATIVE_LOADERS,
    PROCESS_CALLS,
    SAFE_THREADING,
    TORCH_POOLS,
    matches,
)


class ProcessRules(ScannerBase):
    threading_misuse: str | None
    """Why the module's use of ``threading`` is more than locks, or None (set once by ``Scanner``)."""
    used_names: set[str] | None
    """Every name the module loads outside its ``__main__`` self-test, or None when it calls ``vars()`` (which reads
    any binding by string, so every import counts as used) (set once by ``Scanner``)."""
    self_test: set[int]

    def _used_names(self) -> set[str] | None:
        used: set[str] = set()
        for node in ast.walk(self.tree):
            if id(node) in self.self_test:
                continue
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Load, ast.Del)):
                used.add(node.id)
            elif isinstance(node, ast.Call) and self.is_builtin(node.func, frozenset({"vars"})) and not node.args:
                return None
        return used

    def _unused(self, bound: str) -> bool:
        """Whether an import's bound name is never used: importing a module runs only its own import-time code, so
        an unused ``import requests`` (left over in a real leaderboard kernel) starts nothing. Any use, however
        harmless, keeps the import judged; ``from m import *`` binds unknown names and is always judged."""
        return self.used_names is not None and bound != "*" and bound not in self.used_names

    def _threading_misuse(self) -> str | None:
        """Why the module's use of ``threading`` is more than locks (None when it only uses Lock/RLock): every load
        of a name bound to the module must be ``.Lock`` or ``.RLock`` of it, and there must be at least one."""
        locks = False
        for node in ast.walk(self.tree):
            if id(node) in self.self_test:
                continue
            if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
                continue
            if self.aliases.get(node.id) != "threading":
                continue
            parent = self.parents.get(id(node))
            if isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in SAFE_THREADING:
                locks = True
                continue
            used = f"threading.{parent.attr}" if isinstance(parent, ast.Attribute) else "the threading module itself"
            return f"uses {used} at line {node.lineno}"
        return None if locks else "without using its Lock or RLock"

    def _import(self, node: ast.Import | ast.ImportFrom) -> Iterator[Finding]:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                yield self.finding("harness_introspection", node, "relative imports reach outside the candidate")
                return
            used = [a for a in node.names if not self._unused(a.asname or a.name)]
            if not used:
                return
            names = [f"{node.module}.{a.name}" for a in used] + [node.module or ""]
            if node.module == "threading":  # locks only: judged name by name
                names = [n for n in names[:-1] if n.removeprefix("threading.") not in SAFE_THREADING]
        else:
            names = [a.name for a in node.names if not self._unused(a.asname or a.name.split(".")[0])]
            if "threading" in names and self.threading_misuse is None:
                names.remove("threading")  # only threading.Lock / RLock are used
            elif "threading" in names:
                yield self.finding(
                    "thread_injection",
                    node,
                    f"imports threading {self.threading_misuse} (only threading.Lock and RLock may be used)",
                )
                names.remove("threading")
        for name in names:
            for rule, prefixes in IMPORT_RULES:
                hit = matches(name, prefixes)
                if hit:
                    yield self.finding(rule, node, f"imports {name.removesuffix('.')}")
                    break

    def _process_call(self, node: ast.Call, name: str | None) -> Iterator[Finding]:
        introspects = self.is_builtin(node.func, frozenset({"vars", "globals", "locals"}))
        if introspects and (introspects != "vars" or node.args):
            if introspects != "vars" or self._is_module_ref(node.args[0]):
                yield self.finding("harness_introspection", node, f"calls {introspects}()")
        if not name:
            return
        if matches(name, PROCESS_CALLS, raw=True):
            yield self.finding("subprocess_or_network", node, f"calls {name}")
        if matches(name, TORCH_POOLS):
            yield self.finding("thread_injection", node, f"calls {name}, which runs work in torch's own threads")
        if matches(name, INTROSPECTION_CALLS):
            yield self.finding("harness_introspection", node, f"calls {name}")

    def _introspection_attribute(self, node: ast.Attribute) -> Iterator[Finding]:
        if node.attr in FRAME_ATTRS:
            yield self.finding("harness_introspection", node, f"uses .{node.attr} (frames, globals or builtins)")
            return
        name = self.resolve(node)
        if matches(name, ("sys.modules", "sys._getframe", "sys.meta_path", "sys.path_hooks", "sys._current_frames")):
            yield self.finding("harness_introspection", node, f"uses {name}")
        native = matches(name, NATIVE_LOADERS)
        if native and not matches(self.resolve(node.value), NATIVE_LOADERS):  # once per chain, at its first match
            yield self.finding(
                "result_forgery",
                node,
                f"uses {native}, which builds or loads native code the rules "
                "cannot read (C++/CUDA goes through torch.utils.cpp_extension.load_inline, whose "
                "sources are checked)",
            )

    def _harness_name(self, node: ast.Name) -> Iterator[Finding]:
        if node.id in ("__builtins__", "__loader__", "__spec__"):
            yield self.finding("harness_introspection", node, f"uses {node.id}")

    def _asynchronous(self, node: ast.AST) -> Iterator[Finding]:
        if isinstance(node, ast.AsyncFunctionDef):
            yield self.finding("thread_injection", node, "async functions run later than the call")
        elif isinstance(node, (ast.Await, ast.AsyncFor, ast.AsyncWith)):
            yield self.finding("thread_injection", node, "asynchronous code can run after the call returns")
