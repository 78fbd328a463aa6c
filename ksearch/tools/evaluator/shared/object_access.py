"""Objects the candidate made or could have replaced, read without running any code of the candidate's (issue 59).

A Python object answers attribute reads (``__getattribute__``, ``__getattr__``, properties), ``isinstance`` (its
metaclass's ``__instancecheck__``, and its own ``__class__``), comparisons, hashing and formatting with code of its
own. So the harness reads such an object only through what no object can answer for itself: ``type()``, compared by
identity with a class the harness imported (``is``: ``==`` or ``in`` would ask a metaclass); a class's own slots
(``__mro__``, ``__name__``, ``__dict__``) through ``type``'s descriptors, so no metaclass runs; an instance's
dictionary through its trusted class's ``__dict__`` descriptor, kept only when it is exactly a ``dict`` and read with
``dict``'s own methods; and values kept only when their type is exactly a plain one. ``tensor_access`` does the same
for tensors; ``triton_objects`` applies this to Triton's kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import FunctionType, MappingProxyType, ModuleType
from typing import Any

_TYPE = type
_DICT = dict
_TUPLE = tuple
_STR = str
_MRO = vars(type)["__mro__"].__get__
_NAME = vars(type)["__name__"].__get__
_CLASS_DICT = vars(type)["__dict__"].__get__
_MODULE_DICT = vars(ModuleType)["__dict__"].__get__
_FUNCTION_NAME = vars(FunctionType)["__name__"].__get__
_EXCEPTION_DICT = vars(BaseException)["__dict__"].__get__
_EXCEPTION_ARGS = vars(BaseException)["args"].__get__
_GET = dict.get
_PROXY_GET = MappingProxyType.get
_VALUES = dict.values
_ITEMS = dict.items
PLAIN_TYPES: tuple[type, ...] = (int, float, bool, str)
"""Values of these exact types are shown as they are (anything else could format itself with code of its own)."""
MESSAGE_FIELDS = ("message", "error_message")
"""Where Triton's errors keep their text (``CompilationError``, ``PTXASError``): they format it in ``__str__``."""


def one_of(kind: type, kinds: tuple[type | None, ...]) -> bool:
    """``kind`` is one of ``kinds``, by identity."""
    return any(kind is k for k in kinds)


def exactly(value: Any, *kinds: type | None) -> bool:
    """``value``'s type is exactly one of ``kinds`` (no subclass, no ``__class__`` or ``__instancecheck__`` asked)."""
    return one_of(_TYPE(value), kinds)


def derives_from(value: Any, kinds: tuple[type, ...]) -> bool:
    """One of ``kinds`` is in the MRO of ``value``'s type, read from the type's own slot (by identity)."""
    return any(one_of(base, kinds) for base in _MRO(_TYPE(value)))


def class_member(kind: type, name: str) -> Any:
    """What ``kind``'s own dictionary holds under ``name`` (None when it does not; bases are not searched)."""
    return _PROXY_GET(_CLASS_DICT(kind), name)


def type_name(value: Any) -> str:
    """The ``__name__`` of ``value``'s type, read without any metaclass of the candidate's running."""
    return _NAME(_TYPE(value))


def instance_dict(kind: type) -> Callable[[Any], Any]:
    """The reader of ``kind``'s instance dictionary: its ``__dict__`` descriptor, taken from the class (never from an
    instance)."""
    for klass in _MRO(kind):
        descriptor = _PROXY_GET(_CLASS_DICT(klass), "__dict__")
        if descriptor is not None:
            return descriptor.__get__
    raise TypeError(f"{kind.__qualname__} instances have no __dict__")


class Fields:
    """Reads the instance dictionaries of objects whose type is exactly one of a set of trusted classes."""

    def __init__(self, kinds: tuple[type, ...]) -> None:
        self.readers: dict[type, Callable[[Any], Any]] = {kind: instance_dict(kind) for kind in kinds}

    def of(self, value: Any) -> dict[str, Any] | None:
        """``value``'s instance dictionary when its type is exactly one of the classes and the dictionary exactly a
        ``dict``; else None."""
        kind = _TYPE(value)
        for trusted, read in _ITEMS(self.readers):
            if kind is trusted:
                fields = read(value)
                return fields if _TYPE(fields) is _DICT else None
        return None


def field(fields: Mapping[str, Any], name: str) -> Any:
    """``fields[name]`` (None when missing) through ``dict``'s own method (``fields`` is exactly a ``dict``)."""
    return _GET(fields, name)  # type: ignore[call-overload]


def plain_field(fields: Mapping[str, Any], name: str, kind: type) -> Any:
    """``fields[name]`` when its type is exactly ``kind``; else None."""
    value = _GET(fields, name)  # type: ignore[call-overload]
    return value if _TYPE(value) is kind else None


def mapping_values(mapping: Any, *kinds: type) -> list[Any]:
    """The values of ``mapping`` when its type is exactly one of ``kinds`` (``dict``, or a subclass of it that Triton
    defines), read with ``dict``'s own method (no ``__missing__``, no ``values`` of its own); else []."""
    return list(_VALUES(mapping)) if exactly(mapping, *kinds) else []


def module_values(module: Any) -> list[Any]:
    """The globals of a module, read through ``ModuleType``'s own ``__dict__`` ([] for a module whose class was
    replaced, or whose dictionary is not exactly a ``dict``)."""
    if _TYPE(module) is not ModuleType:
        return []
    namespace = _MODULE_DICT(module)
    return list(_VALUES(namespace)) if _TYPE(namespace) is _DICT else []


def function_name(function: Any) -> str | None:
    """A plain function's ``__name__`` (None for anything else, or a name that is not exactly a ``str``)."""
    if _TYPE(function) is not FunctionType:
        return None
    name = _FUNCTION_NAME(function)
    return name if _TYPE(name) is _STR else None


def plain_text(value: Any) -> str | None:
    """``str(value)`` for a value of exactly a plain type; None otherwise."""
    return _STR(value) if exactly(value, *PLAIN_TYPES) else None


def exception_message(exc: BaseException) -> str:
    """What ``str(exc)`` says, for an exception that may be the candidate's, without running its ``__str__``: the
    text Triton's errors keep (``message``, ``error_message``), else its arguments, each shown only when exactly a
    plain value (others by their type's name)."""
    fields = _EXCEPTION_DICT(exc)
    if _TYPE(fields) is _DICT:
        for name in MESSAGE_FIELDS:
            text = _GET(fields, name)
            if _TYPE(text) is _STR:
                return text
    args = _EXCEPTION_ARGS(exc)
    if _TYPE(args) is not _TUPLE or not args:
        return ""
    if len(args) == 1:
        return _shown(args[0], _STR)
    return "(" + ", ".join(_shown(a, repr) for a in args) + ")"


def _shown(value: Any, form: Callable[[Any], str]) -> str:
    """``form(value)`` for exactly a plain value, else its type's name in angle brackets."""
    return form(value) if exactly(value, *PLAIN_TYPES) else f"<{type_name(value)}>"


def exception_text(exc: BaseException) -> str:
    """``Name: message`` of an exception that may be the candidate's (``exception_message``)."""
    message = exception_message(exc)
    return f"{type_name(exc)}: {message}" if message else type_name(exc)
