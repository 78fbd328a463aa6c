"""The checks around every call of untrusted candidate code, inside the candidate's worker process.

References to the harness's timers, synchronisation and copy functions are taken *before* the candidate is imported
(``harness_references``); ``Guard.verify`` then fails the candidate when any was replaced (``timer_monkeypatch``) or
when a thread it started is still running (``thread_injection``). The helpers below poison destination buffers,
snapshot inputs and compare them bit for bit, and classify the candidate's exceptions.
"""

from __future__ import annotations

import builtins
import inspect
import os
import sys
import threading
import time
import traceback
import weakref
from types import MappingProxyType
from typing import Any

from ksearch.contracts.evaluation import Mismatch, Rejection, Verdict
from ksearch.tools.evaluator.shared import object_access as oa
from ksearch.tools.evaluator.shared import tensor_access as ta
from ksearch.tools.evaluator.shared.triton_objects import compile_errors

HARNESS_PACKAGES = (
    "ksearch.tools.evaluator.worker",
    "ksearch.tools.evaluator.profiler",
    "ksearch.tools.evaluator.shared",
    "ksearch.tools.timing",
    "ksearch.contracts",
)
"""Packages whose modules' functions and classes the candidate must not replace (checked by identity after every
call): the code of the candidate's own process (the evaluator's worker, profiler and shared packages) and the timing
methods and contracts it relies on."""


def harness_modules() -> list[str]:
    """The modules of ``HARNESS_PACKAGES`` this process has imported (one not imported has nothing to replace)."""
    return sorted(
        name
        for name in sys.modules
        if any(name == package or name.startswith(f"{package}.") for package in HARNESS_PACKAGES)
    )


class CandidateFailure(Exception):
    """Raised inside a phase to end the evaluation with a verdict other than passed."""

    def __init__(
        self,
        verdict: Verdict,
        error: str,
        *,
        mismatch: Mismatch | None = None,
        rejection: Rejection | None = None,
    ) -> None:
        super().__init__(error)
        self.verdict = verdict
        self.error = error
        self.mismatch = mismatch
        self.rejection = rejection


def reject(rule: str, evidence: str) -> CandidateFailure:
    return CandidateFailure(Verdict.REJECTED, evidence, rejection=Rejection(rule=rule, evidence=evidence))


# -- references taken before the candidate is imported -----------------------------------------------------------
def harness_references() -> dict[str, tuple[Any, str, Any]]:
    """label -> (owner, attribute, object) for every timer, sync, copy and harness function the evaluation relies on."""
    import torch

    plain: list[tuple[str, Any, str]] = [
        *(
            (f"time.{n}", time, n)
            for n in (
                "perf_counter",
                "perf_counter_ns",
                "monotonic",
                "monotonic_ns",
                "time",
                "time_ns",
                "process_time",
                "sleep",
            )
        ),
        *(
            (f"torch.cuda.{n}", torch.cuda, n)
            for n in (
                "synchronize",
                "Event",
                "Stream",
                "current_stream",
                "default_stream",
                "set_device",
                "is_available",
                "_sleep",
            )
        ),
        *(
            (f"torch.cuda.Event.{n}", torch.cuda.Event, n)
            for n in ("record", "elapsed_time", "synchronize", "query", "wait", "__init__", "__new__")
        ),
        *(
            (f"torch.{n}", torch, n)
            for n in (
                "save",
                "load",
                "equal",
                "isfinite",
                "isnan",
                "empty",
                "empty_like",
                "full_like",
                "zeros",
                "Tensor",
            )
        ),
        *(
            (f"torch.Tensor.{n}", torch.Tensor, n)
            for n in (
                "clone",
                "cpu",
                "to",
                "detach",
                "copy_",
                "zero_",
                "fill_",
                "contiguous",
                "__eq__",
                "equal",
                "sum",
                "all",
                "any",
                "untyped_storage",
                "data_ptr",
                "stride",
            )
        ),
        *((f"threading.{n}", threading, n) for n in ("active_count", "enumerate", "Thread")),
        *((f"os.{n}", os, n) for n in ("write", "replace", "_exit", "getpid")),
        ("sys._current_frames", sys, "_current_frames"),
        *((f"builtins.{n}", builtins, n) for n in ("type", "isinstance", "len", "getattr", "open", "float", "print")),
    ]
    refs = {label: (owner, name, getattr(owner, name, None)) for label, owner, name in plain}
    for module_name in harness_modules():
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name, value in list(vars(module).items()):
            if name.startswith("__"):
                continue
            # every binding of a harness module, data as well as code: a module attribute rebound to a new table
            # (the timing-method registry, say) is as much a patch as a replaced function
            refs[f"{module_name}.{name}"] = (module, name, value)
            if isinstance(value, type) and value.__module__ == module_name:
                for attr, member in list(vars(value).items()):
                    if inspect.isfunction(member) or isinstance(member, (staticmethod, classmethod, property)):
                        refs[f"{module_name}.{name}.{attr}"] = (value, attr, member)
    return refs


_MISSING = object()


def _stored_in(owner: Any, name: str) -> bool:
    """Whether ``owner.name`` lives in ``owner``'s own ``__dict__`` (not inherited from a base class)."""
    try:
        return name in vars(owner)
    except TypeError:
        return False


def _class_attr(owner: Any, name: str) -> Any:
    """The attribute as stored (class members are read from ``__dict__`` so descriptors compare by identity)."""
    if isinstance(owner, type) and name in vars(owner):
        return vars(owner)[name]
    return getattr(owner, name, None)


_STDLIB_THREAD_FILES = tuple(
    os.path.realpath(os.path.join(os.path.dirname(threading.__file__), name)) for name in ("threading.py", "queue.py")
) + (os.path.realpath(os.path.join(os.path.dirname(threading.__file__), "concurrent", "futures")) + os.sep,)
"""Frames skipped when looking for the code that started a thread: the standard library's thread and executor
machinery itself (by path, so a candidate's own ``threading.py`` is not skipped)."""
HELPER_PACKAGES = ("tqdm",)
"""Libraries that start threads on behalf of whoever called them (tqdm's monitor thread, which torch.compile's
autotuning progress bars start): their frames are skipped too, so the caller decides whose thread it is."""


class ThreadOrigins:
    """Which threads torch or Triton started for themselves (``torch.compile`` keeps compile-worker threads), so that
    they are not taken for the candidate's: ``threading.Thread.start`` is wrapped before the candidate is imported,
    and a thread counts as the library's when the first frame that started it, past the threading and executor
    machinery, is in torch's or Triton's own package. A thread the candidate starts, directly or through an executor
    it made, still has the candidate's code there; one started any other way was never recorded and still counts.
    The wrapper is a harness reference (replacing it is ``timer_monkeypatch``)."""

    def __init__(self) -> None:
        self.trusted = tuple(self._package_dirs())
        self.machinery = _STDLIB_THREAD_FILES + tuple(self._package_dirs(HELPER_PACKAGES, imported=False))
        self.owned: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        """The library's threads, as objects: a thread id is reused once its thread ends, so an id proves nothing."""
        self.original = threading.Thread.start
        origins, original = self, self.original

        def start(thread: threading.Thread, *args: Any, **kwargs: Any) -> Any:
            result = original(thread, *args, **kwargs)
            if origins.started_by_library(sys._getframe(1)):
                origins.owned.add(thread)
            return result

        threading.Thread.start = start  # type: ignore[method-assign]
        self.wrapper = start

    @staticmethod
    def _package_dirs(names: tuple[str, ...] = ("torch", "triton"), *, imported: bool = True) -> list[str]:
        """The folders of these packages: of the modules already imported, or (``imported=False``) as the import
        system would find them, without importing them."""
        import importlib.util

        dirs = []
        for name in names:
            if imported:
                module = sys.modules.get(name)
                origin = getattr(module, "__file__", None) if module is not None else None
            else:
                try:
                    spec = importlib.util.find_spec(name)
                except (ImportError, ValueError):
                    spec = None
                origin = spec.origin if spec is not None else None
            if origin:
                dirs.append(os.path.dirname(os.path.realpath(origin)) + os.sep)
        return dirs

    def started_by_library(self, frame: Any) -> bool:
        while frame is not None and os.path.realpath(frame.f_code.co_filename).startswith(self.machinery):
            frame = frame.f_back
        if frame is None or not self.trusted:
            return False
        return os.path.realpath(frame.f_code.co_filename).startswith(self.trusted)

    @classmethod
    def installed(cls) -> ThreadOrigins:
        """The process's one record (a second wrapper around the first would read as a replaced harness function)."""
        global _ORIGINS
        if _ORIGINS is None or threading.Thread.start is not _ORIGINS.wrapper:
            _ORIGINS = cls()
        return _ORIGINS


_ORIGINS: ThreadOrigins | None = None
_DUMMY_THREAD: type = getattr(threading, "_DummyThread", threading.Thread)
"""What ``threading`` makes of a thread started outside it once that thread asks for its current thread."""


class Guard:
    """The before/after checks around every call of the candidate.

    Its state cannot be edited in place: slotted (no instance attribute can shadow ``verify``), the reference table a
    read-only mapping and the watch lists tuples. (In-process checks stay advisory: what decides a score is checked
    from outside the process, ``ksearch.tools.evaluator.parent.ledger``.)"""

    __slots__ = ("allow_threads", "threads", "refs", "_watch", "_inherited", "current_frames", "baseline_threads")

    def __init__(self, *, allow_threads: bool = False) -> None:
        self.allow_threads = allow_threads
        self.threads = ThreadOrigins.installed()
        refs = {
            label: (owner, name, _class_attr(owner, name)) for label, (owner, name, _) in harness_references().items()
        }
        refs["threading.Thread.start"] = (threading.Thread, "start", self.threads.wrapper)
        self.refs = MappingProxyType(refs)
        # (namespace, name, object) triples: one dict lookup per reference keeps ``verify`` cheap enough to run after
        # every timed call (a candidate could only replace a class member or a module attribute through them).
        self._watch = tuple((vars(owner), name, obj) for owner, name, obj in refs.values() if _stored_in(owner, name))
        self._inherited = tuple((owner, name, obj) for owner, name, obj in refs.values() if not _stored_in(owner, name))
        self.current_frames = sys._current_frames
        self.baseline_threads = self._running()

    def _running(self) -> dict[int, threading.Thread | None]:
        """Each thread running Python code, by id, with its ``Thread`` object (None for one started outside
        ``threading`` that has none)."""
        objects = {thread.ident: thread for thread in threading.enumerate()}
        return {ident: objects.get(ident) for ident in self.current_frames()}

    def _expected(self, ident: int, thread: threading.Thread | None) -> bool:
        """A thread of the library's, or the very thread that ran before the candidate was imported (not a new thread
        that reuses the id of one that has ended since)."""
        if thread is not None and thread in self.threads.owned:
            return True
        if ident not in self.baseline_threads:
            return False
        before = self.baseline_threads[ident]
        return before is thread or (before is None and (thread is None or isinstance(thread, _DUMMY_THREAD)))

    def verify(self, where: str) -> None:
        if all(space.get(name, _MISSING) is obj for space, name, obj in self._watch) and all(
            _class_attr(owner, name) is obj for owner, name, obj in self._inherited
        ):
            replaced: list[str] = []
        else:
            replaced = [label for label, (owner, name, obj) in self.refs.items() if _class_attr(owner, name) is not obj]
        if replaced:
            raise reject(
                "timer_monkeypatch",
                f"{where}: the candidate replaced harness or timer functions: {', '.join(sorted(replaced)[:8])}",
            )
        if ta.modes_active():
            raise reject(
                "tensor_subclass",
                f"{where}: a torch function or dispatch mode is active after the candidate's code ran: it would "
                "intercept every torch call of the harness (leave no mode entered when the kernel returns)",
            )
        new = set() if self.allow_threads else {i for i, t in self._running().items() if not self._expected(i, t)}
        if new:
            names = [t.name for t in threading.enumerate() if t.ident in new] or [str(i) for i in sorted(new)]
            raise reject(
                "thread_injection",
                f"{where}: the candidate left {len(new)} thread(s) running after the call returned "
                f"({', '.join(names[:4])}); work must be finished when the kernel returns (threads that torch or "
                "Triton start for themselves, such as torch.compile's compile workers, are allowed)",
            )


def poison(buffers: list[Any]) -> None:
    """Fill destination buffers with NaN (floating point) or their dtype's maximum, so unwritten elements fail."""
    import torch

    for buffer in buffers:
        if not ta.is_tensor(buffer):
            continue
        kind = ta.dtype(buffer)
        if ta.is_floating(buffer):
            ta.fill(buffer, float("nan"))
        elif kind == torch.bool:
            ta.fill(buffer, True)
        else:
            ta.fill(buffer, torch.iinfo(kind).max)


def clone_inputs(inputs: list[Any]) -> list[Any]:
    return [ta.clone(x) if ta.is_tensor(x) else x for x in inputs]


def count_changed(now: Any, before: Any) -> str:
    """'' when ``now`` still equals ``before`` bit for bit (NaN equals NaN); else what changed, for evidence. ``now``
    has been in the candidate's hands: it is read through ``tensor_access`` only."""
    if not ta.is_tensor(before):
        return "" if now == before else "value replaced"
    if not ta.is_tensor(now) or ta.shape(now) != ta.shape(before) or ta.dtype(now) != ta.dtype(before):
        return "tensor replaced or reshaped"
    changed = ta.changed_elements(now, before)
    return f"{changed} of {ta.numel(now)} elements changed" if changed else ""


def check_plain_tensors(where: str, tensors: list[Any], what: str) -> None:
    """``tensor_attributes``: a returned tensor or an input carries an attribute of its own that shadows a member of
    ``torch.Tensor`` (a method or property set on it: what a harness looking names up would have run). The harness
    never runs them (``tensor_access``), but no honest kernel sets them. The markers torch sets on tensors itself
    (``torch.compile``'s ``_dynamo_propagated_dynamic_indices`` on its outputs, ``torch._dynamo.mark_dynamic``'s on an
    input) shadow nothing and pass."""
    for position, tensor in enumerate(tensors):
        if not ta.is_plain(tensor):
            continue
        names = ta.shadowing_attributes(tensor)
        if names:
            raise reject(
                "tensor_attributes",
                f"{where}: {what} {position} carries attributes of its own that shadow torch.Tensor's "
                f"({', '.join(sorted(names)[:4])}); a kernel may not set methods or properties on the tensors it is "
                "given or returns",
            )


def is_compile_error(exc: BaseException) -> bool:
    """Triton compiles at the first call, so its compile errors arrive as call-time exceptions. Read from the
    exception's type's MRO by identity with Triton's classes: no metaclass or attribute of the candidate's runs."""
    return oa.derives_from(exc, compile_errors())


def format_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).rstrip()


def check_output_form(task: Any, device: str, where: str, output: Any) -> None:
    """Exact type (``torch.Tensor``, or a tuple of them when the task says so), no attributes of its own, device and
    a real storage; read through ``tensor_access`` only (no method of the output runs)."""
    import torch

    if task.output_is_tuple:
        if not ta.is_tuple(output):
            _incorrect(where, f"expected a tuple of torch.Tensor, got {ta.type_name(output)}")
        tensors = list(output)
    else:
        tensors = [output]
    expected_device = torch.device(device)
    for tensor in tensors:
        if ta.is_tensor(tensor) and not ta.is_plain(tensor):
            raise reject(
                "lazy_output",
                f"config {where}: the output is a {ta.type_name(tensor)}, a torch.Tensor subclass; "
                "return a plain torch.Tensor",
            )
        if not ta.is_plain(tensor):
            _incorrect(where, f"expected a torch.Tensor, got {ta.type_name(tensor)}")
    check_plain_tensors(f"config {where}", tensors, "output")
    for tensor in tensors:
        if ta.device(tensor) != expected_device:
            _incorrect(where, f"device {ta.device(tensor)}, expected {expected_device}")
        if not ta.has_storage(tensor):
            raise reject("lazy_output", f"config {where}: the output has no real storage")


def _incorrect(where: str, text: str) -> None:
    message = f"{where}: {text}"
    raise CandidateFailure(Verdict.INCORRECT, message, mismatch=Mismatch(config=where, message=message))
