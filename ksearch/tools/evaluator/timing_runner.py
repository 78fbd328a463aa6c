"""``timing.TimingRunner`` on the worker's device: the primitives a timing method's loop calls, each wrapped in the
worker's checks (harness guard, output form, deferred work, input mutation) outside the timed region."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ksearch.contracts.evaluation import Verdict
from ksearch.tasks.base import TaskConfig
from ksearch.tools import timing as timing_mod
from ksearch.tools.evaluator.guard import CandidateFailure, clone_inputs, format_exception, is_compile_error, poison, reject
from ksearch.tools.evaluator.seeds import input_digest

if TYPE_CHECKING:
    from ksearch.tools.evaluator.worker import Worker


class WorkerTimingRunner:
    """``timing.TimingRunner`` on the worker's device, with the worker's checks around every call."""

    def __init__(self, worker: Worker, fn: Callable[[list[Any]], Any], config: TaskConfig, index: int, *, keep: bool = True) -> None:
        import torch

        self.worker, self.fn, self.config, self.index = worker, fn, config, index
        self.keep = keep and bool(worker.request.outputs_dir)
        refs = worker.guard.refs if worker.guard else {}
        self._event_cls = refs.get("torch.cuda.Event", (None, None, torch.cuda.Event))[2]
        self._wall = refs.get("time.perf_counter", (None, None, time.perf_counter))[2]
        self.sets: dict[int, tuple[list[Any], str]] = {}
        self.shared: dict[int, tuple[list[Any], str]] | None = None
        self.digests: dict[int, str] = {}
        self._flush: Any = None
        self._rng = random.Random(int.from_bytes(os.urandom(8), "little"))
        self.seen: dict[int, int] = {}
        self.pending: dict[int, tuple[list[Any], list[list[int]]]] = {}
        self.max_kept = 100

    def _generate(self, index: int) -> list[Any]:
        inputs = self.worker.task.make_inputs(self._input_config(index), self.worker.device)
        self.digests[index] = input_digest(inputs)
        return inputs

    def _input_config(self, index: int) -> TaskConfig:
        return self.config.model_copy(update={"seed": self.config.seed + timing_mod.SEED_STRIDE * index})

    def inputs(self, index: int) -> list[Any]:
        source = self.shared if self.shared is not None else self.sets
        if index not in source:
            inputs = self._generate(index)
            source[index] = (inputs, self.digests[index])
        inputs, self.digests[index] = source[index]
        return inputs

    def fresh_inputs(self, index: int) -> list[Any]:
        return self._generate(index)

    def clone(self, inputs: list[Any]) -> list[Any]:
        return clone_inputs(inputs)

    def call(self, inputs: list[Any]) -> Any:
        buffers = self.worker.task.output_buffers(self.config, inputs) or []
        poison(buffers)
        try:
            return self.fn(inputs)
        except BaseException as exc:  # noqa: BLE001 - anything the candidate raises is its verdict
            verdict = Verdict.COMPILE_ERROR if is_compile_error(exc) else Verdict.RUNTIME_ERROR
            raise CandidateFailure(verdict, f"on config {self.config.name}:\n{format_exception(exc)}") from None

    def flush(self) -> None:
        import torch

        if self._flush is None:
            self._flush = torch.empty(self.worker.request.flush_bytes // 4, dtype=torch.int32, device=self.worker.device)
        self._flush.zero_()

    def synchronize(self) -> None:
        try:
            self.worker.synchronize()
        except BaseException as exc:  # noqa: BLE001 - an asynchronous device error of the candidate's kernel
            raise CandidateFailure(Verdict.RUNTIME_ERROR, f"on config {self.config.name}:\n{format_exception(exc)}") from None

    def event(self) -> Any:
        return self._event_cls(enable_timing=True)

    def wall(self) -> float:
        return self._wall()

    def want(self, index: int) -> bool:
        if not self.keep:
            return False
        self.seen[index] = self.seen.get(index, 0) + 1
        if index in self.pending:
            return self._rng.random() < 1.0 / self.seen[index]
        if len(self.pending) < self.max_kept:
            return True
        return self._rng.random() < self.max_kept / len(self.seen)

    def early(self, output: Any) -> Any:
        return self.worker.early_copy(output)

    def glance(self, output: Any) -> None:
        self.worker.verify(f"timed call on config {self.config.name}")
        self.worker.check_output_form(self.config, output)

    def after(self, index: int, inputs: list[Any], output: Any, early: Any, keep: bool) -> None:
        """The guard and output form were checked by ``glance``, which every timing loop calls first."""
        where = f"timed call on config {self.config.name}"
        if early is not None:
            self.worker.check_deferred(self.config, output, early)
        if input_digest(inputs) != self.digests.get(index):
            raise reject("input_mutation", f"{where}: the inputs were modified by the call")
        if not keep:
            return
        tensors = list(output) if isinstance(output, tuple) else [output]
        if index not in self.pending and len(self.pending) >= self.max_kept:
            del self.pending[self._rng.choice(sorted(self.pending))]
        # On a GPU the stream-ordered copy equals the output (the deferred-work check just compared them). Copies are
        # written to disk after the timing loop, so no file I/O stalls the GPU between samples.
        copies = early if early is not None else [t.detach().clone() for t in tensors]
        self.pending[index] = (copies, [list(t.stride()) for t in tensors])
        size = sum(t.numel() * t.element_size() for t in copies)
        self.max_kept = max(1, min(100, self.worker.request.recheck_bytes // max(size, 1)))

    def finish(self) -> None:
        """Write the kept outputs for the checker (after the timing loop of this config)."""
        for index, (tensors, stride) in sorted(self.pending.items()):
            output = tuple(tensors) if self.worker.task.output_is_tuple else tensors[0]
            file = f"bench-{self.index}-{index}.pt"
            self.worker.save_output(
                self.index, self.config, self._input_config(index), self.digests[index], output, file, stride
            )
        self.pending.clear()
