"""learn_skills (after prune): what the cycles that just ended teach the skill library.

A cycle whose action applied a skill becomes a trial in that skill's verification log (its status and effect
estimate follow from the log); a cycle whose child is significantly faster than its parent (paired re-measurement,
on a GPU) is lifted into a new candidate skill by the ``skill_lifter`` role. Writes go to the live library, never
to the run's frozen snapshot, so this run's prompts do not change under it. Idempotent (see
``ksearch.agent.skill_use``): a re-run after a crash records and pays for nothing twice.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from ksearch.agent.context import SearchContext
from ksearch.agent.skill_use import learn_from_cycles
from ksearch.agent.state import SearchState


def learn_skills(state: SearchState, runtime: Runtime[SearchContext]) -> dict:
    learn_from_cycles(
        runtime.context,
        state.world_model,
        state.evidence,
        lambda event, data: runtime.stream_writer({"event": event, **data}),
    )
    return {}
