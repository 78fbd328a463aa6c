"""Where a candidate's work happens, observed at run time in the worker (issue 60): the worker's half.

Static rules read names; a kernel that reaches PyTorch by another name (``getattr(F, "relu")``, ``operator.matmul``,
``torch.ops.aten.native_layer_norm``, an ``nn.CrossEntropyLoss()`` built inline, a softmax composed of amax, exp and
sum) beside a decoy Triton launch passed them. Here the harness watches what runs:

- ``LaunchHooks`` wrap Triton's launch entry points (``JITFunction.run``, ``Autotuner.run``, ``Heuristics.run``, the
  interpreter's ``InterpretedFunction.run``) and the functions of C++ extensions built with ``load_inline``/``load``,
  so every custom launch is counted, the trace pauses inside it (the interpreter's own tensor copies are not the
  candidate's PyTorch work), and a ghost replay can turn it into a no-op;
- ``WorkTracer``, a ``TorchDispatchMode``, records every ATen op the call runs outside those launches, with the
  size of the largest tensor it touched; in a ghost replay it also fills every uninitialised allocation
  (``empty``, ``empty_like``, ``empty_strided``, ``new_empty``...) with NaN (integers with their minimum), so a
  skipped launch leaves its output poisoned instead of holding a stale right answer.

``traced`` wraps one correctness call and returns its ``WorkTrace``; ``ghost`` wraps the ghost replay, one more call
on a correctness config's inputs with every custom launch skipped. Both records go to the checker with the output's
handoff, and the checker decides (``checker.work_judged``): compute on input-sized tensors outside allocation,
layout and views is ``aten_compute``; a ghost output that still matches the reference is ``ghost_output``.

Trust. Everything here runs in the candidate's process and is advisory: the hooks and the mode are installed by the
harness before the candidate is imported, the static rules keep the candidate from reaching them
(``torch.utils._python_dispatch``, ``torch._C``, ``sys.modules`` are ``interpreter_reach``), and after each call the
worker records whether they were still in place (``WorkTrace.intact``; the checker refuses a trace that was not).
What the candidate can still do is behave differently when it is not traced: it is traced on every correctness
call and the ghost replay, not in the timed loop (whose outputs the audits check). The ghost replay is a floor, not
a proof: a kernel whose output depends on a decoy launch having run is wrong without it whatever does the work; the
trace is what sees PyTorch doing the work.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from ksearch.contracts.work import MAX_TRACED_OPS, TracedOp, WorkTrace
from ksearch.tools.evaluator.shared import tensor_access as ta
from ksearch.tools.evaluator.shared.object_access import exception_text

DEVICE_TO_HOST = "device_to_host"
"""How the trace names an op that copies a device tensor to the host: not layout, since what the host does with the
copy (numpy) is work the trace cannot see."""
LAUNCHERS = frozenset({"JITFunction", "InterpretedFunction"})
"""The classes whose ``run`` every Triton launch reaches (on a GPU, and under the interpreter)."""
UNINITIALISED = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"})
"""Allocations whose contents are undefined: a ghost replay poisons them."""


@dataclass
class _State:
    """The harness's state of the hooks: who traces, whether launches are skipped, how many launches ran."""

    tracer: WorkTracer | None = None
    ghost: bool = False
    launches: int = 0
    depth: int = 0
    wrappers: dict[str, Any] = field(default_factory=dict)
    originals: list[tuple[Any, str, Any]] = field(default_factory=list)


_STATE = _State()
_MRO = vars(type)["__mro__"].__get__
_TUPLE_ITER = vars(tuple)["__iter__"]
_LIST_ITER = vars(list)["__iter__"]


class WorkTracer(TorchDispatchMode):
    """Records the ATen ops run outside custom launches; in a ghost replay, poisons uninitialised allocations."""

    def __init__(self, *, ghost: bool = False) -> None:
        super().__init__()
        self.ghost = ghost
        self.ops: dict[str, list[int]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if _STATE.depth:
            return result  # inside a custom launch: the launcher's own tensor handling, not the candidate's work
        name = func.overloadpacket.__name__
        if self.ghost and name in UNINITIALISED:
            _poison(result)
        if _leaves_the_device(args, result):
            name = DEVICE_TO_HOST  # a copy to the host is where numpy (unseen here) could do the work
        record = self.ops.setdefault(name, [0, 0])
        record[0] += 1
        record[1] += _largest(args, kwargs, result)
        return result

    def trace(self, *, intact: bool, raised: str = "") -> WorkTrace:
        ops = sorted(self.ops.items(), key=lambda item: -item[1][1])
        return WorkTrace(
            ops=[TracedOp(op=name, calls=calls, elements=elements) for name, (calls, elements) in ops[:MAX_TRACED_OPS]],
            unlisted_elements=sum(elements for _name, (_calls, elements) in ops[MAX_TRACED_OPS:]),
            launches=_STATE.launches,
            intact=intact,
            ghost=self.ghost,
            raised=raised[:500],
        )


class LaunchHooks:
    """Installs the launch wrappers once per process (before the candidate is imported)."""

    @staticmethod
    def install() -> None:
        if _STATE.wrappers:
            return
        for owner, attribute in _triton_launchers():
            original = getattr(owner, attribute)
            wrapper = _launch_wrapper(original)
            setattr(owner, attribute, wrapper)
            if attribute == "run" and owner.__name__ in LAUNCHERS:
                _STATE.wrappers[f"{owner.__module__}.{owner.__qualname__}.{attribute}"] = (owner, attribute, wrapper)
            _STATE.originals.append((owner, attribute, original))
        from torch.utils import cpp_extension

        for name in ("load_inline", "load"):
            original = getattr(cpp_extension, name)
            wrapper = _extension_builder(original)
            setattr(cpp_extension, name, wrapper)
            _STATE.wrappers[f"torch.utils.cpp_extension.{name}"] = (cpp_extension, name, wrapper)
            _STATE.originals.append((cpp_extension, name, original))

    @staticmethod
    def uninstall() -> None:
        """Put Triton's launchers and the extension builders back (before timing: a timed launch then runs exactly
        Triton's own path; functions of an extension already built keep their thin wrapper, which does nothing
        when no trace is running)."""
        for owner, attribute, original in reversed(_STATE.originals):
            setattr(owner, attribute, original)
        _STATE.originals.clear()
        _STATE.wrappers.clear()

    @staticmethod
    def in_place() -> bool:
        """Whether every wrapper every launch goes through is still where the harness put it (the autotuner's and
        heuristics' ``run`` are wrapped too, for the ghost replay to skip a whole tuned launch, but the harness's
        own tuning wraps them again during correctness, and a launch below them still meets ``JITFunction.run``)."""
        return bool(_STATE.wrappers) and all(
            getattr(owner, attribute, None) is wrapper for owner, attribute, wrapper in _STATE.wrappers.values()
        )


def traced(call: Callable[[], Any]) -> tuple[Any, WorkTrace]:
    """``call()``'s result and its trace (exceptions propagate: the candidate's verdict)."""
    tracer = WorkTracer()
    with _session(tracer):
        result = call()
        intact = _get_current_dispatch_mode() is tracer and LaunchHooks.in_place()
    return result, tracer.trace(intact=intact)


def ghost(call: Callable[[], Any]) -> tuple[Any, WorkTrace]:
    """``call()`` with every custom launch skipped and uninitialised allocations poisoned: its result (None when it
    raised) and its trace."""
    tracer = WorkTracer(ghost=True)
    with _session(tracer):
        try:
            result = call()
        except Exception as exc:  # noqa: BLE001 - without its launches the candidate may fail in any way
            return None, tracer.trace(intact=LaunchHooks.in_place(), raised=exception_text(exc))
        intact = _get_current_dispatch_mode() is tracer and LaunchHooks.in_place()
    return result, tracer.trace(intact=intact)


@contextlib.contextmanager
def _session(tracer: WorkTracer) -> Iterator[None]:
    _STATE.tracer, _STATE.ghost, _STATE.launches, _STATE.depth = tracer, tracer.ghost, 0, 0
    try:
        with tracer:
            yield
    finally:
        _STATE.tracer, _STATE.ghost, _STATE.depth = None, False, 0


def _triton_launchers() -> list[tuple[type, str]]:
    found: list[tuple[type, str]] = []
    try:
        from triton.runtime import autotuner
        from triton.runtime.jit import JITFunction
    except Exception:  # noqa: BLE001 - a worker without Triton has no Triton launches to watch
        return found
    found += [(JITFunction, "run"), (autotuner.Autotuner, "run"), (autotuner.Heuristics, "run")]
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except Exception:  # noqa: BLE001 - an older Triton without the interpreter class
        return found
    return [*found, (InterpretedFunction, "run")]


def _launch_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def launch(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _STATE.tracer is None or kwargs.get("warmup"):
            return original(self, *args, **kwargs)
        if _STATE.depth == 0:
            _STATE.launches += 1
            if _STATE.ghost:
                return None
        _STATE.depth += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _STATE.depth -= 1

    return launch


def _extension_builder(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def build(*args: Any, **kwargs: Any) -> Any:
        return _ExtensionModule(original(*args, **kwargs))

    return build


class _ExtensionModule:
    """A built C++ extension whose functions count as custom launches; in a ghost replay a function still runs
    (its outputs' shapes are its own) and every tensor it returns is then poisoned."""

    def __init__(self, module: Any) -> None:
        object.__setattr__(self, "_module", module)

    def __getattr__(self, name: str) -> Any:
        value = getattr(object.__getattribute__(self, "_module"), name)
        return _extension_call(value) if callable(value) else value


def _extension_call(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if _STATE.tracer is None:
            return function(*args, **kwargs)
        outer = _STATE.depth == 0
        if outer:
            _STATE.launches += 1
        _STATE.depth += 1
        try:
            result = function(*args, **kwargs)
        finally:
            _STATE.depth -= 1
        if outer and _STATE.ghost:
            _poison(result)
        return result

    return call


def _poison(value: Any) -> None:
    """Fill the tensors of ``value`` (an op's or an extension function's result, which may be the candidate's
    objects) with NaN, True or the integer minimum; read by type (``tensor_access``), so none of its code runs."""
    tensors = [item for item in _items(value) if ta.is_tensor(item)]
    if not tensors:
        return
    with torch.utils._python_dispatch._disable_current_modes(), torch._C.DisableTorchFunctionSubclass():
        for tensor in tensors:
            if not ta.numel(tensor):
                continue
            if ta.is_floating(tensor):
                ta.fill(tensor, float("nan"))
            elif ta.dtype(tensor) == torch.bool:
                ta.fill(tensor, True)
            else:
                ta.fill(tensor, torch.iinfo(ta.dtype(tensor)).min)


def _leaves_the_device(args: Any, result: Any) -> bool:
    """Whether an op copies a device tensor to the host (``.cpu()``, ``.to("cpu")``, ``copy_`` into host memory)."""
    sources = [v for v in _flat(args) if ta.is_tensor(v)]
    targets = [v for v in _flat((result,)) if ta.is_tensor(v)]
    return any(ta.device(t).type == "cpu" for t in targets) and any(ta.device(v).type != "cpu" for v in sources)


def _largest(args: Any, kwargs: Any, result: Any) -> int:
    largest = 0
    for value in (*_flat(args), *_flat(list(dict.values(kwargs))), *_flat((result,))):
        if ta.is_tensor(value):
            largest = max(largest, ta.numel(value))
    return largest


def _sequence(value: Any) -> list[Any] | None:
    """The items of a tuple or a list (subclasses included, iterated by ``tuple``'s and ``list``'s own methods, so no
    ``__iter__`` of the candidate's runs); None for anything else."""
    bases = _MRO(type(value))
    if any(kind is tuple for kind in bases):
        return list(_TUPLE_ITER(value))
    if any(kind is list for kind in bases):
        return list(_LIST_ITER(value))
    return None


def _items(value: Any) -> list[Any]:
    items = _sequence(value)
    return [value] if items is None else items


def _flat(values: Any) -> Iterator[Any]:
    for value in _items(values):
        inner = _sequence(value)
        if inner is None:
            yield value
        else:
            yield from _flat(inner)


__all__ = ["LaunchHooks", "WorkTracer", "ghost", "traced"]
