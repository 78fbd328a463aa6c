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
candidate's own that looks like one) reports nothing. The reads are ``shared/triton_objects``'s, which the resource
reader shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ksearch.contracts.evaluation import TunedChoice
from ksearch.tools.evaluator.shared import object_access as oa
from ksearch.tools.evaluator.shared.triton_objects import module_kernels, triton_kinds

_DICT = dict
_SET = dict.__setitem__
LAUNCH_FIELDS = ("num_warps", "num_stages")


@dataclass(frozen=True)
class Autotuned:
    """One ``@triton.autotune`` kernel of the candidate's module."""

    kernel: str
    """The JIT function's name."""
    fields: dict[str, Any]
    """The autotuner's instance dictionary (``best_config`` is what Triton kept at its last call)."""


def autotuners(module: Any) -> list[Autotuned]:
    """Every ``@triton.autotune`` kernel ``module`` defines (through ``heuristics`` wrappers), each once; [] where
    Triton is missing."""
    found: dict[int, Autotuned] = {}
    for kernel in module_kernels(module):
        name = kernel.name
        if kernel.tuner_fields is not None and name is not None:
            found.setdefault(id(kernel.tuner_fields), Autotuned(name, kernel.tuner_fields))
    return list(found.values())


def forget_choices(tuners: list[Autotuned]) -> None:
    """Clear each autotuner's last choice, so one that does not run at the next shape reports nothing there."""
    for tuner in tuners:
        _SET(tuner.fields, "best_config", None)


def describe_config(config_fields: dict[str, Any]) -> str:
    """``BLOCK_M=64, num_warps=4, num_stages=1``: a ``triton.Config``'s parameters with plain values."""
    kwargs = oa.field(config_fields, "kwargs")
    pairs = list(_DICT.items(kwargs)) if oa.exactly(kwargs, _DICT) else []
    pairs += [(name, oa.field(config_fields, name)) for name in LAUNCH_FIELDS]
    shown = [(key, oa.plain_text(value)) for key, value in pairs if oa.exactly(key, str)]
    return ", ".join(f"{key}={text}" for key, text in shown if text is not None)


def tuned_choices(tuners: list[Autotuned], config_name: str) -> list[TunedChoice]:
    """The config each autotuner kept at the shape just timed (its last call's): Triton sets ``best_config`` on every
    call to the config of that call's key."""
    kinds = triton_kinds()
    if kinds is None:
        return []
    out = []
    for tuner in tuners:
        config = oa.field(tuner.fields, "best_config")
        config_fields = kinds.fields.of(config) if oa.exactly(config, kinds.config) else None
        if config_fields is None:
            continue
        configs = oa.field(tuner.fields, "configs")
        count = len(configs) if oa.exactly(configs, list) else 0
        choice = describe_config(config_fields)
        out.append(TunedChoice(config=config_name, kernel=tuner.kernel, choice=choice, configs=count))
    return out
