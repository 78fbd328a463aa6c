"""Gateways: public attributes of the modules a kernel may import that hold the interpreter's own machinery.

A module a kernel may use re-exports what it imported for itself: ``enum.bltns`` is ``builtins``,
``triton.language.extra.modules`` is ``sys.modules``, ``torch.cuda.tunable.mp`` is ``multiprocessing``. A rule that
knows dangerous facilities by their names cannot know every name a release publishes them under, so the reach rule
asks what a chain of attributes lands on instead (``landing``): it follows the chain through the installed modules
themselves, reading each module's namespace (``vars``, never ``getattr``: no code of any module runs), and judges
the object it reaches (``gateway_kind``):

- a module the candidate could not import itself (``may_import``: the reach rule's lists), or one it may import
  only by name at the top of its file (``sys``, ``os``, ``threading``, whose own rules judge each use);
- ``builtins`` or its namespace, the module table ``sys.modules``, the builtins that run or find code by a string
  (``eval``, ``getattr``, ``__import__``, ``open``, ...) and the functions that hand out frames or the heap;
- a frame, a traceback or a code object;
- an import loader or a module spec (they load and run modules).

``walk_gateways`` lists every such attribute reachable from the allowed modules as installed; the tests regenerate
that list against the installed torch, Triton and NumPy and check that the scanner refuses each entry, so a gateway a
new release adds is refused without anyone naming it, and a test says so if it ever is not.

The modules are imported in the scanning process (the libraries' own import-time code, which the worker runs too);
a module that cannot be imported there is judged by the name rules alone.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

ROOT_ONLY = ("sys", "os", "threading")
"""Modules a kernel may import by name only: reached as an attribute of another module they escape their rules."""
GATEWAY_BUILTINS = (
    "eval",
    "exec",
    "compile",
    "__import__",
    "getattr",
    "setattr",
    "delattr",
    "vars",
    "globals",
    "locals",
    "open",
    "input",
    "breakpoint",
)
"""Builtins that run code, open files or reach any attribute by a string: refused wherever a module republishes them."""
GATEWAY_FUNCTIONS = (
    ("sys", "_getframe"),
    ("sys", "_current_frames"),
    ("sys", "settrace"),
    ("sys", "setprofile"),
    ("sys", "exc_info"),
    ("sys", "exception"),
    ("gc", "get_objects"),
    ("gc", "get_referrers"),
    ("gc", "get_referents"),
    ("inspect", "currentframe"),
    ("inspect", "stack"),
    ("importlib", "import_module"),
    ("importlib", "reload"),
)
"""Functions (by identity, where their module is imported) that hand out frames, the heap or modules by name."""
_MISSING = object()


@dataclass(frozen=True)
class Gateway:
    """Where a chain of attributes reaches the interpreter's machinery, and what it holds there."""

    path: str
    kind: str


def _gateway_objects() -> dict[int, str]:
    """id -> description of the gateway objects that exist by identity in this process."""
    found: dict[int, str] = {
        id(builtins): "the builtins module",
        id(vars(builtins)): "the builtins' namespace",
        id(sys.modules): "the module table (sys.modules)",
    }
    for name in GATEWAY_BUILTINS:
        value = vars(builtins).get(name)
        if value is not None:
            found[id(value)] = f"the builtin {name}"
    for module_name, name in GATEWAY_FUNCTIONS:
        module = sys.modules.get(module_name)
        value = vars(module).get(name) if module is not None else None
        if value is not None:
            found[id(value)] = f"{module_name}.{name}"
    return found


MayImport = Callable[[str], bool]
"""Whether a kernel may use the module of that name (``reach_lists.candidate_may_import``)."""


def gateway_kind(value: Any, may_import: MayImport, objects: dict[int, str] | None = None) -> str | None:
    """What ``value`` gives a kernel that it may not have, or None."""
    known = (objects if objects is not None else _gateway_objects()).get(id(value))
    if known is not None:
        return known
    if issubclass(type(value), types.ModuleType):
        name = vars(value).get("__name__")
        if not isinstance(name, str):
            return "a module without a name"
        if name.split(".")[0] in ROOT_ONLY:
            return f"the module {name} (a kernel may import it by name only)"
        if not may_import(name):
            return f"the module {name}"
        return None
    if issubclass(type(value), (types.FrameType, types.TracebackType, types.CodeType)):
        return f"a {type(value).__name__}"
    from importlib.machinery import ModuleSpec

    if issubclass(type(value), ModuleSpec) or _is_loader(value):
        return "an import loader"
    return None


def _is_loader(value: Any) -> bool:
    """An import loader or a loader class (by the value's type: no property of the value's own is read)."""
    from importlib.abc import Loader

    kind = type(value)
    return issubclass(kind, Loader) or (issubclass(kind, type) and issubclass(value, Loader))


def _module(name: str, may_import: MayImport) -> types.ModuleType | None:
    """The module ``name`` as installed (imported here if a kernel may import it), or None."""
    module = sys.modules.get(name)
    if isinstance(module, types.ModuleType):
        return module
    if not may_import(name):
        return None
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - not installed here: the name rules alone judge it
        return None


def _member(holder: Any, step: str, may_import: MayImport) -> Any:
    """``holder.step`` as stored (a module's namespace, or a class's along its MRO), never through ``getattr``."""
    if isinstance(holder, types.ModuleType):
        value = vars(holder).get(step, _MISSING)
        if value is _MISSING:  # a submodule not imported yet: the import the kernel's chain stands for
            child = f"{holder.__name__}.{step}"
            return _module(child, may_import) if _submodule_exists(child) else _MISSING
        return value
    if isinstance(holder, type):
        for klass in type.__dict__["__mro__"].__get__(holder):
            namespace = type.__dict__["__dict__"].__get__(klass)
            if step in namespace:
                return namespace[step]
    return _MISSING


def _submodule_exists(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except Exception:  # noqa: BLE001 - a parent that is not a package
        return False


def landing(
    root: str, steps: list[str], may_import: MayImport, exempt: frozenset[tuple[str, str]] = frozenset()
) -> Gateway | None:
    """The first gateway the chain ``root.steps[0].steps[1]...`` reaches through the installed modules (and the
    classes they hold), or None. ``exempt``: (module, attribute) pairs a rule of their own judges (``os.path``). The
    walk stops where the chain leaves modules and classes (an instance's attributes are the name rules' to judge)."""
    holder: Any = _module(root, may_import)
    if holder is None:
        return None
    objects = _gateway_objects()
    path = root
    for step in steps:
        owner = holder.__name__ if isinstance(holder, types.ModuleType) else None
        value = _member(holder, step, may_import)
        path = f"{path}.{step}"
        if value is _MISSING:
            return None
        if (owner, step) not in exempt:
            kind = gateway_kind(value, may_import, objects)
            if kind is not None:
                return Gateway(path, kind)
        if not isinstance(value, (types.ModuleType, type)):
            return None
        holder = value
    return None


def walk_gateways(
    roots: tuple[str, ...], may_import: MayImport, exempt: frozenset[tuple[str, str]] = frozenset()
) -> Iterator[Gateway]:
    """Every public attribute path (one per gateway object and module holding it) from the modules ``roots`` and
    their public submodules, as installed, whose value is a gateway (``exempt`` apart, as in ``landing``): the table
    the reach rule is checked against."""
    objects = _gateway_objects()
    queue: list[tuple[str, types.ModuleType]] = []
    for root in roots:
        module = _module(root, may_import)
        if module is not None:
            queue.append((root, module))
    seen: set[int] = set()
    while queue:
        path, module = queue.pop(0)
        if id(module) in seen:
            continue
        seen.add(id(module))
        for name, value in sorted(vars(module).items()):
            if name.startswith("_"):
                continue
            kind = None if (module.__name__, name) in exempt else gateway_kind(value, may_import, objects)
            if kind is not None:
                yield Gateway(f"{path}.{name}", kind)
            elif isinstance(value, types.ModuleType):
                queue.append((f"{path}.{name}", value))
