"""The config each ``@triton.autotune`` kernel of a candidate kept at each timed shape: a launch-parameter sweep's
result (issue 57), read without running any code of the candidate's.

The worker reads it after a shape's timed calls, in the candidate's process: a diagnostic for the model, never a verdict
or a score. Like the rest of the worker since issue 59, it looks no method or property up on an object the candidate
made: a value counts only when ``type()`` (which no object can answer for itself) says it is exactly one of Triton's
classes (``Autotuner``, ``Heuristics``, ``JITFunction``, the interpreter's ``InterpretedFunction``, ``Config``), whose
attributes the static rules forbid a candidate to patch; its fields are then read from its instance dictionary (exactly
a ``dict``, read with ``dict``'s own methods), and the candidate's module through ``ModuleType``'s own ``__dict__``.
Types are compared by identity (``in`` or ``==`` would ask a metaclass). A parameter is shown only when its value is
exactly an int, a float, a bool or a str. A kernel wrapped any other way (a subclass of the autotuner, an object of the
candidate's own that looks like one) reports nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from types import FunctionType, ModuleType
from typing import Any

from ksearch.contracts.evaluation import TunedChoice

_TYPE = type
_DICT = dict
_MODULE_DICT = vars(ModuleType)["__dict__"].__get__
_FUNCTION_NAME = vars(FunctionType)["__name__"].__get__
_MRO = vars(type)["__mro__"].__get__
_GET = dict.get
_SET = dict.__setitem__
PLAIN_VALUES = (int, float, bool, str)
"""The types of a config's parameters that are shown (anything else could format itself with code of its own)."""
WRAPPER_DEPTH = 8
"""How many ``heuristics``/``autotune`` wrappers are followed down to the JIT function."""
LAUNCH_FIELDS = ("num_warps", "num_stages")


@dataclass(frozen=True)
class Autotuned:
    """One ``@triton.autotune`` kernel of the candidate's module."""

    kernel: str
    """The JIT function's name."""
    fields: dict[str, Any]
    """The autotuner's instance dictionary (``best_config`` is what Triton kept at its last call)."""


@dataclass(frozen=True)
class _TritonClasses:
    autotuner: type
    heuristics: type | None
    jit: tuple[type, ...]
    config: type
    fields: dict[type, Callable[[Any], dict[str, Any]]]
    """Per class, its instance dictionary's descriptor, read from the class (never from an instance)."""


def _instance_dict(kind: type) -> Callable[[Any], dict[str, Any]]:
    for klass in _MRO(kind):
        descriptor = vars(klass).get("__dict__")
        if descriptor is not None:
            return descriptor.__get__
    raise TypeError(f"{kind.__qualname__} instances have no __dict__")


def _one_of(kind: type, kinds: tuple[type | None, ...]) -> bool:
    return any(kind is k for k in kinds)


def _fields(value: Any, triton: _TritonClasses) -> dict[str, Any] | None:
    """``value``'s instance dictionary when its type is exactly one of Triton's classes and the dictionary exactly a
    ``dict``; else None."""
    kind = _TYPE(value)
    for triton_kind, read in triton.fields.items():
        if kind is triton_kind:
            fields = read(value)
            return fields if _TYPE(fields) is _DICT else None
    return None


@functools.cache
def _triton_classes() -> _TritonClasses | None:
    """Triton's classes, or None without Triton."""
    try:
        from triton import Config
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import JITFunction
    except Exception:  # noqa: BLE001 - no Triton, nothing is autotuned
        return None
    from triton.runtime import autotuner

    heuristics = vars(autotuner).get("Heuristics")
    jit: tuple[type, ...] = (JITFunction,)
    try:
        from triton.runtime.interpreter import InterpretedFunction

        jit += (InterpretedFunction,)
    except Exception:  # noqa: BLE001 - a Triton without the interpreter
        pass
    kinds = (Autotuner, Config, *jit, *((heuristics,) if heuristics is not None else ()))
    return _TritonClasses(Autotuner, heuristics, jit, Config, {kind: _instance_dict(kind) for kind in kinds})


def _kernel_name(jit_fields: dict[str, Any]) -> str | None:
    function = _GET(jit_fields, "fn")
    if _TYPE(function) is not FunctionType:
        return None
    name = _FUNCTION_NAME(function)
    return name if _TYPE(name) is str else None


def _autotuned(value: Any, triton: _TritonClasses) -> Autotuned | None:
    """The autotuner ``value`` is or wraps (through ``heuristics``), with its JIT function's name; None otherwise."""
    tuner: dict[str, Any] | None = None
    for _ in range(WRAPPER_DEPTH):
        kind = _TYPE(value)
        fields = _fields(value, triton)
        if fields is None:
            return None
        if _one_of(kind, triton.jit):
            name = _kernel_name(fields)
            return Autotuned(name, tuner) if tuner is not None and name is not None else None
        if kind is triton.autotuner and tuner is None:
            tuner = fields
        value = _GET(fields, "fn")
    return None


def autotuners(module: Any) -> list[Autotuned]:
    """Every ``@triton.autotune`` kernel ``module`` defines (through ``heuristics`` wrappers), each once; [] where
    Triton is missing."""
    triton = _triton_classes()
    if triton is None or _TYPE(module) is not ModuleType:
        return []
    found: dict[int, Autotuned] = {}
    for value in list(_DICT.values(_MODULE_DICT(module))):
        tuned = _autotuned(value, triton)
        if tuned is not None:
            found.setdefault(id(tuned.fields), tuned)
    return list(found.values())


def forget_choices(tuners: list[Autotuned]) -> None:
    """Clear each autotuner's last choice, so one that does not run at the next shape reports nothing there."""
    for tuner in tuners:
        _SET(tuner.fields, "best_config", None)


def _plain(value: Any) -> str | None:
    return str(value) if _one_of(_TYPE(value), PLAIN_VALUES) else None


def describe_config(config_fields: dict[str, Any]) -> str:
    """``BLOCK_M=64, num_warps=4, num_stages=1``: a ``triton.Config``'s parameters with plain values."""
    kwargs = _GET(config_fields, "kwargs")
    pairs = list(_DICT.items(kwargs)) if _TYPE(kwargs) is _DICT else []
    pairs += [(name, _GET(config_fields, name)) for name in LAUNCH_FIELDS]
    shown = [(key, _plain(value)) for key, value in pairs if _TYPE(key) is str]
    return ", ".join(f"{key}={text}" for key, text in shown if text is not None)


def tuned_choices(tuners: list[Autotuned], config_name: str) -> list[TunedChoice]:
    """The config each autotuner kept at the shape just timed (its last call's): Triton sets ``best_config`` on every
    call to the config of that call's key."""
    triton = _triton_classes()
    if triton is None:
        return []
    out = []
    for tuner in tuners:
        config = _GET(tuner.fields, "best_config")
        config_fields = _fields(config, triton) if _TYPE(config) is triton.config else None
        if config_fields is None:
            continue
        configs = _GET(tuner.fields, "configs")
        count = len(configs) if _TYPE(configs) is list else 0
        choice = describe_config(config_fields)
        out.append(TunedChoice(config=config_name, kernel=tuner.kernel, choice=choice, configs=count))
    return out
