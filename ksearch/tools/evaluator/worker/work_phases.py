"""The worker's part in judging where a candidate's work happens (issue 60): what the task's ``WorkPolicy`` asks the
worker to do, as functions of the worker (``worker_modes`` style), with the hooks and the tracer of
``work_observed``.

- ``start_observing``: before the guard takes its references and before the candidate is imported, install the
  launch hooks (when the task has a policy and the request does not exempt the harness's own baselines);
- ``call_observed``: one correctness call, traced when the policy says so; the trace goes with the output's
  handoff and the checker judges it (``work_judged.judge_trace``);
- ``ghost_replay``: after every correctness verdict, the first test config once more with every custom launch a
  no-op, handed off as ``ghost``: the checker requires its output not to match (``work_judged.judge_ghost``);
  ``finish_observing`` runs it and then takes the hooks out again, so a timed launch runs Triton's own path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ksearch.contracts.evaluation import Verdict
from ksearch.contracts.work import WorkTrace
from ksearch.tasks.base import WorkPolicy
from ksearch.tools.evaluator.shared.seeds import input_digest
from ksearch.tools.evaluator.worker import work_observed
from ksearch.tools.evaluator.worker.guard import CandidateFailure

if TYPE_CHECKING:
    from ksearch.tools.evaluator.worker.protocol import WorkerProtocol

GHOST = "ghost"


def start_observing(worker: WorkerProtocol) -> WorkPolicy | None:
    """The task's policy for this evaluation (None: nothing observed), its hooks installed."""
    policy = worker.task.work_policy() if worker.request.observe_work else None
    if policy is not None:
        work_observed.LaunchHooks.install()
    return policy


def call_observed(
    worker: WorkerProtocol, fn: Callable[..., Any], args: tuple[Any, ...]
) -> tuple[Any, WorkTrace | None]:
    """``fn(*args)`` and, when the policy traces, its trace (exceptions are the candidate's: they propagate)."""
    policy = worker.work_policy
    if policy is None or not policy.trace:
        return fn(*args), None
    return work_observed.traced(lambda: fn(*args))


def finish_observing(worker: WorkerProtocol, module: Any) -> None:
    """After the correctness verdicts: the ghost replay, then the hooks removed, so nothing of this module runs in
    a timed call."""
    if worker.work_policy is None:
        return
    ghost_replay(worker, module)
    work_observed.LaunchHooks.uninstall()


def ghost_replay(worker: WorkerProtocol, module: Any) -> None:
    """The first test config called once more with every custom launch skipped; its output (or that it raised) is
    handed to the checker, whose answer ends the evaluation if the output still matches."""
    policy = worker.work_policy
    if policy is None or not policy.ghost:
        return
    worker.enter(GHOST)
    config = worker.salted(worker.task.test_configs(worker.device)[0])
    fn = worker.prepare(module, config)
    inputs = worker.task.make_inputs(config, worker.device)
    args = worker.task.call_args(inputs, config)
    digest = input_digest(inputs)
    worker.verify(f"before the ghost replay on config {config.name}")
    output, trace = work_observed.ghost(lambda: fn(*args))
    worker.verify(f"the ghost replay on config {config.name}")
    staged = None
    if output is not None:
        try:
            staged = worker.stage(config, output)
            worker.synchronize()
        except CandidateFailure as failure:
            if failure.verdict != Verdict.INCORRECT:
                raise  # a lazy output is refused wherever it comes from
            # an output of the wrong form without the launches: not a right one
            trace = trace.model_copy(update={"raised": f"output form: {failure.error}"[:500]})
            output, staged = None, None
    worker.handoff(GHOST, 0, config, config.seed, None, digest, output, staged, work=trace)
    worker.settle()
    worker.mark(GHOST)


__all__ = ["GHOST", "call_observed", "finish_observing", "ghost_replay", "start_observing"]
