"""The checker's part in judging where a candidate's work happens (issue 60), as functions of the checker: a test
output's trace against the task's ``WorkPolicy`` (``work_judged.judge_trace``, with the input size this process
measured on the inputs it regenerated), and the ghost replay's output against the reference
(``work_judged.judge_ghost``). Either failure ends the evaluation as ``rejected`` with the rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ksearch.contracts.evaluation import Verdict
from ksearch.contracts.exchange import Handoff
from ksearch.tools.evaluator.checker.checker_records import CheckFailed, EvaluationRecord, InputClaim
from ksearch.tools.evaluator.checker.work_judged import judge_ghost, judge_trace

Reference = Callable[[Any, Any, InputClaim], tuple[str, Any]]
"""The checker's reference for (task, config, claim): the inputs' digest and the expected output (cached)."""


def largest_input(inputs: list[Any]) -> int:
    """Elements of the largest tensor among ``inputs`` (0 when there is none)."""
    import torch

    return max((x.numel() for x in inputs if isinstance(x, torch.Tensor)), default=0)


def judge_traced(state: EvaluationRecord, h: Handoff, elements: int | None) -> None:
    """A test output's trace, where the policy traces: missing, tampered or showing PyTorch doing the work fails."""
    policy = state.work_policy
    if policy is None or not policy.trace:
        return
    if h.work is None or h.work.ghost:
        raise CheckFailed(
            Verdict.REJECTED, f"{h.config}: a traced call was handed off without its trace", rule="forged_record"
        )
    if elements is None:
        raise CheckFailed(Verdict.CRASHED, f"{h.config}: the checker never made this config's inputs", harness=True)
    verdict = judge_trace(h.work, elements, policy)
    if verdict is not None:
        rule, evidence = verdict
        raise CheckFailed(Verdict.REJECTED, f"{h.config}: {evidence}", rule=rule)


def judge_ghost_output(
    reference: Reference, state: EvaluationRecord, h: Handoff, config: Any, outputs: list[Any]
) -> None:
    """The ghost replay: its output (when it gave one) must not match the reference of the same inputs."""
    work = h.work
    if state.work_policy is None or not state.work_policy.ghost or work is None or not work.ghost:
        raise CheckFailed(Verdict.REJECTED, f"{h.config}: an unexpected ghost record", rule="forged_record")
    matches = False
    if not work.raised:
        task = state.task
        digest, expected = reference(task, config, InputClaim.of(h))
        if digest != h.digest:
            raise CheckFailed(
                Verdict.REJECTED, f"{h.config}: the ghost replay's inputs are not the config's", rule="input_digest"
            )
        candidate = tuple(outputs) if task.output_is_tuple or len(outputs) != 1 else outputs[0]
        prepare_config = config.model_copy(update={"seed": h.prepare_seed})
        try:
            matches = task.check(prepare_config, candidate, expected) is None
        except Exception:  # noqa: BLE001 - an output the check cannot even read is not a right one
            matches = False
    verdict = judge_ghost(work, matches)
    if verdict is not None:
        rule, evidence = verdict
        raise CheckFailed(Verdict.REJECTED, f"{h.config}: {evidence}", rule=rule)
    state.ghost_judged = True


__all__ = ["judge_ghost_output", "judge_traced", "largest_input"]
