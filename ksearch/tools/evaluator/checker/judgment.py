"""The trusted checker's judgment of one handed-off output: that its record names seeds this evaluation made, its
staged tensors as the record describes them, and the outputs against the reference (digest of the inputs, layout,
finite values, the task's check), with what a passed timed output tells the parent's ledger."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from ksearch.contracts.evaluation import Mismatch, Verdict
from ksearch.contracts.exchange import Handoff
from ksearch.tools.evaluator.checker.checker_records import TEST_KINDS, CheckFailed, EvaluationRecord, check_layout
from ksearch.tools.evaluator.checker.work_checks import judge_traced
from ksearch.tools.evaluator.shared.seeds import AUDIT_BASE, FRESH_SET_BASE, input_set_index, salted_seed

if TYPE_CHECKING:
    from ksearch.tasks.base import ExpectedSample
    from ksearch.tools.evaluator.checker.references import References
    from ksearch.tools.evaluator.shared.staging import StagingOwner


def claimed_config(state: EvaluationRecord, h: Handoff, device: str) -> Any:
    """The config the record names, after checking that the record is one this evaluation can make (its config, its
    seeds: the session's or the evaluation's salt, and fresh seeds only where this checker issued them)."""
    task = state.task
    tested = h.kind in TEST_KINDS
    configs = task.test_configs(device) if tested else task.benchmark_configs(device)
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
    return config


def staged_outputs(staging: StagingOwner, name: str, h: Handoff, *, private: bool = False) -> list[Any]:
    """The outputs the record describes in the staging buffer (views, or with ``private`` copies of them)."""
    if h.generation != staging.generation:
        raise CheckFailed(
            Verdict.REJECTED,
            f"{name}: the output was staged in a buffer that is no longer the checker's",
            rule="forged_record",
        )
    if not (len(h.shapes) == len(h.dtypes) == len(h.offsets)) or not h.shapes:
        raise CheckFailed(Verdict.REJECTED, f"{name}: a malformed output record", rule="forged_record")
    try:
        return [staging.tensor(o, s, d, private=private) for o, s, d in zip(h.offsets, h.shapes, h.dtypes, strict=True)]
    except ValueError as exc:
        raise CheckFailed(Verdict.REJECTED, f"{name}: {exc}", rule="forged_record") from None


def judge_outputs(
    state: EvaluationRecord,
    h: Handoff,
    config: Any,
    outputs: list[Any],
    digest: str,
    expected: Any,
    sample: ExpectedSample | None,
    references: References,
) -> None:
    """Judge ``outputs`` against the reference ``expected`` (or, for a sampled audit, ``sample``) computed on inputs
    whose digest is ``digest``; a passed output is recorded in ``state``. Raises ``CheckFailed``."""
    import torch

    task = state.task
    if digest != h.digest:
        raise CheckFailed(
            Verdict.REJECTED,
            f"{config.name}: the inputs the candidate was given (digest {h.digest[:12]}) differ from the inputs "
            f"regenerated from the same seed (digest {digest[:12]}): either the inputs were modified before they "
            "were recorded or the task's input generator is not deterministic",
            rule="input_digest",
        )
    if h.kind == "test":
        judge_traced(state, h, references.input_elements.get((task.name, config.name)))
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
        state.bench_input_bytes[h.config_index] = references.input_bytes.get((task.name, config.name), 0)
        costs = references.input_costs.get((task.name, config.name))
        if costs and costs[0]:
            state.bench_generation_ms[h.config_index] = statistics.median(costs[0])
            state.bench_digest_ms[h.config_index] = statistics.median(costs[1])
