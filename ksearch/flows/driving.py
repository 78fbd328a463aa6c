"""Which runs this process drives, and stop requests to them (Ctrl-C, SIGTERM).

A run is driven by one process at a time: its name (``host:pid``) is claimed in ``runs.driver``
(``ksearch.store.drivers``) before the graph runs and released after. While a run is driven here it is registered
in this module, so that the CLI's signal handler can ask it to stop. The CLI imports this module at start: it stays
light, and imports the store only when a run is really driven.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from ksearch.errors import KsearchError, RunBusyError

if TYPE_CHECKING:
    from ksearch.agent.context import SearchContext

log = structlog.get_logger(__name__)

EventSink = Callable[[str, dict[str, Any]], None]
"""Receives (event name, its fields) from the nodes' progress events while a run is driven: the CLI turns these
into progress lines."""


def driver_name() -> str:
    """This process as a run's driver: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def driver_alive(driver: str) -> bool:
    """Whether a recorded driver still runs. A process of another host cannot be checked from here and counts as
    gone: a workspace is driven from one machine at a time (copying it to another machine is how it moves)."""
    host, _, pid = driver.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(ctx: SearchContext, me: str) -> None:
    """Make ``me`` the run's driver; RunBusyError when a live process drives it."""
    from ksearch.store.drivers import claim_driver

    holder = claim_driver(ctx.store, ctx.run_id, me, driver_alive)
    if holder is not None:
        raise RunBusyError(
            f"run {ctx.run_id} is being driven by process {holder}",
            hint="wait until it pauses or ends (see `ksearch runs`); replies and steering acts given meanwhile are "
            "recorded and taken at its next step",
        )


def release(ctx: SearchContext, me: str) -> None:
    """Give the run up; a failure (a full disk) is logged, never raised over the error that ended the drive. A dead
    driver's name is reclaimed by the next one anyway."""
    from ksearch.store.drivers import release_driver

    try:
        release_driver(ctx.store, ctx.run_id, me)
    except KsearchError as exc:
        log.warning("run.driver_not_released", run_id=ctx.run_id, error=str(exc))


_DRIVING: dict[str, SearchContext] = {}
"""The runs this process is driving now, by run id: what a stop request (Ctrl-C, SIGTERM) applies to."""
_DRIVING_LOCK = threading.RLock()
"""Re-entrant: a stop request runs in a signal handler, on the main thread, possibly while that thread is inside a
``with _DRIVING_LOCK`` block (registering or dropping a run); a plain lock would deadlock the process there."""


def register(ctx: SearchContext) -> None:
    """The run is driven by this process from now on: stop requests apply to it."""
    with _DRIVING_LOCK:
        _DRIVING[ctx.run_id] = ctx


def unregister(run_id: str) -> None:
    with _DRIVING_LOCK:
        _DRIVING.pop(run_id, None)


def request_stop(reason: str) -> list[str]:
    """Ask every run this process drives to stop at its next node boundary: the node in progress (an LLM call, an
    evaluation) finishes and is recorded, then ``RunInterrupted`` ends the run, resumable. Returns the run ids asked
    (empty when no run is being driven). Safe to call from a signal handler."""
    with _DRIVING_LOCK:
        for ctx in _DRIVING.values():
            ctx.stop_reason = ctx.stop_reason or reason
        return list(_DRIVING)


def mark_stopped_now(reason: str) -> list[str]:
    """For a stop that cannot wait for the node in progress (a second Ctrl-C): record every driven run as
    interrupted and given up, through a connection of its own (a node may be holding the run's), before the
    process exits. The node in progress is redone on resume; everything it had recorded stays."""
    with _DRIVING_LOCK:
        driving = list(_DRIVING.values())
    if not driving:
        return []
    from ksearch.store import Store  # loaded already: a run is driven
    from ksearch.store.drivers import release_driver

    me = driver_name()
    for ctx in driving:
        try:
            store = Store(ctx.store.path)
            try:
                store.update_run(ctx.run_id, status="interrupted", error=f"stopped at once by {reason}")
                release_driver(store, ctx.run_id, me)
            finally:
                store.close()
        except KsearchError as exc:
            log.warning("run.status_not_recorded", run_id=ctx.run_id, error=str(exc))
    return [ctx.run_id for ctx in driving]
