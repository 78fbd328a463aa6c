"""The worker's correctness phase: every test config called once on fresh inputs under the guard, the inputs checked
unchanged, each output staged and handed to the checker (``handoffs``).

These are methods of ``main.Worker``, defined here and bound in its class body: the guard's references then hold them
both as this module's bindings and as the class's own members, as when they were written in the class.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from ksearch.contracts.evaluation import Verdict
from ksearch.tasks.base import TaskConfig
from ksearch.tools.evaluator.shared import tensor_access as ta
from ksearch.tools.evaluator.shared.seeds import input_digest
from ksearch.tools.evaluator.worker.guard import (
    CandidateFailure,
    check_plain_tensors,
    clone_inputs,
    count_changed,
    format_exception,
    is_compile_error,
    poison,
    reject,
)
from ksearch.tools.evaluator.worker.protocol import WorkerProtocol
from ksearch.tools.evaluator.worker.tuning import quick_tuning
from ksearch.tools.evaluator.worker.work_phases import call_observed, finish_observing
from ksearch.tools.evaluator.worker.worker_process import release_cached_memory


def check_correctness(self: WorkerProtocol, module: Any) -> None:
    configs = self.task.test_configs(self.device)
    self.configs_total = len(configs)
    # an autotuner's choice on a test shape decides only which config's output is checked (``tuning``)
    with quick_tuning() if self.request.quick_test_tuning else contextlib.nullcontext():
        for index, config in enumerate(configs):
            salted = self.salted(config)
            self.check_config(self.prepare(module, salted), salted, index)
            self.configs_passed += 1
    self.settle()
    self.mark("correctness")
    finish_observing(self, module)


def check_config(self: WorkerProtocol, fn: Callable[..., Any], config: TaskConfig, index: int = 0) -> None:
    """One guarded call on fresh inputs: inputs unchanged, output staged and judged by the checker."""
    inputs = self.task.make_inputs(config, self.device)
    args = self.task.call_args(inputs, config)
    digest = input_digest(inputs)
    buffers = self.task.output_buffers(config, inputs) or []
    snapshot = clone_inputs(inputs)
    self.poison_free_memory(inputs)
    poison(buffers)
    self.verify(f"before the call on config {config.name}")
    try:
        output, trace = call_observed(self, fn, args)
        staged = self.stage(config, output)
        self.synchronize()
    except CandidateFailure:
        raise
    except BaseException as exc:  # noqa: BLE001 - anything the candidate raises is its verdict
        verdict = Verdict.COMPILE_ERROR if is_compile_error(exc) else Verdict.RUNTIME_ERROR
        raise CandidateFailure(verdict, f"on config {config.name}:\n{format_exception(exc)}") from None
    self.verify(f"config {config.name}")
    check_plain_tensors(f"config {config.name}", [x for x in inputs if ta.is_tensor(x)], "input")
    self.check_staged(config, output, staged)
    self.check_inputs_unchanged(config, inputs, snapshot, buffers)
    del inputs, args, snapshot, buffers  # the output is staged: nothing else of this call is read again
    if self.request.low_memory:
        release_cached_memory(self.device)  # the checker judges while this process waits
    self.handoff("test", index, config, config.seed, None, digest, output, staged, work=trace)


def check_inputs_unchanged(
    self: WorkerProtocol, config: TaskConfig, inputs: list[Any], snapshot: list[Any], buffers: list[Any] = ()
) -> None:
    skip = {id(b) for b in buffers}
    for position, (now, before) in enumerate(zip(inputs, snapshot, strict=True)):
        if id(now) in skip:
            continue
        changed = count_changed(now, before)
        if changed:
            raise reject(
                "input_mutation", f"config {config.name}: input {position} was modified by the call ({changed})"
            )


def poison_free_memory(self: WorkerProtocol, inputs: list[Any]) -> None:
    """On a GPU, fill and free a block about the size of the inputs with NaN bytes, so an output taken from the
    caching allocator without being written reads as NaN instead of a stale correct answer."""
    if not self.device.startswith("cuda"):
        return
    import torch

    nbytes = sum(ta.nbytes(x) for x in inputs if ta.is_tensor(x))
    nbytes = min(max(nbytes, 1 << 20), 1 << 30)
    block = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
    block.fill_(0xFF)
    del block
