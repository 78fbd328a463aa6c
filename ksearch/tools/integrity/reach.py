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
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ksearch.tools.integrity.base import Finding, ScannerBase
from ksearch.tools.integrity.gateways import landing
from ksearch.tools.integrity.vocabulary import matches

ALLOWED_IMPORTS = (
    "torch",
    "triton",
    "numpy",
    "math",
    "cmath",
    "typing",
    "typing_extensions",
    "functools",
    "itertools",
    "operator",
    "collections",
    "dataclasses",
    "enum",
    "abc",
    "contextlib",
    "copy",
    "warnings",
    "numbers",
    "textwrap",
    "random",
    "einops",
    "__future__",
    "threading",
    "os",
    "time",
    "logging",
    "sys",
    "statistics",
    "fractions",
    "decimal",
    "heapq",
    "bisect",
    "struct",
    "json",
)
"""Modules (and their submodules) a candidate may import. ``threading``, ``os``, ``sys`` and ``time`` are narrowed by
their own rules (locks only; build variables; ``RESTRICTED_MODULES``; reading clocks, never patching them)."""
DENIED_IMPORTS = (
    "torch._C",
    "torch._dynamo",
    "torch._inductor",
    "torch.multiprocessing",
    "torch.distributed",
    "torch.utils.data",
    "torch.hub",
    "torch.package",
    "torch.overrides",
    "torch._subclasses",
    "torch.utils._python_dispatch",
    "torch.profiler",
    "torch.autograd.profiler",
    "torch.utils.benchmark",
    "torch.serialization",
    "torch._utils",
    "numpy.ctypeslib",
    "numpy.f2py",
    "numpy.distutils",
    "numpy.testing",
    "logging.config",
    "logging.handlers",
    "triton.runtime.build",
)
"""Submodules of allowed packages that open the interpreter, other processes, files or the profiler; they win over
``ALLOWED_IMPORTS`` (``torch._inductor.config`` is reached as an attribute, see ``ALLOWED_PRIVATE``)."""
DENIED_STEPS = frozenset(
    {
        "sys",
        "os",
        "gc",
        "inspect",
        "importlib",
        "ctypes",
        "_ctypes",
        "cffi",
        "builtins",
        "__builtin__",
        "traceback",
        "ksearch",
        "subprocess",
        "socket",
        "io",
        "_io",
        "pathlib",
        "shutil",
        "marshal",
        "pickle",
        "multiprocessing",
        "signal",
        "atexit",
        "linecache",
        "runpy",
        "pkgutil",
        "site",
        "sysconfig",
        "tempfile",
        "mmap",
        "resource",
        "posix",
        "_thread",
        "threading",
        "ctypeslib",
        "f2py",
        "_posixsubprocess",
        "faulthandler",
        "tracemalloc",
        "weakref",
        "_weakref",
        "codeop",
        "zipimport",
        "imp",
        "_imp",
        "copyreg",
        "types",
        "dis",
        "_getframe",
        "sys_modules",
    }
)
"""Attribute names that are modules (or gateways) of the interpreter itself: refused after ANY object, since an
allowed module re-exports them (``torch.sys``, ``os.sys``, ``np.os``, ``warnings.sys``, ``task.torch.sys``). ``os`` and
``threading`` are fine as the root of a chain (their own rules judge those), never as a step of another."""
ALLOWED_DUNDERS = frozenset(
    {
        "__init__",
        "__name__",
        "__qualname__",
        "__version__",
        "__len__",
        "__getitem__",
        "__setitem__",
        "__contains__",
        "__iter__",
        "__next__",
        "__enter__",
        "__exit__",
        "__call__",
        "__doc__",
        "__class__",
        "__module__",
        "__repr__",
        "__str__",
        "__format__",
        "__bool__",
        "__float__",
        "__int__",
        "__index__",
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__add__",
        "__sub__",
        "__mul__",
        "__truediv__",
        "__floordiv__",
        "__mod__",
        "__pow__",
        "__matmul__",
        "__neg__",
        "__pos__",
        "__abs__",
        "__and__",
        "__or__",
        "__xor__",
        "__invert__",
        "__radd__",
        "__rmul__",
        "__post_init__",
        "__slots__",
        "__annotations__",
        "__all__",
        "__array__",
        "__cuda_array_interface__",
        "__dlpack__",
        "__dlpack_device__",
        "__torch_function__",
    }
)
"""Dunders a candidate may read or call. Everything else (``__dict__``, ``__globals__``, ``__builtins__``,
``__subclasses__``, ``__bases__``, ``__mro__``, ``__code__``, ``__closure__``, ``__self__``, ``__func__``,
``__wrapped__``, ``__getattribute__``, ``__reduce__``, ``__traceback__``, ``__loader__``, ``__spec__``, ...) walks from
an object to the interpreter's tables. (``__torch_function__`` definitions are judged by ``streams``.)"""
ALLOWED_PRIVATE = (
    "torch._scaled_mm",
    "torch._scaled_grouped_mm",
    "torch._grouped_mm",
    "torch._int_mm",
    "torch._weight_int4pack_mm",
    "torch._weight_int8pack_mm",
    "torch._convert_weight_to_int4pack",
    "torch._foreach_",
    "torch._assert",
    "torch._inductor.config",
    "torch._dynamo.config",
    "torch._dynamo.reset",
    "torch._dynamo.mark_dynamic",
    "torch._dynamo.mark_static",
    "torch.ops.",
)
"""Private names of modules that honest kernels use (fp8/int8 GEMMs, grouped GEMMs for MoE, Inductor's and Dynamo's
settings, any registered operator under ``torch.ops``); a prefix ending in ``_`` or ``.`` covers what extends it."""
RESTRICTED_MODULES: dict[str, frozenset[str]] = {
    "sys": frozenset(
        {
            "stderr",
            "stdout",
            "version_info",
            "version",
            "maxsize",
            "platform",
            "float_info",
            "byteorder",
            "getsizeof",
            "int_info",
            "hexversion",
        }
    ),
    "os": frozenset(
        {"environ", "getenv", "path", "cpu_count", "sep", "linesep", "name", "devnull", "pathsep", "getpid"}
    ),
}
"""The only attributes of these allowed modules a candidate may use: printing to stderr, version checks, build
variables (``writes`` judges which), CPU counts."""
RESTRICTED_STEPS = frozenset((module, name) for module, names in RESTRICTED_MODULES.items() for name in names)
"""(module, attribute) pairs ``RESTRICTED_MODULES`` allows, judged by their own rules (``os.path`` is a module a
kernel could not import)."""
GETATTR_FAMILY = frozenset({"getattr", "setattr", "delattr", "hasattr"})
AS_VALUE_DENIED = frozenset(
    {
        "getattr",
        "setattr",
        "delattr",
        "vars",
        "globals",
        "locals",
        "open",
        "input",
        "eval",
        "exec",
        "compile",
        "__import__",
        "breakpoint",
    }
)
"""Builtins that must be called where they stand: passed around (``f = getattr``, ``map(getattr, ...)``,
``functools.partial(getattr, ...)``) they escape every rule about their arguments."""
DENIED_BUILTIN_CALLS = frozenset({"open", "input"})
"""``open``: candidates compute, they read no files (``/proc`` holds other processes' environments); ``input``: the
worker's standard input is the harness's channel."""
ATTRGETTERS = ("operator.attrgetter", "operator.methodcaller")
ANNOTATION_EVALUATORS = (
    "typing.get_type_hints",
    "typing.ForwardRef",
    "typing.evaluate_forward_ref",
    "typing_extensions.get_type_hints",
    "typing_extensions.ForwardRef",
    "typing_extensions.evaluate_forward_ref",
    "functools.singledispatch",
    "functools.singledispatchmethod",
)
"""Calls that evaluate annotation strings with the module's globals: an ``eval`` no other rule can see."""
PYTHON_C_API = re.compile(
    r"\b(PyRun_\w+|PyImport_\w+|PyEval_\w+|PySys_\w+|Py_CompileString\w*|PyObject_(Get|Set|Del)Attr\w*|"
    r"PyObject_Call\w*|PyModule_GetDict|PyDict_GetItem\w*|PyMarshal_\w+)\b|"
    r"(py|pybind11)::(module_?::import|eval|exec|eval_file|getattr|globals)\b"
)
"""The Python C API (and pybind11's road to it) in C++ sources: running Python code, importing modules, reading
attributes, from where no rule about Python syntax can look."""
DENIED_CALLS = (
    "torch.load",
    "torch.save",
    "torch.from_file",
    "numpy.load",
    "numpy.save",
    "numpy.savez",
    "numpy.fromfile",
    "numpy.memmap",
    "numpy.loadtxt",
    "numpy.genfromtxt",
    "torch.ops.load_library",
    "torch.ops.import_module",
    "torch.classes.load_library",
)
"""File and pickle I/O (``torch.load`` unpickles: code execution), and loading native libraries into the process."""
BUILTIN_NAMESPACE = re.compile(r"^\s*(aten|prims|prim|c10d|_c10d_functional|quantized|torch|inductor)(::|\s*$|\.)")
"""Operator namespaces of torch itself: a ``torch.library`` registration there replaces an operator the harness (and
the reference) use; a candidate's custom op lives in a namespace of its own."""
FORMAT_FIELD = re.compile(r"\{[^{}]*?[.\[][^{}]*\}")
"""A ``str.format`` replacement field that reads an attribute or an item of its argument."""
SAFE_NAME_START = re.compile(r"^[A-Za-z]")


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


def candidate_may_import(name: str) -> bool:
    """Whether a kernel may use the module ``name``: allowed, not denied, and no private part unless
    ``ALLOWED_PRIVATE`` lists it (``torch._inductor.config``) or it is on the way to one (``torch._inductor``, whose
    other steps the name rules judge)."""
    if not matches(name, ALLOWED_IMPORTS):
        return False
    private = any(part.startswith("_") for part in name.split(".")[1:])
    if matches(name, DENIED_IMPORTS) or private:
        return private_status(name) in ("allowed", "intermediate")
    return True


def private_status(dotted: str) -> str:
    """'allowed' when ``dotted`` is (or extends) an ``ALLOWED_PRIVATE`` entry, 'intermediate' when it leads to one
    (``torch._inductor`` on the way to ``torch._inductor.config``), else 'denied'."""
    for prefix in ALLOWED_PRIVATE:
        entry = prefix
        if entry.endswith(("_", ".")):
            if dotted.startswith(entry) or dotted == entry.rstrip("."):
                return "allowed"
        elif dotted == entry or dotted.startswith(entry + "."):
            return "allowed"
    if any(_leads_to(dotted, prefix) for prefix in ALLOWED_PRIVATE):
        return "intermediate"
    return "denied"


def _leads_to(dotted: str, entry: str) -> bool:
    return entry.startswith(dotted + ".")
