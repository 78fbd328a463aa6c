"""The worker's side of its exchange with the checker: an output checked for form and staged in the checker's buffer
in stream order, checked again after a device-wide sync, handed off with a record written by hand; the checker's
verdicts awaited (``settle``), its requests answered, the inputs it made received.

These are methods of ``main.Worker``, defined here and bound in its class body: the guard's references then hold them
both as this module's bindings and as the class's own members, as when they were written in the class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ksearch.contracts.evaluation import Verdict
from ksearch.contracts.exchange import HandoffReply
from ksearch.contracts.work import WorkTrace
from ksearch.tasks.base import TaskConfig
from ksearch.tools.evaluator.shared import tensor_access as ta
from ksearch.tools.evaluator.shared.staging import layout
from ksearch.tools.evaluator.worker.channel import SETTLE_REQUEST, grow_request, work_record
from ksearch.tools.evaluator.worker.guard import CandidateFailure, check_output_form, count_changed, reject
from ksearch.tools.evaluator.worker.protocol import WorkerProtocol

_T = TypeVar("_T")


def stage(self: WorkerProtocol, config: TaskConfig, output: Any) -> list[int] | None:
    """Check the output's form, then copy it into the checker's buffer in stream order (no sync): the offsets.
    What the checker judges is fixed here, right after the call, by type-level reads only (``tensor_access``):
    no method of the output runs, so no code of the candidate's runs between the call and this copy."""
    check_output_form(self.task, self.device, config.name, output)
    if self.staging is None:
        return None
    tensors = list(output) if ta.is_tuple(output) else [output]
    _, need = layout([ta.nbytes(t) for t in tensors])
    if not self.staging.fits(need):
        reply = self.ask(grow_request(need))
        if reply.staging is None:
            raise RuntimeError(f"the checker could not provide {need} bytes of staging memory: {reply.message}")
        self.staging.open(reply.staging)
    return self.staging.stage(tensors)


def check_staged(self: WorkerProtocol, config: TaskConfig, output: Any, offsets: list[int] | None) -> None:
    """After a device-wide sync: the output must still equal the copy staged in stream order right after the call
    (else work was left running on another stream when the call returned)."""
    if offsets is None or self.staging is None:
        return
    tensors = output if ta.is_tuple(output) else (output,)
    for position, (tensor, offset) in enumerate(zip(tensors, offsets, strict=True)):
        staged = self.staging.view(offset, tensor)
        if ta.device(staged) != ta.device(tensor):  # shared host memory (no CUDA IPC here): compare on the device
            staged = ta.to(staged, ta.device(tensor))
        changed = count_changed(tensor, staged)
        if changed:
            raise reject(
                "deferred_work",
                f"config {config.name}: output {position} changed after a device-wide sync ({changed}): work "
                "left running on another stream when the kernel returned (join it to the current stream)",
            )


def handoff(
    self: WorkerProtocol,
    kind: str,
    index: int,
    prepared: TaskConfig,
    input_seed: int,
    activation_seed: int | None,
    digest: str,
    output: Any,
    offsets: list[int] | None,
    *,
    window: int | None = None,
    work: WorkTrace | None = None,
) -> None:
    """Tell the checker where the output is and wait for its answer; a failed check ends the evaluation.
    ``window``: in timing, how many timed windows of the run the harness had closed (``Handoff.window``).
    ``work``: what the call ran (``work_phases``); a ghost replay that raised hands off no output. The record
    (``Handoff``'s fields) is read from the output by type-level calls and written by ``encode_record``: nothing
    of the candidate's decides it."""
    if self.staging is None or (offsets is None and not (work is not None and work.raised)):
        return
    tensors = [] if output is None else list(output) if ta.is_tuple(output) else [output]
    record: dict[str, object] = {
        "op": "handoff",
        "kind": kind,
        "config_index": index,
        "config": prepared.name,
        "prepare_seed": prepared.seed,
        "input_seed": input_seed,
        "activation_seed": activation_seed,
        "digest": digest,
        "shapes": [list(ta.shape(t)) for t in tensors],
        "dtypes": [str(ta.dtype(t)) for t in tensors],
        "strides": [list(ta.stride(t)) for t in tensors],
        "offsets": list(offsets or []),
        "generation": self.staging.handle.generation,
        "window": window,
        "work": work_record(work),
    }
    self._answered(self.ask(record, spin=self.phase == "timing" and self.device.startswith("cuda")))


def settle(self: WorkerProtocol, *, spin: bool = False, meanwhile: Callable[[], _T] | None = None) -> _T | None:
    """Wait for the checker's verdict on every correctness output (it judges each while the next config runs) and
    for whatever it does after its last answer (an audit's expectation, prepared while the worker made the same
    inputs). ``spin``: in timing on a GPU, as the handoffs wait. ``meanwhile``: the worker's own work, done
    after the request is sent and before the answer is read (the answer is read even if it fails); its result
    is returned."""
    if self.staging is None:
        return meanwhile() if meanwhile is not None else None
    self._quiet_device()
    self.channel.request(SETTLE_REQUEST)
    try:
        result = meanwhile() if meanwhile is not None else None
    finally:
        reply = self.channel.answer(spin=spin)
    self._answered(reply)
    return result


def ask(self: WorkerProtocol, fields: dict[str, object], *, spin: bool = False) -> HandoffReply:
    """A request to the checker and its answer, the device idle while the worker waits (``_quiet_device``)."""
    self._quiet_device()
    return self.channel.ask(fields, spin=spin)


def _quiet_device(self: WorkerProtocol) -> None:
    """In timing, synchronise before a request whose wait the parent credits as the checker's time: no work of
    this process is left on the device while the worker waits (issue 59: a credited wait must not hide work).
    Nothing of the candidate's runs between this and the request (the harness calls no method of its objects)."""
    if self.phase == "timing":
        self.synchronize()


def receive_inputs(self: WorkerProtocol, reply: HandoffReply) -> list[tuple[int, Any]]:
    """The inputs the checker made and left in the staging buffer (``HandoffReply.inputs``), as (position, value)
    pairs: each tensor copied into a new tensor of this process's, in stream order; plain values as they are."""
    from ksearch.tools.evaluator.shared.staging import dtype_of

    assert self.staging is not None and reply.inputs is not None
    if reply.staging is not None and reply.staging.generation != self.staging.handle.generation:
        self.staging.open(reply.staging)
    received: list[tuple[int, Any]] = []
    for item in reply.inputs:
        if item.offset is None:
            received.append((item.position, item.value))
            continue
        kind, size = dtype_of(item.dtype), tuple(item.shape)
        tensor = ta.empty(size, kind, self.device)
        ta.copy_into(tensor, ta.typed_view(self.staging.buffer, item.offset, kind, size))
        received.append((item.position, tensor))
    return received


def _answered(reply: HandoffReply) -> None:
    if not reply.ok:  # the message names the config whose output failed
        raise CandidateFailure(Verdict.INCORRECT, f"the checker rejected an output: {reply.message}")
