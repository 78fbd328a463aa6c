"""Which solutions get hardware counters, and collecting them within the run's budget.

Targets, in order: each cycle that just ended, its best attempt; then the solutions the planner named in its last
script (``EditScript.counters_for``). Each is collected once per evaluation (a stored report, even a failed one,
is not paid for again; one skipped for the budget is tried again when asked), on a leased GPU, through the
context's ``counters`` (the executor's trusted collector). Nothing here decides a verdict or a promotion: a collector
that fails, even by raising, is stored as ``failed`` with its reason, and the run goes on.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from ksearch.agent.context import SearchContext
from ksearch.agent.counters_text import counters_request_hint, counters_text
from ksearch.agent.state import SearchState
from ksearch.contracts.counters import CounterReport, CounterStatus
from ksearch.store.counters import find_counters, record_counters, run_spend
from ksearch.tools.counters.budget import Spend, choose_shapes

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class CounterTarget:
    evaluation_id: str
    candidate_id: str
    why: str


def counter_targets(state: SearchState) -> list[CounterTarget]:
    """Each ended cycle's best, then each node the planner asked about that has a solution, each evaluation once."""
    targets: list[CounterTarget] = []
    for result in state.evidence:
        if result.passed and result.best_evaluation_id and result.best_candidate_id:
            targets.append(
                CounterTarget(result.best_evaluation_id, result.best_candidate_id, f"cycle {result.cycle_id}'s best")
            )
    for node_id in state.counter_requests:
        node = state.world_model.nodes.get(node_id)
        solution = node.solution if node is not None else None
        if solution is not None and solution.evaluation_id:
            targets.append(CounterTarget(solution.evaluation_id, solution.candidate_id, f"asked for node {node_id}"))
    seen: set[str] = set()
    return [t for t in targets if not (t.evaluation_id in seen or seen.add(t.evaluation_id))]


def wanted(ctx: SearchContext) -> bool:
    """Whether this run collects counters here: asked for, on a GPU, by a process that holds the device."""
    return ctx.config.counters and ctx.config.device != "cpu" and ctx.counters is not None and not ctx.prompts_only


def collect(ctx: SearchContext, target: CounterTarget) -> CounterReport | None:
    """The target's counters, collected now and stored, or the stored ones; None when its evaluation was not timed
    (nothing to profile) or this run collects none."""
    if not wanted(ctx):
        return None
    stored = find_counters(ctx.store, target.evaluation_id)
    if stored is not None and stored.status != CounterStatus.SKIPPED:
        return stored
    evaluation = ctx.store.get_evaluation(target.evaluation_id)
    if not (evaluation.passed and evaluation.timed and evaluation.timings):
        return None
    spend = Spend(*run_spend(ctx.store, ctx.run_id))
    if not spend.allows():
        report = CounterReport(status=CounterStatus.SKIPPED, detail=spend.describe())
    else:
        shapes = choose_shapes(evaluation.timings, ctx.config.counter_shapes)
        candidate = ctx.store.get_candidate(target.candidate_id)
        assert ctx.counters is not None
        with ctx.device_lease() as device:
            try:
                report = ctx.counters(ctx.eval_request(candidate, device), shapes)
            except Exception as exc:  # noqa: BLE001 - counters are diagnostics: the run goes on, the fault is kept
                why = f"the executor's counters collector failed: {type(exc).__name__}: {exc}"[:400]
                report = CounterReport(status=CounterStatus.FAILED, detail=why)
        if report.collected:
            report = report.model_copy(update={"device": evaluation.device})  # the GPU's name, not "cuda:0"
    record_counters(ctx.store, target.evaluation_id, ctx.run_id, report)
    log.info(
        "counters.collected",
        run_id=ctx.run_id,
        evaluation_id=target.evaluation_id,
        why=target.why,
        status=report.status.value,
        wall_s=report.wall_s,
        detail=report.detail,  # the whole reason (every containment tried): the prompts carry only the status
    )
    return report


def planner_counters_view(state: SearchState, ctx: SearchContext) -> str:
    """For the planner: the counters of the solutions it asked for in its last script, and how to ask ('' when this
    run collects none)."""
    if not wanted(ctx):
        return ""
    blocks = []
    for node_id in state.counter_requests:
        node = state.world_model.nodes.get(node_id)
        solution = node.solution if node is not None else None
        if solution is None:
            blocks.append(f"## Counters asked for node {node_id}: it has no solution to profile")
            continue
        try:
            evaluation = ctx.store.get_evaluation(solution.evaluation_id)
        except KeyError:
            continue
        text = counters_text(evaluation.counters) or "Hardware counters: none (only a passed, timed kernel is profiled)"
        blocks.append(f"## Counters asked for node {node_id} ({evaluation.summary()})\n{text}")
    blocks.append(counters_request_hint())
    return "\n\n".join(blocks)
