"""Every graph node announces itself: ``node.start`` and ``node.end`` log events, and a stop check at the boundary.

The events (node name, run, step or cycle, duration, outcome) tell a user where a run is and where it spent its
time, and give crash tests deterministic points to kill at. The stop check is how Ctrl-C and SIGTERM end a run
cleanly: the node in progress (an LLM call, an evaluation) finishes and is recorded, and the next node does not
start, so nothing paid for is lost and the run resumes from that boundary.
"""

from __future__ import annotations

import inspect
import time
import typing
from collections.abc import Callable
from typing import Any

import structlog
from langgraph.runtime import Runtime

from ksearch.agent.context import SearchContext
from ksearch.errors import RunInterrupted

log = structlog.get_logger(__name__)


def traced(name: str, node: Callable[..., Any]) -> Callable[..., Any]:
    """``node`` wrapped for the graph: stop check, then ``node.start``, the node, ``node.end`` (also on errors)."""
    takes_runtime = "runtime" in inspect.signature(node).parameters

    def run(state: Any, runtime: Runtime[SearchContext]) -> Any:
        ctx = runtime.context
        where = _where(state)
        if ctx.stop_reason is not None:
            log.info("node.stopped", node=name, run_id=ctx.run_id, reason=ctx.stop_reason, **where)
            raise RunInterrupted(
                f"run {ctx.run_id} stopped by {ctx.stop_reason} before {name}; everything it had paid for is stored",
                signal_name=ctx.stop_reason,
                hint=f"continue with: ksearch resume {ctx.run_id}",
            )
        log.info("node.start", node=name, run_id=ctx.run_id, **where)
        started = time.monotonic()
        try:
            result = node(state, runtime) if takes_runtime else node(state)
        except BaseException as exc:
            log.info(
                "node.end",
                node=name,
                run_id=ctx.run_id,
                outcome=type(exc).__name__,
                seconds=round(time.monotonic() - started, 3),
                **where,
            )
            raise
        log.info(
            "node.end",
            node=name,
            run_id=ctx.run_id,
            outcome="ok",
            seconds=round(time.monotonic() - started, 3),
            **where,
        )
        return result

    run.__name__ = run.__qualname__ = name
    run.__doc__ = node.__doc__
    returns = typing.get_type_hints(node).get("return")
    if returns is not None:  # LangGraph reads a Command[Literal[...]] return type to know where a node may go
        run.__annotations__ = {**run.__annotations__, "return": returns}
    return run


def _where(state: Any) -> dict[str, Any]:
    """The step of an outer node, or the cycle and attempt of a cycle node."""
    cycle_id = getattr(state, "cycle_id", None)
    if cycle_id is not None:
        return {"cycle_id": cycle_id, "attempt": getattr(state, "attempt", None)}
    return {"step": getattr(state, "step", None)}
