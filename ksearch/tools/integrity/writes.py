"""The environment, dynamic code and writes: what a candidate reads or changes outside its own computation.

Rules: ``environment_access`` (the environment, except constant build variables: ``BUILD_ENV_VARS``),
``dynamic_code`` (exec/eval/compile, computed ``getattr`` on modules), ``timer_monkeypatch`` and
``harness_introspection`` for assignments into modules (patching timers, events, a library or the harness; the
numerics switches in ``NUMERICS_FLAGS`` may be set) and ``result_forgery`` (writing files or descriptors).
Assignments are judged by what they store to: ``y[torch.arange(n)] = 0`` writes ``y``, not ``torch``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ksearch.tools.integrity.base import Finding, ScannerBase
from ksearch.tools.integrity.vocabulary import (
    BUILD_ENV_VARS,
    COMPILER_SETTINGS,
    COMPILER_SETTINGS_DENIED,
    DYNAMIC_BUILTINS,
    ENV_CALLS,
    FRAME_ATTRS,
    NUMERICS_FLAGS,
    TIMER_NAMES,
    TIMER_TARGETS,
    WRITE_CALLS,
    matches,
)


class WriteRules(ScannerBase):
    def _build_var(self, node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and node.value in BUILD_ENV_VARS

    def _env_use_allowed(self, node: ast.AST) -> bool:
        """``node`` (an ``os.environ`` or ``os.environ.get/setdefault`` reference) is one of the allowed forms on a
        constant build variable: ``os.environ[NAME]`` (read or write), ``NAME in os.environ``, or a call of
        ``os.environ.get/setdefault(NAME, ...)``."""
        name = self.resolve(node)
        parent = self.parents.get(id(node))
        if name in ("os.environ.get", "os.environ.setdefault"):
            return (
                isinstance(parent, ast.Call)
                and parent.func is node
                and bool(parent.args)
                and self._build_var(parent.args[0])
            )
        if name != "os.environ":
            return False
        if isinstance(parent, ast.Subscript) and parent.value is node:
            return not isinstance(parent.ctx, ast.Del) and self._build_var(parent.slice)
        if isinstance(parent, ast.Compare) and len(parent.ops) == 1 and parent.comparators[0] is node:
            return isinstance(parent.ops[0], (ast.In, ast.NotIn)) and self._build_var(parent.left)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return self._env_use_allowed(parent)
        return False

    def _write_call(self, node: ast.Call, name: str | None, method: str | None) -> Iterator[Finding]:
        builtin = self.is_builtin(node.func, DYNAMIC_BUILTINS)
        if builtin:
            yield self.finding("dynamic_code", node, f"calls {builtin}()")
        attr_builtin = self.is_builtin(node.func, frozenset({"getattr", "setattr", "delattr", "open"}))
        if attr_builtin in ("setattr", "delattr") and node.args:
            target = self.resolve(node.args[0])
            attr = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
            yield from self._patched(node, target, attr, how=attr_builtin)
        if attr_builtin in ("getattr", "setattr", "delattr") and len(node.args) > 1:
            if not isinstance(node.args[1], ast.Constant) and self._is_module_ref(node.args[0]):
                yield self.finding("dynamic_code", node, f"{attr_builtin} with a computed name on a module")
        if attr_builtin == "open" and node.args:
            yield from self._open(node)
        if method in ("__setattr__", "__delattr__") and node.args:
            yield from self._patched(node, self.resolve(node.args[0]), None, how=method)
        if not name:
            return
        if matches(name, WRITE_CALLS) or method in ("write_text", "write_bytes", "tofile", "touch", "symlink_to"):
            yield self.finding("result_forgery", node, f"calls {name} (writes files or descriptors)")
        if matches(name, ENV_CALLS) and not (
            (name == "os.getenv" and node.args and self._build_var(node.args[0]))
            or (isinstance(node.func, ast.Attribute) and self._env_use_allowed(node.func))
        ):
            yield self.finding("environment_access", node, f"calls {name}")

    def _environment_attribute(self, node: ast.Attribute) -> Iterator[Finding]:
        if node.attr in FRAME_ATTRS:  # ``os.environ.__self__`` and the like are harness_introspection only
            return
        name = self.resolve(node)
        if matches(name, ("os.environ", "os.environb", "posix.environ")) and not self._env_use_allowed(node):
            yield self.finding("environment_access", node, f"uses {name}")

    def _assignment(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete) -> Iterator[Finding]:
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and _settable(self.resolve(target)):
                continue
            for element in ast.walk(target):
                # only what is stored to: ``y[torch.arange(n)] = 0`` or ``cache[(n, torch.float16)] = t`` write y
                # and cache, not torch
                if not isinstance(getattr(element, "ctx", None), (ast.Store, ast.Del)):
                    continue
                if isinstance(element, ast.Attribute):
                    base = self.resolve(element.value)
                    if base and self._is_module_name(base):
                        yield from self._patched(node, base, element.attr, how="assigns")
                elif isinstance(element, ast.Subscript):
                    base = self.resolve(element.value)
                    if matches(base, ("os.environ", "sys.modules", "sys.path", "builtins")):
                        if base == "os.environ" and self._env_use_allowed(element.value):
                            continue
                        rule = "environment_access" if base.startswith("os.") else "harness_introspection"
                        yield self.finding(rule, node, f"writes {base}[...]")
                    elif base and self._is_module_name(base):  # torch.x.__dict__["f"] = ... patches torch
                        yield from self._patched(node, base, None, how="writes into")

    def _patched(self, node: ast.AST, target: str | None, attr: str | None, *, how: str) -> Iterator[Finding]:
        if not target:
            return
        full = f"{target}.{attr}" if attr else target
        if matches(full, TIMER_TARGETS) or (attr in TIMER_NAMES and self._is_module_name(target)):
            yield self.finding("timer_monkeypatch", node, f"{how} {full}")
        elif self._is_module_name(target):
            yield self.finding("harness_introspection", node, f"{how} {full} (patches a library or the harness)")

    def _open(self, node: ast.Call) -> Iterator[Finding]:
        mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
        writes = isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wax+")
        path = node.args[0]
        if isinstance(path, ast.Constant) and isinstance(path.value, int):
            yield self.finding("result_forgery", node, f"opens file descriptor {path.value}")
        elif writes:
            yield self.finding("result_forgery", node, "writes a file (candidates may only compute)")


def _settable(name: str | None) -> bool:
    """A numerics switch (``NUMERICS_FLAGS``) or a compiler setting (``COMPILER_SETTINGS``) other than CUDA graphs and
    compile workers: what honest leaderboard files set at import."""
    if not name:
        return False
    if name in NUMERICS_FLAGS:
        return True
    return matches(name, COMPILER_SETTINGS) is not None and not any(word in name for word in COMPILER_SETTINGS_DENIED)
