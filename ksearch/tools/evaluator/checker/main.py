"""The trusted checker: computes the reference in its own process and judges the candidate's outputs.

Started by an evaluator session as ``python -P -m ksearch.tools.evaluator.checker.main --device D`` and kept for the
session's evaluations (one per device). It never imports the candidate. For each output a worker hands off, it
regenerates the inputs from the claimed seeds (which must be the evaluation's: the salt is the session's for
correctness configs and the evaluation's for timed ones), checks that their digest equals the one the worker
reported, computes ``task.expected`` on those pristine inputs (kept in a byte-bounded cache, so a session computes
each correctness reference once) and compares the staged output with ``task.check``. Outputs are read from the
staging buffer, which this process owns (``staging``), while the worker waits for the answer; a correctness output is
copied out of it before the answer and judged while the worker runs its next config (its failure is the answer to the
worker's next message, and the worker settles before it starts timing).

Memory: on a GPU with less than ``LOW_MEMORY_BELOW`` free for the evaluation (or when the parent asks), an
evaluation runs in low-memory mode: every output is judged before the answer, in the staging buffer itself, nothing
is cached and the allocator's blocks are given back after each judgment, while the worker drops its own before it
hands off. The checker and the worker then never hold a large config's tensors at once, and an evaluation of
TriMul's largest tests needs about what GPU MODE's single-process harness needs.

Channels: commands arrive on stdin (``CheckerCommand`` lines, from the parent only); answers leave on the original
stdout, which the checker moves away from ``sys.stdout`` first so that library prints cannot corrupt it. The
candidate never holds either. The verdict of an evaluation is this process's record of what it checked: a config
the worker never handed off counts as missing, whatever the worker claims.

The protocol both sides share is in ``ksearch.contracts.exchange`` (records) and ``seeds`` (salted seeds, digests).
"""

from __future__ import annotations

import argparse
import copy
import os
import secrets
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from ksearch import settings
from ksearch.contracts.evaluation import Mismatch, Rejection, Verdict
from ksearch.contracts.exchange import (
    CheckerCommand,
    CheckResult,
    Handoff,
    HandoffReply,
    StagedInput,
    StagingHandle,
)
from ksearch.tools.evaluator.checker.checker_records import (
    CheckFailed,
    EvaluationRecord,
    InputClaim,
    PreparedAudit,
    check_layout,
    checker_environment,
)
from ksearch.tools.evaluator.checker.reference_cache import ReferenceCache, nbytes_of
from ksearch.tools.evaluator.checker.work_checks import judge_ghost_output, judge_traced, largest_input
from ksearch.tools.evaluator.shared.profiling import Accumulating
from ksearch.tools.evaluator.shared.seeds import (
    AUDIT_BASE,
    FRESH_SET_BASE,
    MAX_INPUT_SETS,
    input_digest,
    input_set_index,
    input_set_seed,
    salted_seed,
)
from ksearch.tools.evaluator.shared.staging import StagingOwner, layout

if TYPE_CHECKING:
    from ksearch.tasks.base import ExpectedSample

CACHE_FRACTION = 0.2
"""Share of the GPU's memory the reference cache may hold."""
LOW_MEMORY_BELOW = 64 << 30
"""Device memory free for an evaluation (what no other process holds) under which it runs in low-memory mode: a
TriMul evaluation pipelined with its reference cache peaks at about 35 GB in the checker and 20-28 GB in the worker."""
CPU_CACHE_BYTES = 1 << 30
SEED_DRAWS = 1_000
"""Draws of a fresh seed before the checker concludes a config's range is nearly spent (a worker asking again and
again: a loop of the harness asks for a few hundred of the 40,000 or 59,000)."""
WHOLE_AUDIT_ODDS = 8
"""Audits judged at sampled positions (``Task.expected_sample``) still check some timed outputs whole: a config's
first audit always, each later one with probability 1 / 8, drawn here after the handoff. A kernel that replays an
output is wrong nearly everywhere and any sample finds it; one whose repeat calls take a cheaper path wrong at a few
elements (a lossy precision, a rare race) is found only by a whole check, and cannot tell which calls get one."""
TEST_KINDS = ("test", "ghost")
"""Handoffs of a correctness config's inputs (the session's salt, input set 0): a test and the ghost replay."""
HANDED_KEPT = 4
"""Input sets made for the worker kept for their handoffs (a loop uses each before it asks for the next)."""
_T = TypeVar("_T")


class Checker:
    """Judges handed-off outputs against the reference; one instance serves a session's evaluations."""

    def __init__(self, device: str) -> None:
        import torch

        if device.startswith("cuda"):
            index = torch.device(device).index or 0
            torch.cuda.set_device(index)
            device = f"cuda:{index}"
            budget = int(torch.cuda.get_device_properties(index).total_memory * CACHE_FRACTION)
        else:
            budget = CPU_CACHE_BYTES
        self.device = device
        self.staging = StagingOwner(device, prefer_ipc=settings.STAGING.raw() != "shm")
        self.cache = ReferenceCache(budget)
        self.tasks: dict[str, Any] = {}
        self.current: EvaluationRecord | None = None
        self.largest_output: dict[str, int] = {}
        self.input_bytes: dict[tuple[str, str], int] = {}
        """(task, benchmark config) -> bytes of its inputs (deterministic per config; kept across evaluations)."""
        self.input_elements: dict[tuple[str, str], int] = {}
        """(task, config) -> elements of its largest input, as regenerated here (``work_checks.judge_traced``)."""
        self.input_costs: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
        """(task, benchmark config) -> the milliseconds its ``make_inputs`` and its input digest took here, each time
        (kept across evaluations): the parent's allowance for the same work in the worker between timed windows."""
        self.sampled_audits = True
        """This evaluation's choice (``begin``): judge an audit's output at sampled positions where the task can."""
        self.pending: tuple[EvaluationRecord, Handoff, Any, list[Any]] | None = None
        self.prepared_audits = True
        """This evaluation's choice (``begin``): prepare an audit's expectation when its activation seed is issued."""
        self.to_prepare: tuple[EvaluationRecord, InputClaim] | None = None
        self.prepared: PreparedAudit | None = None
        self.low_memory = False
        """This evaluation's mode (``begin``): judge before answering, cache nothing, give memory back after each."""
        self.kept: tuple[tuple[str, str, int], dict[int, Any]] | None = None
        self.handed: dict[tuple[int, int, int | None], tuple[list[Any], str]] = {}
        """(benchmark config, input seed, activation seed) -> the inputs this checker made for a fresh seed and handed
        to the worker through the staging buffer, and their digest: the handoff of the call on them is judged on
        these, not on inputs made again (``_regenerated``). At most ``HANDED_KEPT``; none in low-memory mode."""
        """(task, config, input seed) and the inputs that config's audits do not re-randomise, of the set last audited:
        each audit of the set then makes only its new activations (``_regenerated``)."""

    # -- commands ------------------------------------------------------------------------------------------------
    def handle(self, command: CheckerCommand) -> dict[str, Any]:
        self.judge_pending()
        if command.op == "begin":
            return self.begin(command)
        if command.op == "staging":
            if command.shm and self.staging.use_ipc:
                self.staging.use_ipc = False
                self.staging.release()
                self.staging.handle = None
            handle = self.staging.ensure(command.min_bytes)
            if self.current is not None:
                name = self.current.task.name
                self.largest_output[name] = max(self.largest_output.get(name, 0), command.min_bytes)
            return HandoffReply(ok=True, staging=handle).model_dump()
        if command.op == "handoff":
            assert command.handoff is not None
            return self.check(command.handoff).model_dump()
        if command.op == "settle":
            return self.settle().model_dump()
        if command.op == "finish":
            return self.finish(command.timed, correctness=command.correctness).model_dump()
        if command.op == "seed":
            return self.issue_seed(command.config_index, command.kind, command.input_seed).model_dump()
        raise ValueError(f"unknown command {command.op!r}")

    def issue_seed(self, config_index: int, kind: str, input_seed: int | None = None) -> HandoffReply:
        """A fresh seed for a timed call's inputs of benchmark config ``config_index``: a whole input set
        (``input``) or new activation values (``activation``), drawn now with the system's randomness and recorded,
        so the checker judges an output on such inputs only when it issued their seed. New activations for the set
        of ``input_seed``: the audit's expectation is prepared right after this answer (``prepare_audit``)."""
        state = self.current
        if state is None:
            return HandoffReply(ok=False, message="no evaluation in progress")
        configs = state.task.benchmark_configs(self.device)
        if not 0 <= config_index < len(configs):
            return HandoffReply(ok=False, message=f"no benchmark config {config_index}")
        low, high = (FRESH_SET_BASE, AUDIT_BASE) if kind == "input" else (AUDIT_BASE, MAX_INPUT_SETS)
        base = salted_seed(configs[config_index].seed, state.bench_salt)
        for _ in range(SEED_DRAWS):  # never the same seed twice for a config: each fresh call has inputs of its own
            seed = input_set_seed(base, low + secrets.randbelow(high - low))
            if (config_index, seed) not in state.issued:
                break
        else:  # nearly every seed of the range issued: no loop of the harness asks for a fraction of that many
            message = (
                f"{configs[config_index].name}: the worker asked for {kind} seeds until nearly all "
                f"{high - low} were issued; the harness's loops ask for a few hundred at most"
            )
            state.failure = state.failure or CheckFailed(Verdict.REJECTED, message, rule="forged_record")
            return HandoffReply(ok=False, message=message)
        state.issued.add((config_index, seed))
        if kind == "activation" and input_seed is None:  # no set named: nothing to make or prepare
            return HandoffReply(ok=True, seed=seed)
        claim = (
            InputClaim("audit", config_index, base, input_seed, seed)
            if kind == "activation"
            else InputClaim("bench", config_index, base, seed)
        )
        handed, digest, handle = self._hand_over(state, configs[config_index], claim)
        preparing = kind == "activation" and self.prepared_audits and not self.low_memory
        if preparing:
            self.to_prepare = (state, claim)
        return HandoffReply(ok=True, seed=seed, preparing=preparing, inputs=handed, digest=digest, staging=handle)

    def _hand_over(
        self, state: EvaluationRecord, config: Any, claim: InputClaim
    ) -> tuple[list[StagedInput] | None, str | None, StagingHandle | None]:
        """Make the inputs ``claim`` names here and leave the ones the worker needs (an audit's activations, or a
        fresh set whole) in the staging buffer, so the task's generator never runs in the candidate's process for
        an audit (issue 59: a wrapper of it showed a kernel each audit's values before the call). Kept for the
        handoff's judgment. (None, None, None) when an input cannot be handed over (neither a contiguous tensor
        nor a plain value): the worker then makes the set itself."""
        import torch

        task = state.task
        inputs, digest = self._retrying_out_of_memory(lambda: self._regenerated(task, config, claim))
        if claim.activation_seed is not None:
            positions = task.activation_inputs(config)
            wanted = range(len(inputs)) if positions is None else positions
        else:
            wanted = range(len(inputs))
        tensors: list[tuple[int, Any]] = []
        items: list[StagedInput] = []
        for position in wanted:
            value = inputs[position]
            if type(value) is torch.Tensor and value.is_contiguous():
                tensors.append((position, value))
            elif value is None or type(value) in (int, float, str):
                items.append(StagedInput(position=position, value=value))
            else:
                return None, None, None
        offsets, total = layout([t.numel() * t.element_size() for _, t in tensors])
        handle = self.staging.ensure(total)
        name = task.name
        self.largest_output[name] = max(self.largest_output.get(name, 0), total)
        for (position, tensor), offset in zip(tensors, offsets, strict=True):
            size = tensor.numel() * tensor.element_size()
            target = self.staging.buffer[offset : offset + size].view(tensor.dtype).view(tensor.shape)
            target.copy_(tensor)
            items.append(
                StagedInput(position=position, offset=offset, shape=list(tensor.shape), dtype=str(tensor.dtype))
            )
        self._sync()
        if not self.low_memory:
            self.handed[(claim.config_index, claim.input_seed, claim.activation_seed)] = (inputs, digest)
            while len(self.handed) > HANDED_KEPT:
                self.handed.pop(next(iter(self.handed)))
        return sorted(items, key=lambda item: item.position), digest, handle

    def prepare_audit(self) -> None:
        """Compute the expectation of the audit whose activation seed was just issued (its inputs from the seeds, their
        digest, the reference), while the worker makes the same inputs: the worker then waits for this (``settle``)
        before the audited call, so nothing of it runs beside the candidate, and the audit's handoff is judged without
        the work. Whole only where it must be (a config's first audit, or sampling off): the draw of a later whole
        audit is made at the handoff, after the output is staged, since the worker could time this preparation (a
        whole reference costs ~40x a sample) and be honest only on the audits drawn whole (a red team, 2026-11-30).
        A claim this evaluation could not make, or any failure here, leaves nothing prepared: the handoff is then
        judged from scratch, as before, and its own checks decide."""
        if self.to_prepare is None:
            return
        state, claim = self.to_prepare
        self.to_prepare = None
        self.prepared = None
        if state is not self.current or state.failure is not None:
            return
        task = state.task
        configs = task.benchmark_configs(self.device)
        index = input_set_index(claim.prepare_seed, claim.input_seed)
        if index is None or (index >= FRESH_SET_BASE and (claim.config_index, claim.input_seed) not in state.issued):
            return
        config = configs[claim.config_index]
        whole = self._whole_required(state, claim.config_index)
        try:
            digest, expected, sample, whole = self._retrying_out_of_memory(
                lambda: self._audit_expectation(task, config, claim, whole=whole)
            )
            self._sync()
        except Exception:  # noqa: BLE001 - judged from scratch at the handoff, where a failure is recorded
            self._release_memory(collect=False)
            return
        self.prepared = PreparedAudit(state, claim, digest, expected, sample, whole)

    def begin(self, command: CheckerCommand) -> dict[str, Any]:
        from ksearch.tasks.registry import resolve_task

        task = self.tasks.get(command.task)
        if task is None:
            task = self.tasks[command.task] = resolve_task(command.task)
        self.current = EvaluationRecord(
            task=task,
            salt=command.salt,
            bench_salt=command.bench_salt,
            work_policy=task.work_policy() if command.observe_work else None,
        )
        self.sampled_audits = command.sampled_audits
        self.prepared_audits = command.prepared_audits
        self.to_prepare = self.prepared = self.kept = None
        self.handed = {}
        self.low_memory = command.low_memory or self._available_bytes() < LOW_MEMORY_BELOW
        if self.low_memory:
            self.cache.clear()
            self._release_memory()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)
        handle = self.staging.ensure(self.largest_output.get(task.name, 0))
        return HandoffReply(ok=True, staging=handle, low_memory=self.low_memory).model_dump()

    def _available_bytes(self) -> int:
        """Device memory this evaluation may use: what is free plus what this checker holds (on the CPU: unbounded)."""
        if not self.device.startswith("cuda"):
            return 1 << 62
        import torch

        free, _ = torch.cuda.mem_get_info(self.device)
        return free + torch.cuda.memory_reserved(self.device)

    def check(self, handoff: Handoff) -> HandoffReply:
        """Judge one handed-off output. A correctness output is only taken (copied into this process's memory) before
        the answer, and judged right after it, while the worker runs the next config: the answer then means "received,
        and every earlier output passed"; the worker learns of a failure at its next handoff or when it settles. Timed
        and audited outputs are judged before the answer, so nothing of the checker's runs while the worker times."""
        refused = self.settle()
        state = self.current
        if not refused.ok or state is None:
            return refused
        deferred = handoff.kind == "test" and not self.low_memory
        with self._recording(state, handoff):
            config, outputs = self._take(state, handoff, private=deferred)
            if deferred:
                self._sync()
                self.pending = (state, handoff, config, outputs)
            else:
                self._judge(state, handoff, config, outputs)
                del outputs
        if self.low_memory:
            self._release_memory(collect=False)  # per timed repeat in ``gpumode`` a full collection would add up
        return self.settle()

    def judge_pending(self) -> None:
        """Judge the correctness output taken at the last handoff, if any (its failure is recorded, not raised)."""
        if self.pending is None:
            return
        state, handoff, config, outputs = self.pending
        self.pending = None
        with self._recording(state, handoff):
            self._judge(state, handoff, config, outputs)

    def settle(self) -> HandoffReply:
        """The verdict on every output handed off so far (the worker asks before it starts timing)."""
        state = self.current
        if state is None:
            return HandoffReply(ok=False, message="no evaluation in progress")
        if state.failure is not None:
            return HandoffReply(ok=False, message=state.failure.error)
        return HandoffReply(ok=True)

    @contextmanager
    def _recording(self, state: EvaluationRecord, handoff: Handoff) -> Iterator[None]:
        """Record a failed check as the evaluation's failure. Running out of device memory (even after the retry with
        the cache dropped: another process holds the GPU) is the harness's failure, which the evaluator retries; any
        other exception stays a crash of the evaluation, so that no output a candidate crafts can stop a run."""
        import torch

        try:
            yield
        except CheckFailed as failure:
            state.failure = failure
        except torch.OutOfMemoryError as exc:
            state.failure = CheckFailed(
                Verdict.CRASHED,
                f"checker ran out of device memory on {handoff.config} (is "
                f"another process using this GPU?): {str(exc)[:300]}",
                harness=True,
            )
        except Exception as exc:  # noqa: BLE001 - reported as a crash with the exception
            state.failure = CheckFailed(
                Verdict.CRASHED, f"checker failed on {handoff.config}: {type(exc).__name__}: {exc}"
            )

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)

    def finish(self, timed: bool, *, correctness: bool = True) -> CheckResult:
        state = self.current
        self.current = None
        self.to_prepare = self.prepared = self.kept = None
        self.handed = {}
        self._release_memory()
        if state is None:
            return CheckResult(verdict=Verdict.CRASHED, error="the checker saw no evaluation begin")
        tests = state.task.test_configs(self.device)
        benches = state.task.benchmark_configs(self.device)
        passed = len(state.tests_passed)
        if state.failure is not None:
            f = state.failure
            result = self._result(state, f.verdict, passed, len(tests), f.error, f.mismatch, f.rejection)
            if f.harness:
                return result.model_copy(update={"harness_error": f.error})
            return result.model_copy(update={"failed_check": True})
        for index, config in enumerate(tests if correctness else []):
            if index not in state.tests_passed:
                message = f"{config.name}: no output was produced for this config"
                return self._result(
                    state, Verdict.INCORRECT, passed, len(tests), message, Mismatch(config=config.name, message=message)
                )
        if timed:
            for index, config in enumerate(benches):
                if not state.bench_checked.get(index):
                    message = f"{config.name}: no timed output of this config was checked"
                    return self._result(
                        state,
                        Verdict.INCORRECT,
                        passed,
                        len(tests),
                        message,
                        Mismatch(config=config.name, message=message),
                    )
        return self._result(state, Verdict.PASSED, passed, len(tests))

    def _result(
        self,
        state: EvaluationRecord,
        verdict: Verdict,
        passed: int,
        total: int,
        error: str = "",
        mismatch: Mismatch | None = None,
        rejection: Rejection | None = None,
    ) -> CheckResult:
        return CheckResult(
            verdict=verdict,
            configs_passed=passed,
            configs_total=total,
            outputs_checked=state.outputs_checked,
            mismatch=mismatch,
            rejection=rejection,
            error=error,
            bench_input_bytes=dict(state.bench_input_bytes),
            bench_generation_ms=dict(state.bench_generation_ms),
            bench_digest_ms=dict(state.bench_digest_ms),
            environment={
                **checker_environment(self.device, peak=True),
                "memory_mode": "low" if self.low_memory else "normal",
                "audits_prepared": f"{state.audits_prepared} of {state.audits}",
            },
        )

    # -- one output ----------------------------------------------------------------------------------------------
    def _take(self, state: EvaluationRecord, h: Handoff, *, private: bool) -> tuple[Any, list[Any]]:
        """The config the record names and its staged outputs (views, or with ``private`` copies of them), after
        checking that the record is one this evaluation can make."""
        task = state.task
        tested = h.kind in TEST_KINDS
        configs = task.test_configs(self.device) if tested else task.benchmark_configs(self.device)
        if not 0 <= h.config_index < len(configs) or configs[h.config_index].name != h.config:
            raise CheckFailed(
                Verdict.REJECTED, f"an output was handed off for an unknown config {h.config!r}", rule="forged_record"
            )
        config = configs[h.config_index]
        salt = state.salt if tested else state.bench_salt
        base = salted_seed(config.seed, salt)
        index = input_set_index(base, h.input_seed)
        audit = input_set_index(base, h.activation_seed) if h.activation_seed is not None else None
        fresh_set = index is not None and index >= FRESH_SET_BASE
        valid = (
            h.prepare_seed == base
            and index is not None
            and (not tested or index == 0)
            and (h.kind != "ghost" or h.config_index == 0)
            and (h.kind == "audit") == (h.activation_seed is not None)
            and (audit is None or (audit >= AUDIT_BASE and (h.config_index, h.activation_seed) in state.issued))
            and (tested or not fresh_set or (h.config_index, h.input_seed) in state.issued)
        )
        if not valid:
            raise CheckFailed(
                Verdict.REJECTED,
                f"{config.name}: an output was handed off for seeds the evaluation did not use",
                rule="forged_record",
            )
        if h.kind == "ghost" and h.work is not None and h.work.raised:
            return config, []  # the ghost replay raised: there is no output to read
        return config, self._retrying_out_of_memory(lambda: self._staged(config.name, h, private=private))

    def _retrying_out_of_memory(self, work: Callable[[], _T]) -> _T:
        """``work()``, once more after an out-of-memory error with the reference cache dropped and the allocator's
        free blocks given back (the GPU is shared with the candidate's worker, and with other sessions on a machine
        running several searches)."""
        import torch

        try:
            return work()
        except torch.OutOfMemoryError:
            self.cache.clear()
            self.kept = None
            self._release_memory()
            return work()

    def _release_memory(self, *, collect: bool = True) -> None:
        """Give the allocator's free blocks back to the device (cached references stay): between evaluations the
        checker holds only what it keeps. ``collect``: first free what only reference cycles still hold."""
        if self.device.startswith("cuda"):
            import gc

            import torch

            if collect:
                gc.collect()
            torch.cuda.empty_cache()

    def _judge(self, state: EvaluationRecord, h: Handoff, config: Any, outputs: list[Any]) -> None:
        """Regenerate the inputs from the claimed seeds, compare their digest, and check the outputs against the
        reference."""
        import torch

        task = state.task
        claim = InputClaim.of(h)
        sample: ExpectedSample | None = None
        if h.kind == "ghost":
            judge_ghost_output(self._reference, state, h, config, outputs)
            return
        if h.kind == "audit":
            prepared, self.prepared = self.prepared, None
            state.audits += 1
            matched = prepared if prepared and prepared.record is state and prepared.claim == claim else None
            # drawn here, after the output is staged (never while preparing: ``prepare_audit``)
            whole = (
                self._whole_required(state, h.config_index)
                or (matched is not None and matched.whole)
                or secrets.randbelow(WHOLE_AUDIT_ODDS) == 0
            )
            if matched is not None and matched.whole == whole:
                digest, expected, sample = matched.digest, matched.expected, matched.sample
                state.audits_prepared += 1
            else:
                digest, expected, sample, whole = self._retrying_out_of_memory(
                    lambda: self._audit_expectation(task, config, claim, whole=whole)
                )
            del prepared, matched
            if whole:
                state.whole_audits.add(h.config_index)
        else:
            digest, expected = self._reference(task, config, claim)
        if digest != h.digest:
            raise CheckFailed(
                Verdict.REJECTED,
                f"{config.name}: the inputs the candidate was given (digest {h.digest[:12]}) differ from the inputs "
                f"regenerated from the same seed (digest {digest[:12]}): either the inputs were modified before they "
                "were recorded or the task's input generator is not deterministic",
                rule="input_digest",
            )
        if h.kind == "test":
            judge_traced(state, h, self.input_elements.get((task.name, config.name)))
        prepare_config = config.model_copy(update={"seed": h.prepare_seed})
        if sample is not None:  # the layout is the whole output's: a tensor of its shape and dtype, with no data
            expected = torch.empty(sample.shape, dtype=sample.values.dtype, device="meta")
        expecteds = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        check_layout(task, prepare_config, config.name, outputs, expecteds, expected, h)
        if not task.allow_nonfinite and sample is None:  # a sampled audit: its positions only (``check``'s form),
            # since sweeping the whole output cost up to 2.3 ms of each audit (an H200, b6); whole audits still sweep it
            for position, tensor in enumerate(outputs):
                if (tensor.is_floating_point() or tensor.is_complex()) and not bool(torch.isfinite(tensor).all()):
                    bad = torch.nonzero(~torch.isfinite(tensor))
                    where = [int(i) for i in bad[0]] if bad.numel() else []
                    message = (
                        f"{config.name}: {int((~torch.isfinite(tensor)).sum())} non-finite output values "
                        f"(nan/inf) in output {position}, first at {where}"
                    )
                    raise CheckFailed(
                        Verdict.INCORRECT,
                        message,
                        mismatch=Mismatch(config=config.name, worst_index=where, message=message),
                    )
        candidate = tuple(outputs) if task.output_is_tuple or len(outputs) != 1 else outputs[0]
        if sample is not None:
            mismatch = task.check_sample(prepare_config, candidate, sample)
        else:
            mismatch = task.check(prepare_config, candidate, expected)
        state.outputs_checked += 1
        if mismatch is not None:
            label = {"bench": "timed output", "audit": "timed output on re-randomised inputs"}
            if h.kind in label:
                mismatch = mismatch.model_copy(update={"message": f"{label[h.kind]}: {mismatch.message}"})
            raise CheckFailed(Verdict.INCORRECT, mismatch.message, mismatch=mismatch)
        if h.kind == "test":
            state.tests_passed.add(h.config_index)
        else:
            state.bench_checked[h.config_index] = state.bench_checked.get(h.config_index, 0) + 1
            state.bench_input_bytes[h.config_index] = self.input_bytes.get((task.name, config.name), 0)
            costs = self.input_costs.get((task.name, config.name))
            if costs and costs[0]:
                state.bench_generation_ms[h.config_index] = statistics.median(costs[0])
                state.bench_digest_ms[h.config_index] = statistics.median(costs[1])

    def _reference(self, task: Any, config: Any, claim: InputClaim) -> tuple[str, Any]:
        key = (
            task.name,
            claim.kind in TEST_KINDS,
            config.name,
            claim.prepare_seed,
            claim.input_seed,
            claim.activation_seed,
        )
        found = self.cache.get(key)
        if found is not None:
            return found
        return self._retrying_out_of_memory(lambda: self._compute_reference(task, config, claim, key))

    def _compute_reference(self, task: Any, config: Any, claim: InputClaim, key: tuple[Any, ...]) -> tuple[str, Any]:
        inputs, digest = self._regenerated(task, config, claim)
        prepare_config = config.model_copy(update={"seed": claim.prepare_seed})
        expected = task.expected(prepare_config, inputs)  # after the digest; nothing reads the inputs again
        del inputs
        if not self.low_memory and claim.kind != "audit":  # an audit's activations are its own: never asked again
            self.cache.put(key, digest, expected)
        return digest, expected

    def _audit_expectation(
        self, task: Any, config: Any, claim: InputClaim, *, whole: bool
    ) -> tuple[str, Any, ExpectedSample | None, bool]:
        """An audit's input digest and expectation: with ``whole`` (a config's first audit, one in
        ``WHOLE_AUDIT_ODDS`` after it, or sampling off) the whole reference, else the reference at sampled positions
        where the task offers them (else the whole one); the last item says whether it is whole."""
        if not whole:
            digest, expected, sample = self._audit_reference(task, config, claim)
            return digest, expected, sample, sample is None
        digest, expected = self._compute_reference(task, config, claim, ())
        return digest, expected, None, True

    def _whole_required(self, state: EvaluationRecord, config_index: int) -> bool:
        """Whether this config's next audit is checked whole whatever the draw: its first, or sampling off."""
        return not self.sampled_audits or config_index not in state.whole_audits

    def _audit_reference(self, task: Any, config: Any, claim: InputClaim) -> tuple[str, Any, ExpectedSample | None]:
        """An audit's input digest and, where the task offers one, the reference at positions drawn here with the
        system's randomness (``Task.expected_sample``), else the whole reference (then the sample is None). Never
        cached: each audit has activations of its own."""
        import torch

        inputs, digest = self._regenerated(task, config, claim)
        prepare_config = config.model_copy(update={"seed": claim.prepare_seed})
        generator = torch.Generator(device=self.device).manual_seed(secrets.randbits(63))
        sample = None if task.output_is_tuple else task.expected_sample(prepare_config, inputs, generator)
        expected = task.expected(prepare_config, inputs) if sample is None else None
        return digest, expected, sample

    def _regenerated(self, task: Any, config: Any, claim: InputClaim) -> tuple[list[Any], str]:
        """The inputs ``claim`` names (its set's seed, and an audit's activation seed) made here, and their digest;
        for a timed output, what making and digesting them cost (the parent's allowance for the worker's same work)."""
        if claim.kind != "test":
            handed = self.handed.pop((claim.config_index, claim.input_seed, claim.activation_seed), None)
            if handed is not None:  # made when the seed was issued (``_hand_over``)
                return handed
        started = time.perf_counter()
        if claim.activation_seed is None:
            inputs = task.make_inputs(config.model_copy(update={"seed": claim.input_seed}), self.device)
        else:  # the audit's activations, and the set's other inputs (made once per set)
            inputs = task.make_inputs(config.model_copy(update={"seed": claim.activation_seed}), self.device)
            positions = task.activation_inputs(config)
            if positions is not None:
                for position, value in self._kept_inputs(task, config, claim.input_seed, positions).items():
                    inputs[position] = copy.deepcopy(value)  # a reference may write it (tensors are cloned)
        self._sync()
        generated = time.perf_counter()
        self.input_bytes[(task.name, config.name)] = nbytes_of(inputs)
        self.input_elements[(task.name, config.name)] = largest_input(inputs)
        digested = time.perf_counter()
        digest = input_digest(inputs)
        if claim.kind not in TEST_KINDS:  # the worker does the same between timed windows: timed here, trusted
            costs = self.input_costs.setdefault((task.name, config.name), ([], []))
            costs[0].append((generated - started) * 1e3)
            costs[1].append((time.perf_counter() - digested) * 1e3)
        return inputs, digest

    def _kept_inputs(self, task: Any, config: Any, input_seed: int, positions: Sequence[int]) -> dict[int, Any]:
        """The inputs of the set of ``input_seed`` that audits do not re-randomise, by position: made here once per
        set (every audit of ``gpumode-benchmark``'s loop re-randomises the one set it reuses, whose other inputs, a
        TriMul's weights, stay), not kept in low-memory mode."""
        key = (task.name, config.name, input_seed)
        if self.kept is not None and self.kept[0] == key:
            return self.kept[1]
        made = task.make_inputs(config.model_copy(update={"seed": input_seed}), self.device)
        active = set(positions)
        kept = {position: value for position, value in enumerate(made) if position not in active}
        del made
        self.kept = None if self.low_memory else (key, kept)
        return kept

    def _staged(self, name: str, h: Handoff, *, private: bool = False) -> list[Any]:
        if h.generation != self.staging.generation:
            raise CheckFailed(
                Verdict.REJECTED,
                f"{name}: the output was staged in a buffer that is no longer the checker's",
                rule="forged_record",
            )
        if not (len(h.shapes) == len(h.dtypes) == len(h.offsets)) or not h.shapes:
            raise CheckFailed(Verdict.REJECTED, f"{name}: a malformed output record", rule="forged_record")
        try:
            return [
                self.staging.tensor(o, s, d, private=private)
                for o, s, d in zip(h.offsets, h.shapes, h.dtypes, strict=True)
            ]
        except ValueError as exc:
            raise CheckFailed(Verdict.REJECTED, f"{name}: {exc}", rule="forged_record") from None


def serve(device: str, commands: Any, answers: Any) -> None:
    """Answer commands until ``shutdown`` or end of input. A failing command is answered, not fatal."""
    checker = Checker(device)
    profile = Accumulating("checker")
    answers.write('{"op": "ready"}\n')
    answers.flush()
    for line in commands:
        if not line.strip():
            continue
        try:
            command = CheckerCommand.model_validate_json(line)
            if command.op == "shutdown":
                break
            with profile.around():
                reply = checker.handle(command)
            if command.op == "finish":
                profile.dump()
        except Exception:  # noqa: BLE001 - the parent turns this into a harness failure with the traceback
            reply = CheckResult(
                verdict=Verdict.CRASHED, error="checker failed:\n" + traceback.format_exc()[-3000:]
            ).model_dump()
        answers.write(_json(reply) + "\n")
        answers.flush()
        with profile.around():
            checker.judge_pending()  # while the worker runs its next config
            checker.prepare_audit()  # while the worker makes the audit's inputs
    checker.staging.release()


def _json(value: dict[str, Any]) -> str:
    import json

    return json.dumps(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    answer_fd = os.dup(1)
    os.dup2(2, 1)  # anything printed by torch or a task goes to stderr; ``answer_fd`` carries only answers
    sys.stdout = sys.stderr
    with os.fdopen(answer_fd, "w", encoding="utf-8") as answers:
        serve(args.device, sys.stdin, answers)
    return 0


if __name__ == "__main__":
    from ksearch.tools.evaluator.shared.sandbox import die_with_parent

    parent = settings.PARENT_PID.number()
    if parent is not None:
        die_with_parent(parent)
    status = main()
    sys.stderr.flush()
    os._exit(status)
