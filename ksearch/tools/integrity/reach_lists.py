"""The reach rules' lists (``reach``): the modules a kernel may import, the attribute steps and dunders refused or
allowed, the private names allowed, the members of ``sys`` and ``os`` a kernel may use, the calls denied, and the
lookups over them (``candidate_may_import``, ``private_status``).
"""

from __future__ import annotations

import re

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
