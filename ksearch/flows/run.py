"""The ``run`` flow: create, start, resume and replay searches, and drive them. The CLI, the MCP server, fork and
sweep call these; they print nothing. A new run's config comes from ``ksearch.flows.run_config``; its services are
built by ``ksearch.flows.services.build_context`` (the model, the executor and the device).

A run's thread id in the checkpointer is its run id. Resume re-opens the thread from its last checkpoint; replay
starts a new run of the same config whose model serves the recorded replies of the old one, and applies its
steering acts at the same steps.

Driving a run (``_drive``) goes on until the graph ends or pauses: a pause (a LangGraph interrupt) waits for a
person's reply with ``--model interactive``, or for the approval of a new best. A paused run has status
``waiting``; whenever it is driven again, every pause whose answer is already in the store is resumed with
``Command(resume={interrupt id: answer})``. One process drives a run at a time (``ksearch.flows.driving``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from langgraph.types import Command

from ksearch.agent.checkpoint import open_checkpointer
from ksearch.agent.config import RunConfig
from ksearch.agent.context import SearchContext
from ksearch.agent.state import BestRef, SearchState
from ksearch.agent.task_guard import stamp_task
from ksearch.agent.world_model import WorldModel
from ksearch.contracts.identifiers import check_run_id
from ksearch.errors import KsearchError, UserError
from ksearch.flows import driving, trust
from ksearch.flows.compete import resolve_competitors
from ksearch.flows.driving import EventSink
from ksearch.flows.run_config import new_run_id, run_exists_error, stored_config
from ksearch.flows.seed import initial_state, register_seed, seed_evaluation
from ksearch.flows.services import build_context
from ksearch.flows.workspace import open_store, workspace_dir
from ksearch.graph import build_search_graph
from ksearch.llm.interactive import Waiting, resume_map, waiting_prompts
from ksearch.skills.library import freeze_snapshot
from ksearch.store import Store, workspace_error
from ksearch.store.drivers import claim_driver, release_driver
from ksearch.store.steering import copy_acts
from ksearch.tasks.registry import canonical_task_name
from ksearch.tools.executors import Executor
from ksearch.tools.fingerprint import DeviceInfo

log = structlog.get_logger(__name__)

RECURSION_LIMIT = 100_000
"""Each round is ~3 supersteps; the default limit would cap long runs for no reason."""


@dataclass
class RunOutcome:
    run_id: str
    status: str
    """``finished``, or ``waiting`` (paused for a reply or an approval: see ``pending``)."""
    done_reason: str | None
    rounds_used: int
    best: BestRef | None
    world_model: WorldModel
    pending: list[Waiting] = field(default_factory=list)
    """The pauses of a waiting run."""
    extra: dict[str, Any] = field(default_factory=dict)


def start_run(
    config: RunConfig,
    *,
    workspace: Path | None = None,
    on_event: EventSink | None = None,
    executor: Executor | None = None,
) -> RunOutcome:
    """Create the run and drive it until it ends or pauses. ``executor``: one the caller opened (and closes), to
    share it between runs or to read its ``busy`` record; by default the config's own, closed at the end."""
    store = open_store(workspace)
    ctx: SearchContext | None = None
    try:
        ctx = create_context(config, store, on_event, executor)
        return _drive(ctx, initial_state(ctx), on_event, workspace)
    finally:
        if ctx is not None:
            ctx.shutdown()
        store.close()


def create_run(config: RunConfig, *, workspace: Path | None = None) -> RunConfig:
    """Create the run (checked, seed evaluated) without driving it: ``resume_run`` starts it, in any process."""
    store = open_store(workspace)
    try:
        ctx = create_context(config, store, None)
        ctx.shutdown()  # the evaluator session a seed's evaluation started; the driving process makes its own
        return ctx.config
    finally:
        store.close()


def create_context(
    config: RunConfig, store: Store, on_event: EventSink | None, executor: Executor | None = None
) -> SearchContext:
    """Check the new run (task, model, device), store and evaluate its seed, freeze its skills and write its row:
    its services, for the caller to drive (``start_run``) or to shut down (``create_run``, a fork). An id the
    workspace holds already is refused first, before anything is checked, evaluated or written."""
    ensure_new_run_id(store, config.run_id)
    # The evaluator's worker resolves the task again in a private directory: give it an absolute, canonical name.
    config = config.model_copy(update={"task": canonical_task_name(config.task)})
    ctx = build_context(config, store, executor=executor)  # fail fast on a bad task, model or device, before any row
    ctx.config = config = stamp_task(config, ctx.task)
    if on_event is not None:  # the task, model and device are good: the run starts now
        on_event("starting", {"run_id": config.run_id})
    try:
        if config.seed_from or config.seed_candidate_id:
            ctx.config = config = register_seed(ctx)
            seed_evaluation(ctx, on_event)  # a seed that does not pass stops here, before any run row is written
        if config.compete and not config.competitors:
            ctx.config = config = resolve_competitors(ctx)  # a kernel that does not pass stops here, before any row
        if config.skills and config.skill_snapshot is None:  # a replay or fork keeps the snapshot of its run
            ctx.config = config = freeze_skills(ctx)
    except BaseException:
        ctx.shutdown()  # the evaluator processes the seed's evaluation started
        raise
    store.create_run(
        {
            "id": config.run_id,
            "task": config.task,
            "model": config.model,
            "language": config.language,
            "device": config.device,
            "config": config.model_dump(mode="json"),
            "parent_run_id": config.replay_of or config.fork_of,
            "fork_round": config.fork_round,
        }
    )
    record_device(store, config.run_id, ctx)
    trust.vouch(config, store.path.parent)  # the user chose this run's task and endpoints (``flows.trust``)
    if config.replay_of:  # the replay applies the recorded run's steering acts at the steps where they took effect
        copy_acts(store, config.replay_of, config.run_id)
    return ctx


def ensure_new_run_id(store: Store, run_id: str) -> None:
    """RunExistsError (naming the commands that go on with that run) when ``run_id`` is taken."""
    existing = store.find_run(run_id)
    if existing is not None:
        raise run_exists_error(existing)


def resume_run(
    run_id: str,
    *,
    workspace: Path | None = None,
    on_event: EventSink | None = None,
    scheduler: str | None = None,
    base_url: str | None = None,
    trust_task: bool = False,
    prompts_only: bool = False,
    executor: Executor | None = None,
    before_drive: Callable[[Store], None] | None = None,
) -> RunOutcome:
    """Drive a run on from its last checkpoint. ``scheduler``: a run made with ``--executor dask`` goes on with the
    Dask scheduler at this address (a restarted cluster); the run's stored config remembers it. A stored LLM server
    or scheduler that is not loopback, and a task file inside the workspace, are used only when confirmed
    (``base_url``, ``scheduler``, ``trust_task``: ``ksearch.flows.trust``). ``prompts_only``: plan and write on a
    machine without the run's device, pausing at each evaluation for ``resume`` on a machine that has it.
    ``executor``: evaluations go there (the caller keeps and closes it). ``before_drive``: called with the store once
    every check passed, just before the run is driven (``respond`` records its reply there, so that a refused
    command records nothing)."""
    store = open_store(workspace)
    ctx: SearchContext | None = None
    try:
        run = store.get_run(run_id)
        config = stored_config(run)
        if run["status"] == "finished":
            raise UserError(f"run {config.run_id} already finished", hint=f"see it with: ksearch show {config.run_id}")
        if scheduler is not None and scheduler != config.scheduler and config.executor != "dask":
            raise UserError(
                f"run {config.run_id} evaluates on this machine (--executor local); --scheduler is for runs "
                "made with --executor dask"
            )
        command = f"ksearch resume {config.run_id}"
        folder = store.path.parent
        config = trust.accept_endpoints(
            config, command=command, workspace=folder, base_url=base_url, scheduler=scheduler
        )
        trust.check_task_file(config, folder, trusted=trust_task, command=command)
        recorded = recorded_device(run, config) if prompts_only else None
        ctx = build_context(config, store, executor=executor, prompts_only_on=recorded)
        trust.vouch(config, folder)  # accepted, and the task is the run's own: the next resume needs no flag
        record_device(store, config.run_id, ctx)
        ctx.config = config = stamp_task(config, ctx.task)  # a run made before digests were recorded gets one now
        if config.model_dump(mode="json") != run["config"]:
            store.update_run(config.run_id, config=json.dumps(config.model_dump(mode="json"), sort_keys=True))
        if before_drive is not None:
            before_drive(store)
        return _drive(ctx, None, on_event, workspace)
    finally:
        if ctx is not None:
            ctx.shutdown()
        store.close()


def record_device(store: Store, run_id: str, ctx: SearchContext) -> None:
    """Remember the device the run evaluates on, so that a machine without it can write the run's prompts (a process
    that writes prompts only has nothing new to record)."""
    if ctx.device_info is not None and not ctx.prompts_only:
        store.update_run(run_id, device_info=ctx.device_info.model_dump_json())


def recorded_device(run: dict[str, Any], config: RunConfig) -> DeviceInfo:
    """The device recorded for ``run`` where it last evaluated; a clear error when none is."""
    text = run.get("device_info")
    if not text:
        raise UserError(
            f"run {config.run_id} has no recorded device yet (it has not been driven on {config.device} by this "
            "version of ksearch), so its prompts cannot be written on another machine",
            hint=f"drive it once where {config.device} is: ksearch resume {config.run_id}",
        )
    return DeviceInfo.model_validate_json(text)


def replay_config(
    run_id: str,
    *,
    workspace: Path | None = None,
    device: str | None = None,
    trust_task: bool = False,
    new_id: str | None = None,
) -> RunConfig:
    """The config of a new run that re-executes ``run_id`` with its recorded replies, on this machine (a task file
    inside the workspace only with ``trust_task``); ``new_id``: the new run's id (default: a generated one)."""
    if new_id is not None:
        try:
            check_run_id(new_id)
        except ValueError as exc:
            raise UserError(str(exc)) from None
    store = open_store(workspace, read_only=True)
    try:
        run = store.get_run(run_id)
    finally:
        store.close()
    old = stored_config(run)
    trust.check_task_file(old, workspace_dir(workspace), trusted=trust_task, command=f"ksearch replay {old.run_id}")
    if old.executor == "dask" and old.scheduler:
        raise UserError(
            f"run {old.run_id} evaluated on the Dask scheduler {old.scheduler}, a setting stored in the workspace: a "
            "replay evaluates on this machine only",
            hint="replay it here with --device cpu or cuda, or start a new run with --executor dask --scheduler ADDR",
        )
    return old.model_copy(
        update={
            "run_id": new_id or new_run_id(old.task),
            "model": f"replay:{old.run_id}",
            "base_url": None,
            "device": device or old.device,
            "replay_of": old.run_id,
            "task_digest": None,  # a new run, evaluated afresh: it records the task as it is now
            # the same frozen skills as the original; a run from before skills existed is replayed without them
            "skills": old.skills and old.skill_snapshot is not None,
        }
    )


def freeze_skills(ctx: SearchContext) -> RunConfig:
    """Freeze the library skills that fit this run (task family, language, arch; not retired) into a snapshot the
    run's config names, so that resume and replay see exactly these skills whatever the library learns meanwhile."""
    assert ctx.skill_context is not None
    snapshot, views = freeze_snapshot(ctx.store, ctx.skill_context)
    ctx.skills = views
    return ctx.config.model_copy(update={"skill_snapshot": snapshot})


def _mark_interrupted(ctx: SearchContext, error: str) -> None:
    """Record why the run stopped. On a full or read-only disk this write fails too and the run stays 'running'
    (it resumes all the same): that failure is logged, never raised over the error that stopped the run."""
    try:
        ctx.store.update_run(ctx.run_id, status="interrupted", error=error)
    except KsearchError as exc:
        log.warning("run.status_not_recorded", run_id=ctx.run_id, error=str(exc))


def graph_config(ctx: SearchContext) -> dict[str, Any]:
    return {
        "configurable": {"thread_id": ctx.run_id},
        "recursion_limit": RECURSION_LIMIT,
        "max_concurrency": max(4, ctx.config.parallel_cycles * 2),
    }


def _drive(
    ctx: SearchContext, initial: SearchState | None, on_event: EventSink | None, workspace: Path | None
) -> RunOutcome:
    """Run the graph until it ends or pauses (or to an error, leaving the run resumable).

    Resumes every pause whose answer is already recorded (a reply given while another process drove the run, or
    before a crash), so ``resume`` and ``respond`` both simply drive the run."""
    run_id = ctx.run_id
    me = driving.driver_name()
    driving.claim(ctx, me)
    saver = open_checkpointer(ctx.store.path)
    graph = build_search_graph(saver)
    cfg = graph_config(ctx)
    structlog.contextvars.bind_contextvars(run_id=run_id)
    driving.register(ctx)
    try:
        if initial is None and on_event is not None:  # every check passed: the run really goes on now
            on_event("resumed", {"run_id": run_id, "rounds_used": ctx.store.rounds_recorded(run_id)[0]})
        if initial is None and not graph.get_state(cfg).values:
            initial = initial_state(ctx)  # killed before the first checkpoint: start the thread afresh
        ctx.store.update_run(run_id, status="running", error=None, pending=None)
        payload: Any = initial if initial is not None else _resume_command(graph, cfg, ctx)
        resumed: set[str] = set()
        while True:
            if isinstance(payload, Command):
                ids = set(payload.resume)  # type: ignore[arg-type]
                if ids & resumed:  # an answered pause came back: never loop on it
                    raise KsearchError(f"run {run_id} paused again at an answered prompt ({sorted(ids & resumed)})")
                resumed |= ids
            _stream(graph, payload, cfg, ctx, on_event)
            snapshot = graph.get_state(cfg)
            if not snapshot.next:
                break
            payload = _resume_command(graph, cfg, ctx)
            if payload is None:
                waiting = _waiting(ctx, snapshot)
                # An answer recorded while this process held the run was refused to its giver (RunBusyError): look
                # once more after letting go, so that it is taken here or by whoever claims the run next.
                release_driver(ctx.store, run_id, me)
                payload = _resume_command(graph, cfg, ctx)
                if payload is None or claim_driver(ctx.store, run_id, me, driving.driver_alive) is not None:
                    return waiting
                ctx.store.update_run(run_id, status="running", pending=None)
    finally:
        driving.unregister(run_id)
        driving.release(ctx, me)
        structlog.contextvars.unbind_contextvars("run_id")
        saver.conn.close()
    final = SearchState.model_validate(snapshot.values)
    ctx.store.update_run(
        run_id,
        status="finished",
        done_reason=final.done_reason,
        rounds_used=final.rounds_used,
        best_candidate_id=final.best.candidate_id if final.best else None,
        best_evaluation_id=final.best.evaluation_id if final.best else None,
        best_score=final.best.score if final.best else None,
    )
    return RunOutcome(
        run_id=run_id,
        status="finished",
        done_reason=final.done_reason,
        rounds_used=final.rounds_used,
        best=final.best,
        world_model=final.world_model,
    )


def _stream(graph: Any, payload: Any, cfg: dict[str, Any], ctx: SearchContext, on_event: EventSink | None) -> None:
    run_id = ctx.run_id
    try:
        for _namespace, event in graph.stream(
            payload, cfg, context=ctx, stream_mode="custom", subgraphs=True, durability="sync"
        ):
            if on_event is not None and isinstance(event, dict) and "event" in event:
                on_event(event["event"], event)
    except KsearchError as exc:
        _mark_interrupted(ctx, str(exc))
        exc.hint = exc.hint or f"once the cause is fixed, continue with: ksearch resume {run_id}"
        raise
    except KeyboardInterrupt:
        _mark_interrupted(ctx, "interrupted by the user")
        raise
    except sqlite3.Error as exc:  # LangGraph's checkpoint writes fail like the store's (a full or read-only disk)
        error = workspace_error(exc, ctx.store.path)
        _mark_interrupted(ctx, str(error))
        error.hint = "; ".join(h for h in (error.hint, f"then continue with: ksearch resume {run_id}") if h)
        raise error from exc
    except Exception as exc:
        _mark_interrupted(ctx, f"{type(exc).__name__}: {exc}")
        raise


def _resume_command(graph: Any, cfg: dict[str, Any], ctx: SearchContext) -> Command | None:
    """``Command(resume={interrupt id: answer})`` for the pauses already answered in the store; None when none is."""
    waiting = waiting_prompts(graph.get_state(cfg), ctx.store, ctx.run_id)
    answers = resume_map(waiting, ctx.store, ctx.run_id, device_here=not ctx.prompts_only)
    return Command(resume=answers) if answers else None


def _waiting(ctx: SearchContext, snapshot: Any) -> RunOutcome:
    """The run paused and nothing recorded answers it: status ``waiting``, nothing runs until someone answers."""
    pending = waiting_prompts(snapshot, ctx.store, ctx.run_id)
    if not pending:
        message = f"the graph stopped before {', '.join(snapshot.next)} without a pause to answer"
        ctx.store.update_run(ctx.run_id, status="interrupted", error=message)
        raise KsearchError(message, hint=f"try: ksearch resume {ctx.run_id}")
    state = SearchState.model_validate(snapshot.values)
    ctx.store.update_run(
        ctx.run_id,
        status="waiting",
        pending=json.dumps([w.model_dump(mode="json", exclude={"answered"}) for w in pending]),
    )
    rounds, _passed = ctx.store.rounds_recorded(ctx.run_id)  # the state counts a cycle's rounds when it ends
    log.info("run.waiting", run_id=ctx.run_id, keys=[w.prompt.key for w in pending])
    return RunOutcome(
        run_id=ctx.run_id,
        status="waiting",
        done_reason=None,
        rounds_used=max(rounds, state.rounds_used),
        best=state.best,
        world_model=state.world_model,
        pending=pending,
    )


def load_final_state(run_id: str, *, workspace: Path | None = None) -> SearchState | None:
    """The latest checkpointed state of a run (for ``show``), or None if it never checkpointed."""
    store = open_store(workspace)
    try:
        run_id = store.get_run(run_id)["id"]
        saver = open_checkpointer(store.path)
        graph = build_search_graph(saver)
        snapshot = graph.get_state({"configurable": {"thread_id": run_id}})
        saver.conn.close()
        return SearchState.model_validate(snapshot.values) if snapshot.values else None
    finally:
        store.close()
