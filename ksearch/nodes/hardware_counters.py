"""hardware_counters (no LLM): Nsight Compute's counters of each cycle that just ended (its best) and of the solutions
the planner asked about, collected on a leased GPU before the next plan (``ksearch.agent.counters_collect``).

Idempotent by construction: a report is stored per evaluation and looked up first, so a node re-run after a crash
collects nothing twice. A collection that fails, or is skipped for the run's budget, is stored with its reason.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from ksearch.agent.context import SearchContext
from ksearch.agent.counters_collect import collect, counter_targets, wanted
from ksearch.agent.state import SearchState


def hardware_counters(state: SearchState, runtime: Runtime[SearchContext]) -> dict:
    ctx = runtime.context
    if state.done_reason or not wanted(ctx):
        return {}
    for target in counter_targets(state):
        report = collect(ctx, target)
        if report is not None:
            runtime.stream_writer(
                {"event": "counters", "why": target.why, "status": report.status.value, "wall_s": report.wall_s}
            )
    return {}
