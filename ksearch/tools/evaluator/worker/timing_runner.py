"""``timing.TimingRunner`` on the worker's device: the primitives a timing method's loop calls.

Nothing here runs inside a timed region except the candidate's call itself: a ``_Call`` is built (inputs generated or
taken from the cache, the task's argument object built) before the loop records its start event, and every check
(harness guard, output form, staging for the checker, deferred work, input digest) runs after the end event. Event
records, elapsed times and synchronisations go through references taken before the candidate was imported, so a
candidate that patches them changes nothing here (and is rejected by the guard).

Each timed window is announced to the parent as it happens (``open_window``: a ``go`` message; ``close_window``: a
``timed`` message with the window's samples, right after the synchronisation that ends it), so the samples that
become the score leave this process as they are taken and the parent can hold them against its own clock
(``ksearch.tools.evaluator.parent.ledger``). Audits on fresh values re-randomise the task's activation inputs in place,
through ``.data`` (the tensors keep their identity and their version counter), so the candidate can tell such a call
from any other only by reading the values.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from ksearch.contracts.evaluation import Verdict
from ksearch.contracts.exchange import HandoffReply
from ksearch.tasks.base import TaskConfig
from ksearch.tools.evaluator.shared import tensor_access as ta
from ksearch.tools.evaluator.shared.seeds import AUDIT_BASE, MAX_INPUT_SETS, input_digest, input_set_seed
from ksearch.tools.evaluator.worker.guard import (
    CandidateFailure,
    check_output_form,
    check_plain_tensors,
    clone_inputs,
    format_exception,
    is_compile_error,
    poison,
    reject,
)

ROTATION_SHARE = 0.25
"""Share of the device's memory a loop's rotated input sets may take together (``sets_that_fit``): four sets of a
6.4 GB KernelBench input took 26 GB, beside the outputs, the fresh values and the checker's own."""


class HarnessFault(Exception):
    """The harness cannot do what it must (a task whose declared activation inputs cannot be re-randomised in
    place): the evaluation stops with a harness error, never a verdict on the candidate."""


if TYPE_CHECKING:
    from ksearch.tools.evaluator.worker.protocol import WorkerProtocol


class _Call:
    """``fn(*args)`` on one input set; exceptions of the candidate become its verdict."""

    __slots__ = ("fn", "args", "inputs", "index", "seed", "config")

    def __init__(
        self, fn: Any, args: tuple[Any, ...], inputs: list[Any], index: int, seed: int, config: TaskConfig
    ) -> None:
        self.fn, self.args, self.inputs, self.index, self.seed, self.config = fn, args, inputs, index, seed, config

    def __call__(self) -> Any:
        try:
            return self.fn(*self.args)
        except BaseException as exc:  # noqa: BLE001 - anything the candidate raises is its verdict
            verdict = Verdict.COMPILE_ERROR if is_compile_error(exc) else Verdict.RUNTIME_ERROR
            raise CandidateFailure(verdict, f"on config {self.config.name}:\n{format_exception(exc)}") from None


class HostEvent:
    """A wall-clock stand-in for a CUDA event on the CPU, where nothing is timed except in tests."""

    __slots__ = ("t",)

    def __init__(self, enable_timing: bool = True) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: HostEvent) -> float:
        return (end.t - self.t) * 1e3


class FreshValues(NamedTuple):
    """New activation values for one input set: the seed they were drawn with, (position, tensor) pairs, and the
    digest of the set once they are in place."""

    seed: int
    pairs: list[tuple[int, Any]]
    digest: str


class WorkerTimingRunner:
    """The timing primitives for one benchmark config of one candidate."""

    __slots__ = (
        "worker",
        "fn",
        "config",
        "index",
        "audited",
        "windows",
        "run",
        "_event_cls",
        "_record",
        "_elapsed",
        "_tensor",
        "_wall",
        "_sleep",
        "sets",
        "_flush",
        "_audits",
        "activation",
        "_send",
        "_closed",
    )

    def __init__(
        self,
        worker: WorkerProtocol,
        fn: Any,
        config: TaskConfig,
        index: int,
        *,
        audited: bool = True,
        windows: bool | None = None,
        run: int = 0,
    ) -> None:
        """``audited``: outputs go to the checker; ``windows``: timed windows are announced to the parent (by default
        when audited; compare mode announces without auditing, warm-ups and the yardstick do neither); ``run``: the
        index of this method run within its config (compare mode alternates two candidates' runs)."""
        import torch

        self.worker, self.fn, self.config, self.index = worker, fn, config, index
        self.audited = audited
        self.windows = audited if windows is None else windows
        self.run = run
        self.activation: dict[int, int] = {}
        """Input set index -> the seed its activations were last re-randomised with (audits are judged on it)."""
        self._send = worker.channel.send
        refs = worker.guard.refs if worker.guard else {}
        self._event_cls = refs.get("torch.cuda.Event", (None, None, torch.cuda.Event))[2]
        self._record = refs.get("torch.cuda.Event.record", (None, None, torch.cuda.Event.record))[2]
        self._elapsed = refs.get("torch.cuda.Event.elapsed_time", (None, None, torch.cuda.Event.elapsed_time))[2]
        if not worker.device.startswith("cuda"):  # the CPU times only in tests (KSEARCH_CPU_TIMING): host clocks
            self._event_cls, self._record, self._elapsed = HostEvent, HostEvent.record, HostEvent.elapsed_time
        self._tensor = refs.get("torch.Tensor", (None, None, torch.Tensor))[2]
        self._wall = refs.get("time.perf_counter", (None, None, time.perf_counter))[2]
        self._sleep = refs.get("torch.cuda._sleep", (None, None, getattr(torch.cuda, "_sleep", None)))[2]
        self.sets: dict[int, tuple[list[Any], str, tuple[Any, ...]]] = {}
        self._flush: Any = None
        self._audits = 0
        self._closed: dict[int, int] = {}
        """Run -> timed windows closed so far (null windows apart): each audit's handoff names its window by it."""

    def share_inputs_with(self, other: WorkerTimingRunner) -> None:
        """Use ``other``'s input sets (compare mode: both candidates see identical inputs)."""
        self.sets = other.sets
        self.activation = other.activation

    # -- calls ----------------------------------------------------------------------------------------------------
    def _seed(self, index: int) -> int:
        return input_set_seed(self.config.seed, index)

    def _generate(self, index: int) -> list[Any]:
        return self.worker.task.make_inputs(
            self.config.model_copy(update={"seed": self._seed(index)}), self.worker.device
        )

    def call_on(self, index: int, *, fresh: bool = False, reuse_args: bool = True, clone: bool = False) -> _Call:
        task = self.worker.task
        if fresh:  # a whole new input set, its seed drawn by the checker now (unpredictable in this process)
            reply = self._issued("input")
            seed = reply.seed if reply is not None and reply.seed is not None else self._seed(index)
            handed = self._handed_set(reply)
            if handed is not None:  # made by the checker: the task's generator never ran here on them
                inputs = handed
            else:
                inputs = task.make_inputs(self.config.model_copy(update={"seed": seed}), self.worker.device)
            return _Call(self.fn, task.call_args(inputs, self.config), inputs, index, seed, self.config)
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

    def sets_that_fit(self, wanted: int) -> int:
        """Of ``wanted`` rotated input sets, as many as take at most ``ROTATION_SHARE`` of the device's memory (at
        least one; all of them off a GPU), judged by set 0, made here and kept for the loop. Rotation is there so
        that no call finds its inputs in the L2 cache; inputs that large never are. The device's memory was read
        before the candidate was imported: nothing of its can change the count."""
        total = self.worker.device_bytes
        if total is None:
            return wanted
        nbytes = sum(ta.nbytes(x) for x in self.call_on(0).inputs if ta.is_tensor(x))
        return max(1, min(wanted, int(ROTATION_SHARE * total) // max(nbytes, 1)))

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
            raise CandidateFailure(
                Verdict.RUNTIME_ERROR, f"on config {self.config.name}:\n{format_exception(exc)}"
            ) from None

    def open_window(self) -> None:
        if self.windows:
            self._send('{"op": "go", "config": %d, "run": %d}' % (self.index, self.run))

    def close_window(self, events: list[tuple[Any, Any]]) -> list[float]:
        self._closed[self.run] = self._closed.get(self.run, 0) + 1
        return self._close(events)

    def _close(self, events: list[tuple[Any, Any]]) -> list[float]:
        self.synchronize()
        samples = [self.elapsed(start, end) for start, end in events]
        if self.windows:
            self._send('{"op": "timed", "config": %d, "samples": [%s]}' % (self.index, ", ".join(map(repr, samples))))
        return samples

    def end_run(self) -> None:
        """Announce the end of this method run with the count of its timed windows (compare mode, where no handoff
        names them: ``TimingLedger.ran``)."""
        if self.windows:
            self._send(
                '{"op": "ran", "config": %d, "run": %d, "windows": %d}'
                % (self.index, self.run, self._closed.get(self.run, 0))
            )

    def null_window(self) -> None:
        if not self.windows:
            return
        self.synchronize()
        start, end = self.event(), self.event()
        self._send('{"op": "go", "config": %d, "run": %d, "null": true}' % (self.index, self.run))
        self.record(start)
        self.record(end)
        self._close([(start, end)])

    def flush(self) -> None:
        import torch

        if self._flush is None:
            self._flush = torch.empty(
                self.worker.request.flush_bytes // 4, dtype=torch.int32, device=self.worker.device
            )
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

    def stage(self, call: _Call, output: Any) -> list[int] | None:
        if not self.audited:
            return None
        return self.worker.stage(self.config, output)

    def audit(self, call: _Call, output: Any, staged: Any = None) -> None:
        """Stage the output in stream order (unless already staged), synchronise, then the checks and the checker's
        verdict; the call's set is judged with the activations it was last re-randomised with."""
        worker = self.worker
        if not self.audited:
            self.synchronize()
            return
        offsets = staged if staged is not None else worker.stage(self.config, output)
        self.synchronize()
        worker.verify(f"timed call on config {self.config.name}")
        check_plain_tensors(
            f"timed call on config {self.config.name}", [x for x in call.inputs if ta.is_tensor(x)], "input"
        )
        worker.check_staged(self.config, output, offsets)
        digest = input_digest(call.inputs)
        expected = self.sets[call.index][1] if call.index in self.sets else None
        if expected is not None and digest != expected:
            raise reject(
                "input_mutation", f"timed call on config {self.config.name}: the inputs were modified by the call"
            )
        activation_seed = self.activation.get(call.index)
        kind = "audit" if activation_seed is not None else "bench"
        self._audits += 1
        worker.handoff(
            kind,
            self.index,
            self.config,
            call.seed,
            activation_seed,
            digest,
            output,
            offsets,
            window=self._closed.get(self.run, 0),
        )

    def fresh_values(self, call: _Call) -> FreshValues | None:
        """A fresh activation seed, per declared activation position its new values, and the digest the set will
        have (generated now, outside any window: the digest synchronises); None when the task declares no such
        inputs or nothing is audited. While the checker prepares the audit's expectation the worker waits for it
        anyway: the digest is taken then, off the loop's path (``Worker.settle``'s ``meanwhile``)."""
        if not self.audited:
            return None
        task = self.worker.task
        positions = task.activation_inputs(self.config)
        if positions is not None and not positions:
            return None
        reply = self._issued("activation", input_seed=call.seed)
        seed = reply.seed if reply is not None else None
        preparing = reply is not None and reply.preparing
        if reply is not None and reply.inputs is not None and reply.digest is not None:
            return self._handed_values(call, reply, preparing)
        if seed is None:  # no checker to issue one (direct use): a seed of the audit range
            seed = input_set_seed(self.config.seed, AUDIT_BASE + random.randrange(MAX_INPUT_SETS - AUDIT_BASE))
        fresh = task.make_inputs(self.config.model_copy(update={"seed": seed}), self.worker.device)
        targets = range(len(call.inputs)) if positions is None else positions
        values = []
        for position in targets:
            target, source = call.inputs[position], fresh[position]
            if not _fits_in_place(target, source):
                raise HarnessFault(
                    f"input {position} of {task.name} cannot be re-randomised in place (its shape or dtype changes "
                    "with the seed): the task must declare only value inputs in Task.activation_inputs"
                )
            values.append((position, source))
        after = list(call.inputs)
        for position, source in values:
            after[position] = source
        if preparing:  # the checker computes the audit's expectation meanwhile: none of it may run beside the call
            spin = self.worker.device.startswith("cuda")
            digest = self.worker.settle(spin=spin, meanwhile=lambda: input_digest(after))
        else:
            digest = input_digest(after)
        assert digest is not None
        return FreshValues(seed, values, digest)

    def _issued(self, kind: str, *, input_seed: int | None = None) -> HandoffReply | None:
        """The checker's answer to a seed request for this config's fresh inputs (``input``) or activations
        (``activation``, of the set of ``input_seed``): the seed it drew now, whether it is preparing that audit's
        expectation (then the worker waits for it before the audited call) and, where it could, the inputs it made
        from the seed (``HandoffReply.inputs``); None when nothing is audited (no checker to ask)."""
        if not self.audited or self.worker.staging is None:
            return None
        request = {"op": "seed", "config_index": self.index, "kind": kind, "input_seed": input_seed}
        reply = self.worker.ask(request, spin=self.worker.device.startswith("cuda"))
        if not reply.ok or reply.seed is None:
            raise HarnessFault(f"the checker issued no {kind} seed for config {self.config.name}: {reply.message}")
        return reply

    def _handed_set(self, reply: HandoffReply | None) -> list[Any] | None:
        """A fresh input set the checker made (``HandoffReply.inputs``, every position), or None."""
        if reply is None or reply.inputs is None:
            return None
        received = self.worker.receive_inputs(reply)
        if [position for position, _ in received] != list(range(len(received))):
            raise HarnessFault(f"the checker handed over an incomplete input set for config {self.config.name}")
        return [value for _, value in received]

    def _handed_values(self, call: _Call, reply: HandoffReply, preparing: bool) -> FreshValues:
        """An audit's new activation values as the checker made them, copied out of the staging buffer (they must fit
        the set's tensors in place); with ``preparing``, after the checker has prepared the audit's expectation."""
        assert reply.seed is not None and reply.digest is not None
        values = self.worker.receive_inputs(reply)
        for position, source in values:
            target = call.inputs[position]
            if not _fits_in_place(target, source):
                raise HarnessFault(
                    f"input {position} of {self.worker.task.name} cannot be re-randomised in place (its shape or dtype "
                    "changes with the seed): the task must declare only value inputs in Task.activation_inputs"
                )
        if preparing:  # the checker computes the audit's expectation meanwhile: none of it may run beside the call
            self.worker.settle(spin=self.worker.device.startswith("cuda"))
        return FreshValues(reply.seed, values, reply.digest)

    def rerandomise(self, call: _Call, values: FreshValues) -> None:
        """Copy the new values into the set's activations through ``.data`` (same tensors, same version counter),
        in stream order with no synchronisation; later audits of the set are judged on them."""
        for position, source in values.pairs:
            ta.copy_into(ta.data(call.inputs[position]), source)
        self.activation[call.index] = values.seed
        if call.index in self.sets:
            inputs, _, args = self.sets[call.index]
            self.sets[call.index] = (inputs, values.digest, args)


def _fits_in_place(target: Any, source: Any) -> bool:
    """New values ``source`` can be copied into the input ``target`` (the candidate held it: read through
    ``tensor_access`` only, so nothing it set on the tensor runs)."""
    return (
        ta.is_tensor(target)
        and ta.is_tensor(source)
        and ta.shape(target) == ta.shape(source)
        and ta.dtype(target) == ta.dtype(source)
    )
