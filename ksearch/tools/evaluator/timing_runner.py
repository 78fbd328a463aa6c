"""``timing.TimingRunner`` on the worker's device: the primitives a timing method's loop calls.

Nothing here runs inside a timed region except the candidate's call itself: a ``_Call`` is built (inputs generated or
taken from the cache, the task's argument object built) before the loop records its start event, and every check
(harness guard, output form, staging for the checker, deferred work, input digest) runs after the end event. Event
records, elapsed times and synchronisations go through references taken before the candidate was imported, so a
candidate that patches them changes nothing here (and is rejected by the guard).
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

from ksearch.contracts.evaluation import Verdict
from ksearch.tasks.base import TaskConfig
from ksearch.tools.evaluator.guard import (
    CandidateFailure,
    check_output_form,
    clone_inputs,
    format_exception,
    is_compile_error,
    poison,
    reject,
)
from ksearch.tools.evaluator.seeds import AUDIT_BASE, MAX_INPUT_SETS, input_digest, input_set_seed

if TYPE_CHECKING:
    from ksearch.tools.evaluator.worker import Worker


class _Call:
    """``fn(*args)`` on one input set; exceptions of the candidate become its verdict."""

    __slots__ = ("fn", "args", "inputs", "index", "seed", "config")

    def __init__(self, fn: Any, args: tuple[Any, ...], inputs: list[Any], index: int, seed: int, config: TaskConfig) -> None:
        self.fn, self.args, self.inputs, self.index, self.seed, self.config = fn, args, inputs, index, seed, config

    def __call__(self) -> Any:
        try:
            return self.fn(*self.args)
        except BaseException as exc:  # noqa: BLE001 - anything the candidate raises is its verdict
            verdict = Verdict.COMPILE_ERROR if is_compile_error(exc) else Verdict.RUNTIME_ERROR
            raise CandidateFailure(verdict, f"on config {self.config.name}:\n{format_exception(exc)}") from None


class WorkerTimingRunner:
    """The timing primitives for one benchmark config of one candidate."""

    def __init__(self, worker: Worker, fn: Any, config: TaskConfig, index: int, *, audited: bool = True) -> None:
        import torch

        self.worker, self.fn, self.config, self.index = worker, fn, config, index
        self.audited = audited
        refs = worker.guard.refs if worker.guard else {}
        self._event_cls = refs.get("torch.cuda.Event", (None, None, torch.cuda.Event))[2]
        self._record = refs.get("torch.cuda.Event.record", (None, None, torch.cuda.Event.record))[2]
        self._elapsed = refs.get("torch.cuda.Event.elapsed_time", (None, None, torch.cuda.Event.elapsed_time))[2]
        self._tensor = refs.get("torch.Tensor", (None, None, torch.Tensor))[2]
        self._wall = refs.get("time.perf_counter", (None, None, time.perf_counter))[2]
        self._sleep = refs.get("torch.cuda._sleep", (None, None, getattr(torch.cuda, "_sleep", None)))[2]
        self.sets: dict[int, tuple[list[Any], str, tuple[Any, ...]]] = {}
        self._flush: Any = None
        self._audits = 0

    def share_inputs_with(self, other: WorkerTimingRunner) -> None:
        """Use ``other``'s input sets (compare mode: both candidates see identical inputs)."""
        self.sets = other.sets

    # -- calls ----------------------------------------------------------------------------------------------------
    def _seed(self, index: int) -> int:
        return input_set_seed(self.config.seed, index)

    def _generate(self, index: int) -> list[Any]:
        return self.worker.task.make_inputs(self.config.model_copy(update={"seed": self._seed(index)}), self.worker.device)

    def call_on(self, index: int, *, fresh: bool = False, reuse_args: bool = True, clone: bool = False) -> _Call:
        task = self.worker.task
        if fresh:
            inputs = self._generate(index)
            return _Call(self.fn, task.call_args(inputs, self.config), inputs, index, self._seed(index), self.config)
        if index not in self.sets:
            inputs = self._generate(index)
            self.sets[index] = (inputs, input_digest(inputs), task.call_args(inputs, self.config))
        inputs, _, args = self.sets[index]
        if clone:
            inputs = clone_inputs(inputs)
            args = task.call_args(inputs, self.config)
        elif not reuse_args:
            args = task.call_args(inputs, self.config)
        return _Call(self.fn, args, inputs, index, self._seed(index), self.config)

    def prime(self, call: _Call) -> None:
        buffers = self.worker.task.output_buffers(self.config, call.inputs)
        if buffers:
            poison(buffers)

    # -- device primitives -------------------------------------------------------------------------------------------
    def event(self) -> Any:
        return self._event_cls(enable_timing=True)

    def record(self, event: Any) -> None:
        self._record(event)

    def elapsed(self, start: Any, end: Any) -> float:
        return float(self._elapsed(start, end))

    def synchronize(self) -> None:
        try:
            self.worker.synchronize()
        except BaseException as exc:  # noqa: BLE001 - an asynchronous device error of the candidate's kernel
            raise CandidateFailure(Verdict.RUNTIME_ERROR, f"on config {self.config.name}:\n{format_exception(exc)}") from None

    def flush(self) -> None:
        import torch

        if self._flush is None:
            self._flush = torch.empty(self.worker.request.flush_bytes // 4, dtype=torch.int32, device=self.worker.device)
        self._flush.zero_()

    def hold(self, ms: float) -> None:
        if ms <= 0 or self._sleep is None or not self.worker.device.startswith("cuda"):
            return
        try:
            rate = self.worker.spin_cycles_per_ms or self._calibrate_spin()
            self._sleep(max(1, int(ms * rate)))
        except RuntimeError:  # no spin kernel in this build of torch: time without the hold
            self._sleep = None

    def _calibrate_spin(self) -> float:
        """Cycles of the spin kernel per millisecond, measured with the harness's events (the second of two readings,
        once the kernel itself is loaded)."""
        cycles, elapsed = 1_000_000, 1.0
        for _ in range(2):
            start, end = self.event(), self.event()
            self.record(start)
            self._sleep(cycles)
            self.record(end)
            self.synchronize()
            elapsed = self.elapsed(start, end)
        self.worker.spin_cycles_per_ms = cycles / max(elapsed, 1e-3)
        return self.worker.spin_cycles_per_ms

    def wall(self) -> float:
        return self._wall()

    # -- checks ---------------------------------------------------------------------------------------------------
    def after(self, call: _Call, output: Any) -> None:
        """Host-only checks of every call (no device work, no sync): harness guard and output form."""
        self.worker.verify(f"timed call on config {self.config.name}")
        check_output_form(self.worker.task, self.worker.device, self.config.name, output)

    def glance(self, call: _Call, output: Any) -> None:
        """The cheapest check of a repeat's output (its exact type), for loops that must stay as lean between
        repeats as upstream's; anything unusual gets the full ``after``."""
        tensor = self._tensor
        if type(output) is tensor or (type(output) is tuple and all(type(t) is tensor for t in output)):
            return
        self.after(call, output)

    def want_audit(self, index: int) -> bool:
        return True

    def audit(self, call: _Call, output: Any) -> None:
        self._audit(call, output, kind="bench", activation_seed=None)

    def audit_fresh_values(self, call: _Call) -> None:
        """Re-randomise the activation inputs of ``call``'s set in place and check one more call on them."""
        if not self.audited:
            return
        task = self.worker.task
        seed = input_set_seed(self.config.seed, AUDIT_BASE + random.randrange(MAX_INPUT_SETS - AUDIT_BASE))
        fresh = task.make_inputs(self.config.model_copy(update={"seed": seed}), self.worker.device)
        positions = task.activation_inputs(self.config)
        for position in range(len(call.inputs)) if positions is None else positions:
            target, source = call.inputs[position], fresh[position]
            if hasattr(target, "copy_") and getattr(target, "shape", None) == getattr(source, "shape", None):
                target.copy_(source)
            else:
                raise RuntimeError(f"input {position} of {task.name} cannot be re-randomised in place")
        if call.index in self.sets:
            inputs, _, args = self.sets[call.index]
            self.sets[call.index] = (inputs, input_digest(inputs), args)
        self.prime(call)
        output = call()
        self.after(call, output)
        self._audit(call, output, kind="audit", activation_seed=seed)

    def _audit(self, call: _Call, output: Any, *, kind: str, activation_seed: int | None) -> None:
        """Stage the output in stream order, synchronise, then the checks and the checker's verdict."""
        worker = self.worker
        if not self.audited:
            self.synchronize()
            return
        offsets = worker.stage(self.config, output)
        self.synchronize()
        worker.verify(f"timed call on config {self.config.name}")
        worker.check_staged(self.config, output, offsets)
        digest = input_digest(call.inputs)
        expected = self.sets[call.index][1] if call.index in self.sets and kind != "audit" else None
        if expected is not None and digest != expected:
            raise reject("input_mutation", f"timed call on config {self.config.name}: the inputs were modified by the call")
        self._audits += 1
        worker.handoff(kind, self.index, self.config, call.seed, activation_seed, digest, output, offsets)
