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
import os
import secrets
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ksearch import settings
from ksearch.contracts.evaluation import Mismatch, Rejection, Verdict
from ksearch.contracts.exchange import (
    CheckerCommand,
    CheckResult,
    Handoff,
    HandoffReply,
)
from ksearch.tools.evaluator.checker.checker_records import (
    CheckFailed,
    EvaluationRecord,
    InputClaim,
    PreparedAudit,
    checker_environment,
)
from ksearch.tools.evaluator.checker.judgment import claimed_config, judge_outputs, staged_outputs
from ksearch.tools.evaluator.checker.reference_cache import ReferenceCache
from ksearch.tools.evaluator.checker.references import References
from ksearch.tools.evaluator.checker.work_checks import judge_ghost_output
from ksearch.tools.evaluator.shared.profiling import Accumulating
from ksearch.tools.evaluator.shared.seeds import (
    AUDIT_BASE,
    FRESH_SET_BASE,
    MAX_INPUT_SETS,
    input_set_index,
    input_set_seed,
    salted_seed,
)
from ksearch.tools.evaluator.shared.staging import StagingOwner

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
        self.references = References(device, budget)
        self.tasks: dict[str, Any] = {}
        self.current: EvaluationRecord | None = None
        self.largest_output: dict[str, int] = {}
        self.sampled_audits = True
        """This evaluation's choice (``begin``): judge an audit's output at sampled positions where the task can."""
        self.pending: tuple[EvaluationRecord, Handoff, Any, list[Any]] | None = None
        self.prepared_audits = True
        """This evaluation's choice (``begin``): prepare an audit's expectation when its activation seed is issued."""
        self.to_prepare: tuple[EvaluationRecord, InputClaim] | None = None
        self.prepared: PreparedAudit | None = None

    @property
    def low_memory(self) -> bool:
        """This evaluation's mode (``begin``): judge before answering, cache nothing, give memory back after each."""
        return self.references.low_memory

    @property
    def cache(self) -> ReferenceCache:
        """The references computed for correctness configs, kept across the session's evaluations."""
        return self.references.cache

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
            if command.renew:
                handle = self.staging.renew_header()
            if self.current is not None:
                name = self.current.task.name
                self.largest_output[name] = max(self.largest_output.get(name, 0), command.min_bytes)
            return HandoffReply(ok=True, staging=handle).model_dump()
        if command.op == "handoff":
            assert command.handoff is not None
            return self.check(command.handoff).model_dump()
        if command.op == "settle":
            reply = self.settle()
            self._give_back_after_correctness()
            return reply.model_dump()
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
        staged = self.references.hand_over(state.task, configs[config_index], claim, self.staging)
        handed, digest, handle = (staged.inputs, staged.digest, staged.handle) if staged else (None, None, None)
        if staged is not None:
            name = state.task.name
            self.largest_output[name] = max(self.largest_output.get(name, 0), staged.nbytes)
        preparing = kind == "activation" and self.prepared_audits and not self.low_memory
        if preparing:
            self.to_prepare = (state, claim)
        return HandoffReply(ok=True, seed=seed, preparing=preparing, inputs=handed, digest=digest, staging=handle)

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
            digest, expected, sample, whole = self.references.retrying_out_of_memory(
                lambda: self.references.audit_expectation(task, config, claim, whole=whole)
            )
            self.references.sync()
        except Exception:  # noqa: BLE001 - judged from scratch at the handoff, where a failure is recorded
            self.references.release_memory(collect=False)
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
        self.to_prepare = self.prepared = None
        self.references.forget_inputs()
        self.references.low_memory = command.low_memory or self._available_bytes() < LOW_MEMORY_BELOW
        if self.low_memory:
            self.references.cache.clear()
            self.references.release_memory()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)
        self.staging.ensure(self.largest_output.get(task.name, 0))
        handle = self.staging.renew_header()  # an earlier candidate may have written over it
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
                self.references.sync()
                self.pending = (state, handoff, config, outputs)
            else:
                self._judge(state, handoff, config, outputs)
                del outputs
        if self.low_memory:
            # per timed repeat in ``gpumode`` a full collection would add up
            self.references.release_memory(collect=False)
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

    def _give_back_after_correctness(self) -> None:
        """Once every correctness output is judged (the worker settles before it times), give the allocator's free
        blocks back, once per evaluation: the copies of outputs and the references of the correctness phase took
        four inputs' worth of a 6.4 GB KernelBench problem, while timing needs three (the staging buffer, one input
        set and its reference), and the worker's rotated input sets need the rest of the GPU."""
        state = self.current
        if state is None or state.memory_given_back or state.failure is not None:
            return
        if len(state.tests_passed) < len(state.task.test_configs(self.device)):
            return
        state.memory_given_back = True
        self.references.release_memory(collect=False)

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

    def finish(self, timed: bool, *, correctness: bool = True) -> CheckResult:
        state = self.current
        self.current = None
        self.to_prepare = self.prepared = None
        self.references.forget_inputs()
        self.references.release_memory()
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
        config = claimed_config(state, h, self.device)
        if h.kind == "ghost" and h.work is not None and h.work.raised:
            return config, []  # the ghost replay raised: there is no output to read
        return config, self.references.retrying_out_of_memory(
            lambda: staged_outputs(self.staging, config.name, h, private=private)
        )

    def _judge(self, state: EvaluationRecord, h: Handoff, config: Any, outputs: list[Any]) -> None:
        """Regenerate the inputs from the claimed seeds, compare their digest, and check the outputs against the
        reference (``judgment.judge_outputs``); an audit's expectation prepared or made here, whole or sampled."""
        task = state.task
        claim = InputClaim.of(h)
        sample: ExpectedSample | None = None
        if h.kind == "ghost":
            judge_ghost_output(self.references.reference, state, h, config, outputs)
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
                digest, expected, sample, whole = self.references.retrying_out_of_memory(
                    lambda: self.references.audit_expectation(task, config, claim, whole=whole)
                )
            del prepared, matched
            if whole:
                state.whole_audits.add(h.config_index)
        else:
            digest, expected = self.references.reference(task, config, claim)
        judge_outputs(state, h, config, outputs, digest, expected, sample, self.references)

    def _whole_required(self, state: EvaluationRecord, config_index: int) -> bool:
        """Whether this config's next audit is checked whole whatever the draw: its first, or sampling off."""
        return not self.sampled_audits or config_index not in state.whole_audits


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
