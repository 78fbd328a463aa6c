"""Triton's own objects in a candidate's module, found and read without running any code of the candidate's.

The worker reads a candidate's Triton kernels for diagnostics (the config each autotuner kept, the figures of each
compiled kernel). Read as attributes, any object of the module would answer with code of its own: a class with
``__getattr__``, a property, a metaclass's ``__instancecheck__``, a lying ``__class__``. So, as ``object_access``
says, a value counts only when ``type()`` says it is exactly one of Triton's classes (``Autotuner``, ``Heuristics``,
``JITFunction``, the interpreter's ``InterpretedFunction``, ``Config``, ``CompiledKernel``, ``FutureKernel``,
``ASTSource``), imported by the harness and compared by identity; its fields come from its instance dictionary, and a
compiled kernel's metadata (a named tuple Triton makes per kernel) from ``tuple``'s own iteration and the field names
its class keeps. A subclass of one of them, or an object of the candidate's that looks like one, is not read at all.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ksearch.tools.evaluator.shared import object_access as oa

WRAPPER_DEPTH = 8
"""How many ``heuristics``/``autotune`` wrappers are followed down to the JIT function."""
_TUPLE_ITER = vars(tuple)["__iter__"]


@dataclass(frozen=True)
class TritonKinds:
    """Triton's classes, imported by the harness (before the candidate), that the worker reads by exact type."""

    autotuner: type
    heuristics: type | None
    jit: type
    interpreted: type | None
    config: type
    compiled: type
    future: type | None
    source: type | None
    asm: tuple[type, ...]
    """The mappings a compiled kernel keeps its binaries in (Triton's ``AsmDict``, a ``dict``)."""
    fields: oa.Fields


def _optional(module: str, name: str) -> type | None:
    """A class Triton may not have in every version."""
    try:
        found = vars(__import__(module, fromlist=[name])).get(name)
    except Exception:  # noqa: BLE001 - a Triton without it
        return None
    return found if oa.exactly(found, type) else None


@functools.cache
def triton_kinds() -> TritonKinds | None:
    """Triton's classes, or None without Triton."""
    try:
        from triton import Config
        from triton.compiler.compiler import CompiledKernel
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import JITFunction
    except Exception:  # noqa: BLE001 - no Triton: no kernels
        return None
    heuristics = _optional("triton.runtime.autotuner", "Heuristics")
    interpreted = _optional("triton.runtime.interpreter", "InterpretedFunction")
    future = _optional("triton.runtime._async_compile", "FutureKernel")
    source = _optional("triton.compiler.compiler", "ASTSource")
    asm = _optional("triton.compiler.compiler", "AsmDict")
    classes = (Autotuner, heuristics, JITFunction, interpreted, Config, CompiledKernel, future, source)
    return TritonKinds(
        autotuner=Autotuner,
        heuristics=heuristics,
        jit=JITFunction,
        interpreted=interpreted,
        config=Config,
        compiled=CompiledKernel,
        future=future,
        source=source,
        asm=(dict,) + ((asm,) if asm is not None else ()),
        fields=oa.Fields(tuple(kind for kind in classes if kind is not None)),
    )


@dataclass(frozen=True)
class Kernel:
    """One kernel of the candidate's module as Triton wraps it."""

    jit: Any
    """The JIT function (or, under the interpreter, the ``InterpretedFunction``)."""
    jit_fields: dict[str, Any]
    tuner_fields: dict[str, Any] | None
    """The outermost ``@triton.autotune`` wrapper's instance dictionary, if one wraps the kernel."""

    @property
    def name(self) -> str | None:
        """The kernel's Python function's name."""
        return oa.function_name(oa.field(self.jit_fields, "fn"))


def unwrapped(value: Any, kinds: TritonKinds) -> Kernel | None:
    """The kernel ``value`` is, or wraps through ``autotune``/``heuristics``; None for anything else."""
    tuner: dict[str, Any] | None = None
    for _ in range(WRAPPER_DEPTH):
        fields = kinds.fields.of(value)
        if fields is None:
            return None
        kind = type(value)
        if kind is kinds.jit or (kinds.interpreted is not None and kind is kinds.interpreted):
            return Kernel(value, fields, tuner)
        if kind is kinds.autotuner:
            tuner = fields if tuner is None else tuner
        elif kinds.heuristics is None or kind is not kinds.heuristics:
            return None
        value = oa.field(fields, "fn")
    return None


def module_kernels(module: Any) -> list[Kernel]:
    """Every kernel ``module`` defines (through its wrappers), in the order of its globals; [] without Triton."""
    kinds = triton_kinds()
    if kinds is None:
        return []
    found = (unwrapped(value, kinds) for value in oa.module_values(module))
    return [kernel for kernel in found if kernel is not None]


def compiled_of(jit_fields: dict[str, Any], kinds: TritonKinds) -> list[Any]:
    """The compiled kernels (``CompiledKernel`` or ``FutureKernel``) in a JIT function's per-device caches: Triton
    keeps, per device, a tuple whose first item is the cache of compiled kernels by specialisation."""
    out: list[Any] = []
    for entry in oa.mapping_values(oa.field(jit_fields, "device_caches"), defaultdict, dict):
        if oa.exactly(entry, tuple) and len(entry) > 0:
            out += oa.mapping_values(entry[0], dict)
    return out


def compiled_fields(kernel: Any, kinds: TritonKinds) -> dict[str, Any] | None:
    """A ``CompiledKernel``'s instance dictionary, also behind a finished ``FutureKernel`` (never waiting for an
    unfinished one); None for anything else."""
    if kinds.future is not None and oa.exactly(kernel, kinds.future):
        fields = kinds.fields.of(kernel)
        kernel = oa.field(fields, "kernel") if fields is not None else None
    return kinds.fields.of(kernel) if oa.exactly(kernel, kinds.compiled) else None


def metadata_fields(metadata: Any) -> dict[str, Any]:
    """A compiled kernel's metadata (a named tuple class Triton makes per kernel) as a dictionary: the field names its
    class keeps (exactly a tuple of strings), the values through ``tuple``'s own iteration; {} for anything else."""
    if not oa.derives_from(metadata, (tuple,)):
        return {}
    names = oa.class_member(type(metadata), "_fields")
    if not oa.exactly(names, tuple) or not all(oa.exactly(name, str) for name in names):
        return {}
    values = list(_TUPLE_ITER(metadata))
    return dict(zip(names, values, strict=True)) if len(values) == len(names) else {}


def source_name(source: Any, kinds: TritonKinds) -> str | None:
    """The kernel name a Triton ``ASTSource`` (what a compile is given) carries; None for anything else."""
    if kinds.source is None or not oa.exactly(source, kinds.source):
        return None
    fields = kinds.fields.of(source)
    return oa.plain_field(fields, "name", str) if fields is not None else None


@functools.cache
def compile_errors() -> tuple[type, ...]:
    """Triton's exceptions that mean a kernel did not compile or cannot launch as compiled (compiles happen at the first
    call, so they arrive as call-time exceptions); () without Triton."""
    found = (
        _optional("triton.compiler.errors", "CompilationError"),
        _optional("triton.runtime.errors", "OutOfResources"),
        _optional("triton.runtime.errors", "PTXASError"),
    )
    return tuple(kind for kind in found if kind is not None)
