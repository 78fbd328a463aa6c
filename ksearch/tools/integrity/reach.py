"""Reach: what a candidate may touch, by allow-list, however it gets there.

The other rule families recognise dangerous facilities by name at the place they are imported or called. A kernel
written with the harness's source in hand reaches them sideways instead: as an attribute of an allowed module
(``torch.sys.modules``, ``os.sys``, ``task.torch.sys``), through a dunder (``f.__globals__``,
``().__class__.__base__.__subclasses__()``), through ``getattr`` with a name computed at run time, through a format
string (``"{0.__globals__}".format(f)``), or by passing ``getattr`` around as a value. These rules close those roads
by what they allow rather than by what they know:

- ``unlisted_import``: a candidate imports compute libraries only (``ALLOWED_IMPORTS``: torch, triton, numpy, math,
  typing, functools and the like, plus the task's support modules such as GPU MODE's ``task``); an import the module
  never uses is not judged (it runs only the library's own import-time code).
- ``interpreter_reach``: every attribute step is checked wherever the chain starts. A step named like a module
  that opens the interpreter (``DENIED_STEPS``: sys, gc, inspect, importlib, ctypes, builtins, traceback, ksearch, ...)
  is refused after any object; a dunder is refused unless it is one of ``ALLOWED_DUNDERS`` (``__init__``,
  ``__name__``, ``__class__``, ...; never ``__dict__``, ``__globals__``, ``__subclasses__``); a private step of a module
  (``torch._C``) is refused unless ``ALLOWED_PRIVATE`` lists it (``torch._scaled_mm``, ``torch._inductor.config``); a
  module's attributes outside ``RESTRICTED_MODULES``'s lists are refused for ``sys`` and ``os``. (A tensor's version
  counter is not refused: audits re-randomise inputs through ``.data``, which leaves it unchanged, so it tells an
  audit from a timed call no better than the values do.) ``getattr``/``setattr``/``hasattr``
  with a constant name are judged as that attribute; a ``torch.library`` registration for a built-in namespace
  (``aten::``) is refused (it would replace an operator the harness uses).
- ``interpreter_reach`` too: ``getattr``-family calls (and ``operator.attrgetter``/``methodcaller``) with a name
  computed at run time, unless the name provably starts with a plain letter (``f"w{i}"``, ``"w" + str(i)``, a loop
  over constant names); the introspection builtins used as values (``f = getattr``); format strings whose fields read
  attributes or items (``"{0.__globals__}"``).

Honest leaderboard code passes: ``torch.__version__``, ``self.__class__.__name__``, ``super().__init__()``,
``sys.stderr`` for prints, ``logging``, ``warnings``, ``os.environ`` for build variables (judged by ``writes``),
``torch._scaled_mm``, ``torch.ops.aten.*``, ``torch.library`` custom ops in the candidate's own namespace.

The lists these rules read, and the lookups over them, are in ``reach_lists``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ksearch.tools.integrity.base import Finding, ScannerBase
from ksearch.tools.integrity.gateways import landing
from ksearch.tools.integrity.reach_lists import (
    ALLOWED_DUNDERS,
    ALLOWED_IMPORTS,
    ANNOTATION_EVALUATORS,
    AS_VALUE_DENIED,
    ATTRGETTERS,
    BUILTIN_NAMESPACE,
    DENIED_BUILTIN_CALLS,
    DENIED_CALLS,
    DENIED_IMPORTS,
    DENIED_STEPS,
    FORMAT_FIELD,
    GETATTR_FAMILY,
    PYTHON_C_API,
    RESTRICTED_MODULES,
    RESTRICTED_STEPS,
    SAFE_NAME_START,
    candidate_may_import,
    private_status,
)
from ksearch.tools.integrity.vocabulary import matches


class ReachRules(ScannerBase):
    """Mixed into ``Scanner`` after ``ProcessRules``, whose ``_unused`` it uses."""

    support_modules: frozenset[str]
    """Modules the task writes for its candidates (GPU MODE's ``task``, ``utils``): importable (set by ``Scanner``)."""
    self_test: set[int]

    # -- imports ------------------------------------------------------------------------------------------------------
    def _reach_import(self, node: ast.Import | ast.ImportFrom) -> Iterator[Finding]:
        if isinstance(node, ast.ImportFrom):
            if node.level or not node.module:
                return  # relative imports are the processes family's
            for alias in node.names:
                if not self._unused(alias.asname or alias.name):
                    yield from self._import_path(node, node.module, alias.name)
        else:
            for alias in node.names:
                if not self._unused(alias.asname or alias.name.split(".")[0]):
                    yield from self._import_path(node, alias.name, None)

    def _import_path(self, node: ast.AST, module: str, name: str | None) -> Iterator[Finding]:
        """``import module`` (``name`` None) or ``from module import name``."""
        if module.split(".")[0] in self.support_modules:
            return
        full = f"{module}.{name}" if name and name != "*" else module
        if matches(module, DENIED_IMPORTS) and private_status(full) != "allowed":
            yield self.finding("interpreter_reach", node, f"imports {full}")
        elif not matches(module, ALLOWED_IMPORTS):
            yield self.finding(
                "unlisted_import",
                node,
                f"imports {module}, which is not on the list of modules a kernel may use "
                f"({', '.join(ALLOWED_IMPORTS[:12])}, ... and the task's own: "
                f"{', '.join(sorted(self.support_modules)) or '-'})",
            )
        elif matches(full, ANNOTATION_EVALUATORS):
            yield self.finding("interpreter_reach", node, f"imports {full}, which evaluates annotation strings as code")
        else:
            parts = full.split(".")
            yield from self._steps(node, parts[0], parts[1:], module_chain=True)

    # -- attribute chains -----------------------------------------------------------------------------------------
    def _reach_attribute(self, node: ast.Attribute) -> Iterator[Finding]:
        """Judge a whole chain of attributes once, at its outermost node, step by step from its root."""
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return
        steps: list[str] = []
        root: ast.AST = node
        while isinstance(root, ast.Attribute):
            steps.append(root.attr)
            root = root.value
        steps.reverse()
        base = self.resolve(root) if isinstance(root, ast.Name) else None
        if base and self._is_module_name(base):
            parts = base.split(".")
            full = ".".join([base, *steps])
            if matches(full, ANNOTATION_EVALUATORS):
                yield self.finding(
                    "interpreter_reach", node, f"uses {full}, which evaluates annotation strings as code"
                )
                return
            yield from self._steps(node, parts[0], parts[1:] + steps, module_chain=True)
        else:
            yield from self._steps(node, "", steps, module_chain=False)

    def _steps(self, node: ast.AST, base: str, steps: list[str], *, module_chain: bool) -> Iterator[Finding]:
        """Each step of a chain from ``base`` (a module path when ``module_chain``, else an object): first what the
        chain lands on through the installed modules (``gateways.landing``: deny by object), then each step's name."""
        if module_chain and base not in self.support_modules:
            gateway = landing(base, steps, candidate_may_import, RESTRICTED_STEPS)
            if gateway is not None:
                yield self.finding(
                    "interpreter_reach",
                    node,
                    f"reaches {gateway.path}, which holds {gateway.kind}: a public attribute of an allowed module "
                    "that is the interpreter's machinery",
                )
                return
        path, inside_private = base, False
        for step in steps:
            here = f"{path}.{step}" if path else step
            if step in DENIED_STEPS and not (step in ("os", "threading") and not path):
                yield self.finding("interpreter_reach", node, f"reaches {here}: {step} opens the interpreter")
                return
            if step.startswith("__") and step.endswith("__"):
                if step not in ALLOWED_DUNDERS:
                    yield self.finding(
                        "interpreter_reach", node, f"uses {here} ({step} walks to the interpreter's tables)"
                    )
                    return
            elif module_chain and (step.startswith("_") or inside_private):
                status = private_status(here)
                if status == "denied":
                    yield self.finding("interpreter_reach", node, f"uses {here}, a private name of a module")
                    return
                inside_private = status == "intermediate"
            restricted = RESTRICTED_MODULES.get(path) if module_chain else None
            if restricted is not None and step not in restricted:
                yield self.finding(
                    "interpreter_reach",
                    node,
                    f"uses {here} (of {path}, a kernel may use only {', '.join(sorted(restricted))})",
                )
                return
            path = here

    # -- calls ----------------------------------------------------------------------------------------------------
    def _reach_source(self, node: ast.Constant) -> Iterator[Finding]:
        """A C++ source (for ``load_inline``) that drives the interpreter through its C API."""
        text = node.value
        if isinstance(text, str) and id(node) not in self.docstrings and PYTHON_C_API.search(text):
            yield self.finding(
                "interpreter_reach",
                node,
                "the C++ source calls the Python C API (runs code, imports "
                "modules or reads attributes of the interpreter)",
            )

    def _reach_call(self, node: ast.Call, name: str | None) -> Iterator[Finding]:
        builtin = self.is_builtin(node.func, GETATTR_FAMILY | DENIED_BUILTIN_CALLS)
        if builtin in DENIED_BUILTIN_CALLS:
            yield self.finding("interpreter_reach", node, f"calls {builtin}() (a kernel reads no files or input)")
        elif builtin is not None and len(node.args) >= 2:
            yield from self._named_attribute(node, node.args[0], node.args[1], how=builtin)
        if name and matches(name, ATTRGETTERS):
            for arg in node.args:
                yield from self._named_attribute(node, None, arg, how=name)
        if name and matches(name, DENIED_CALLS):
            yield self.finding("interpreter_reach", node, f"calls {name} (file, pickle or native library I/O)")
        if name and matches(name, ANNOTATION_EVALUATORS):
            yield self.finding("interpreter_reach", node, f"calls {name}, which evaluates annotation strings as code")
        if self.is_builtin(node.func, frozenset({"vars"})) and node.args:
            yield self.finding(
                "interpreter_reach",
                node,
                "calls vars() of an object (its namespace as a dict: any attribute by a string)",
            )
        if name and name.startswith("torch.library.") and any(self._builtin_namespace(a) for a in node.args):
            yield self.finding(
                "interpreter_reach",
                node,
                f"{name} registers into torch's own operators (a custom op must live in a namespace of its own)",
            )
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("format", "format_map"):
            text = node.func.value
            if isinstance(text, ast.Constant) and isinstance(text.value, str) and FORMAT_FIELD.search(text.value):
                yield self.finding(
                    "interpreter_reach", node, "a format string reads attributes or items of its arguments"
                )

    @staticmethod
    def _builtin_namespace(arg: ast.expr) -> bool:
        return isinstance(arg, ast.Constant) and isinstance(arg.value, str) and bool(BUILTIN_NAMESPACE.match(arg.value))

    def _named_attribute(
        self, node: ast.Call, target: ast.expr | None, name: ast.expr, *, how: str
    ) -> Iterator[Finding]:
        """``getattr(target, name)`` and its family: a name that folds to constants (``"s" + "ys"``, ``f"s{'ys'}"``,
        a loop over constant strings) is judged as each attribute it can be; a name computed at run time is allowed
        only on ``self`` or ``cls`` (an object of the candidate's own class) and when it provably starts with a
        letter (``f"w{i}"``: never a dunder or a private name), else refused."""
        constants = self._folded_names(name)
        if constants is not None:
            base = self.resolve(target) if isinstance(target, (ast.Name, ast.Attribute)) else None
            plain = isinstance(target, ast.Name) or (isinstance(target, ast.Attribute) and _plain_chain(target))
            for constant in constants:
                if base and plain and self._is_module_name(base):
                    parts = base.split(".")
                    yield from self._steps(node, parts[0], parts[1:] + constant.split("."), module_chain=True)
                else:
                    yield from self._steps(node, "", constant.split("."), module_chain=False)
            return
        own = isinstance(target, ast.Name) and target.id in ("self", "cls")
        if not (own and self._starts_with_letter(name)):
            yield self.finding(
                "interpreter_reach",
                node,
                f"{how} with a name computed at run time (it could name a "
                "private attribute, a dunder or a module); use the attribute itself",
            )

    def _folded_names(self, name: ast.expr) -> list[str] | None:
        """Every string ``name`` can be, when it is built from constants only; None when it is computed at run time."""
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            return [name.value]
        if isinstance(name, ast.JoinedStr):
            parts = []
            for value in name.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                elif (
                    isinstance(value, ast.FormattedValue)
                    and isinstance(value.value, ast.Constant)
                    and value.format_spec is None
                    and value.conversion == -1
                ):
                    parts.append(str(value.value.value))
                else:
                    return None
            return ["".join(parts)]
        if isinstance(name, ast.BinOp) and isinstance(name.op, ast.Add):
            left, right = self._folded_names(name.left), self._folded_names(name.right)
            if left is None or right is None:
                return None
            return [a + b for a in left for b in right]
        if isinstance(name, ast.Name):
            return self._loop_constants(name)
        return None

    @staticmethod
    def _starts_with_letter(name: ast.expr) -> bool:
        if isinstance(name, ast.JoinedStr):
            first = name.values[0] if name.values else None
            return isinstance(first, ast.Constant) and bool(SAFE_NAME_START.match(str(first.value)))
        if isinstance(name, ast.BinOp) and isinstance(name.op, ast.Add):
            left = name.left
            while isinstance(left, ast.BinOp) and isinstance(left.op, ast.Add):
                left = left.left
            return (
                isinstance(left, ast.Constant)
                and isinstance(left.value, str)
                and bool(SAFE_NAME_START.match(left.value))
            )
        return False

    def _loop_constants(self, name: ast.Name) -> list[str] | None:
        """The strings ``name`` takes when it is bound only by ``for name in (<constant strings>)`` loops; else None."""
        loops = []
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.For, ast.comprehension)):
                targets: list[ast.expr] = [node.target]
            elif isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
                targets = [node.target]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                args = node.args
                if any(a.arg == name.id for a in args.posonlyargs + args.args + args.kwonlyargs):
                    return None
                continue
            else:
                continue
            for target in targets:
                if any(isinstance(t, ast.Name) and t.id == name.id for t in ast.walk(target)):
                    if not isinstance(node, (ast.For, ast.comprehension)) or not isinstance(node.target, ast.Name):
                        return None
                    loops.append(node.iter)
        if not loops:
            return None
        values = []
        for iterable in loops:
            if not isinstance(iterable, (ast.Tuple, ast.List, ast.Set)):
                return None
            for element in iterable.elts:
                if not (isinstance(element, ast.Constant) and isinstance(element.value, str)):
                    return None
                values.append(element.value)
        return values

    def _reach_match_class(self, node: ast.MatchClass) -> Iterator[Finding]:
        """``case object(sys=s)`` reads ``subject.sys``: each keyword of a class pattern is an attribute step of the
        match's subject."""
        if not node.kwd_attrs:
            return
        match = self.parents.get(id(node))
        while match is not None and not isinstance(match, ast.Match):
            match = self.parents.get(id(match))
        subject = match.subject if isinstance(match, ast.Match) else None
        base = self.resolve(subject) if isinstance(subject, (ast.Name, ast.Attribute)) else None
        module = bool(base) and _plain_chain(subject) and self._is_module_name(base)
        for attribute in node.kwd_attrs:
            if module:
                parts = base.split(".")
                yield from self._steps(node, parts[0], [*parts[1:], attribute], module_chain=True)
            else:
                yield from self._steps(node, "", [attribute], module_chain=False)

    # -- names ----------------------------------------------------------------------------------------------------
    def _reach_name(self, node: ast.Name) -> Iterator[Finding]:
        """An introspection builtin used as a value rather than called where it stands."""
        if not isinstance(node.ctx, ast.Load) or self.is_builtin(node, AS_VALUE_DENIED) is None:
            return
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Call) and parent.func is node:
            return
        yield self.finding("interpreter_reach", node, f"passes the builtin {node.id} around as a value")


def _plain_chain(node: ast.AST) -> bool:
    """A chain of names and attributes only (``torch.cuda``), not one through a call or an item."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)
