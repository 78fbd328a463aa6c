"""setup: mark the run as running and snapshot the starting tree (the seed, if any, is already on the root)."""

from __future__ import annotations

import structlog
from langgraph.runtime import Runtime

from ksearch.agent.context import SearchContext
from ksearch.agent.state import SearchState

log = structlog.get_logger(__name__)


def setup(state: SearchState, runtime: Runtime[SearchContext]) -> dict:
    ctx = runtime.context
    ctx.store.update_run(ctx.run_id, status="running")
    ctx.store.record_snapshot(ctx.run_id, state.step, "setup", state.world_model.model_dump_json())
    log.info("run.setup", run_id=ctx.run_id, task=ctx.config.task, device=ctx.config.device)
    return {}
