"""What every rule family shares: ``Finding``, and ``ScannerBase``, the parsed module with its names resolved.

``ScannerBase`` reads the module once: import aliases (so ``F.softmax`` is ``torch.nn.functional.softmax``), the
names it defines, its persistent containers, docstrings, and each node's parent. The rule families in this package
(mixins over this class) ask it to resolve names and to build findings; ``scanner.Scanner`` combines them and walks.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ksearch.tools.integrity.compute_vocabulary import CONTAINER_FACTORIES
from ksearch.tools.integrity.vocabulary import ENTRY_POINTS, RULES, matches


@dataclass(frozen=True)
class Finding:
    """One broken rule at one place in the source."""

    rule: str
    line: int
    snippet: str
    detail: str

    def evidence(self) -> str:
        return f"line {self.line}: `{self.snippet}`: {self.detail} ({RULES[self.rule]})"


def binds(node: ast.AST, name: str) -> bool:
    """Whether ``node`` binds ``name``: an assignment, ``del``, loop or ``with`` target, a parameter, an import, a
    definition, an ``except ... as``, a ``match`` capture."""
    return (isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load)) or binds_otherwise(
        node, name
    )


def binds_otherwise(node: ast.AST, name: str) -> bool:
    """Whether ``node`` binds ``name`` without a ``Name`` target: a parameter, an import, a definition, an
    ``except ... as``, a ``match`` capture."""
    if isinstance(node, ast.arg):
        return node.arg == name
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return name in {alias.asname or alias.name.split(".")[0] for alias in node.names}
    if isinstance(
        node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler, ast.MatchAs, ast.MatchStar)
    ):
        return node.name == name
    return False


def is_main_test(test: ast.expr) -> bool:
    """Whether an ``if`` tests ``__name__ == "__main__"`` (either way round): a self-test that never runs when the
    harness imports the module."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1


class ScannerBase:
    """One parsed module, read once; the rule families are mixins over it."""

    def __init__(
        self,
        code: str,
        tree: ast.Module,
        *,
        forbidden: tuple[str, ...],
        entry_point: str | None,
        data_parameters: tuple[int, ...] = (),
    ) -> None:
        self.lines = code.splitlines()
        self.tree = tree
        self.forbidden = forbidden
        self.entry_points = (entry_point,) if entry_point else ENTRY_POINTS
        self.data_parameters = data_parameters
        """Positions in the entry point's ``data`` tuple that hold parameters (weights, config), not activations."""
        self.aliases: dict[str, str] = {}
        self.defined: set[str] = set()
        self.containers: set[str] = set()
        self.docstrings: set[int] = set()
        self._collect_names()
        self.module_roots = {v.split(".")[0] for v in self.aliases.values()} | {
            "torch",
            "triton",
            "time",
            "sys",
            "os",
            "ksearch",
            "builtins",
            "numpy",
            "math",
            "statistics",
            "__builtins__",
        }
        self.parents: dict[int, ast.AST] = {
            id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)
        }

    # -- name resolution ------------------------------------------------------------------------------------------
    def _collect_names(self) -> None:
        """Import aliases, names bound by the module (so ``compile`` may be the module's own), module-level
        containers, and simple aliases ``ev = torch.cuda.Event`` (flow-insensitive: good enough for a pre-filter)."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defined.add(node.name)
            elif isinstance(node, ast.Global):
                self.containers.update(node.names)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                self.docstrings.add(id(node.value))  # docstrings and bare strings are prose, not sources
        for _ in range(2):  # aliases of aliases
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    target = node.targets[0].id
                    plain = not any(isinstance(n, ast.Call) for n in ast.walk(node.value))
                    resolved = self.resolve(node.value) if plain else None
                    if resolved and resolved.split(".")[0] in {v.split(".")[0] for v in self.aliases.values()}:
                        self.aliases.setdefault(target, resolved)
                    elif target not in self.aliases:
                        self.defined.add(target)
        for node in self.tree.body:
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if self._is_container(value):
                self.containers.update(t.id for t in targets if isinstance(t, ast.Name))
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                defaults = list(args.defaults) + [d for d in args.kw_defaults if d is not None]
                positional = args.posonlyargs + args.args
                for arg, default in zip(positional[len(positional) - len(args.defaults) :], args.defaults):
                    if self._is_container(default):
                        self.containers.add(arg.arg)
                for arg, default in zip(args.kwonlyargs, args.kw_defaults):
                    if default is not None and self._is_container(default):
                        self.containers.add(arg.arg)
                del defaults

    def _is_container(self, value: ast.expr) -> bool:
        if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp)):
            return True
        return isinstance(value, ast.Call) and matches(self.resolve(value.func), CONTAINER_FACTORIES) is not None

    def resolve(self, node: ast.AST) -> str | None:
        """Dotted name of a Name/Attribute chain with import aliases applied (``F.softmax`` ->
        ``torch.nn.functional.softmax``); calls in the chain are skipped (``x.cpu().numpy`` -> ``x.cpu.numpy``)."""
        parts: list[str] = []
        while True:
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            elif isinstance(node, ast.Call):
                node = node.func
            elif isinstance(node, ast.Subscript):
                node = node.value
            elif isinstance(node, ast.Name):
                parts.append(self.aliases.get(node.id, node.id))
                break
            else:
                return None
        return ".".join(reversed(parts))

    def is_builtin(self, node: ast.expr, names: frozenset[str]) -> str | None:
        if isinstance(node, ast.Name) and node.id in names and node.id not in self.defined | set(self.aliases):
            return node.id
        if isinstance(node, ast.Attribute) and node.attr in names:
            base = self.resolve(node.value)
            if base in ("builtins", "__builtins__", "__builtin__"):
                return node.attr
        return None

    def _is_module_name(self, dotted: str) -> bool:
        return dotted.split(".")[0] in self.module_roots

    def _is_module_ref(self, node: ast.expr) -> bool:
        name = self.resolve(node)
        return bool(name) and self._is_module_name(name)

    # -- findings -------------------------------------------------------------------------------------------------
    def finding(self, rule: str, node: ast.AST, detail: str) -> Finding:
        line = getattr(node, "lineno", 0)
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        return Finding(rule=rule, line=line, snippet=text[:120], detail=detail)
