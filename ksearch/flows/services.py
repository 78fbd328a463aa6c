"""A run's services (``build_context``): its task checked, its model, where its evaluations go (an executor), the
GPUs it leases, and the device as its prompts describe it; or, for a process that writes prompts only, the pauses
that stand for its evaluations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.config import get_stream_writer

from ksearch.agent import device_pause
from ksearch.agent.config import RunConfig
from ksearch.agent.context import SearchContext
from ksearch.agent.task_guard import ensure_task_unchanged
from ksearch.errors import UserError
from ksearch.llm.client import LLMClient
from ksearch.llm.models import build_model
from ksearch.llm.recorder import StoreRecorder
from ksearch.llm.usage import Budget
from ksearch.skills.library import load_snapshot
from ksearch.skills.records import SkillContext, arch_from_capability, task_family
from ksearch.store import Store
from ksearch.tasks.base import Task
from ksearch.tasks.registry import resolve_task
from ksearch.tools.executors import DaskExecutor, Executor, LocalExecutor
from ksearch.tools.fingerprint import DeviceInfo
from ksearch.tools.gpu_pool import GpuPool


def open_executor(config: RunConfig) -> Executor:
    """Where the run's evaluations go: this machine (``local``) or the Dask cluster at ``config.scheduler``."""
    if config.executor == "dask":
        assert config.scheduler is not None  # RunConfig insists
        return DaskExecutor(config.scheduler)
    return LocalExecutor()


def build_gpu_pool(config: RunConfig) -> GpuPool | None:
    """None on the CPU and with the Dask executor (the cluster schedules its GPUs); the one GPU of
    ``--device cuda:N``; else the ``--gpus`` spec, probed in a subprocess."""
    if config.device == "cpu" or config.executor == "dask":
        return None
    if config.device.startswith("cuda:"):
        return GpuPool([config.device])
    return GpuPool.from_spec(config.gpus)


def device_description(info: DeviceInfo, task: Task, target_gpu: str | None) -> str:
    """The device for prompts: its limits and peaks, and the roofline floor of each timed shape on it (on the CPU,
    on the target GPU; none without one)."""
    from ksearch.tools.evaluator.parent.evidence import floors_text
    from ksearch.tools.gpu_specs import gpu_spec, spec_for_device

    text = info.describe(target_gpu)
    gpu = spec_for_device(info.gpu) if info.gpu else (gpu_spec(target_gpu) if target_gpu else None)
    floors = floors_text(task, gpu) if gpu is not None else ""
    return f"{text}\n{floors}" if floors else text


def build_context(
    config: RunConfig, store: Store, *, executor: Executor | None = None, prompts_only_on: DeviceInfo | None = None
) -> SearchContext:
    """The run's services. ``executor``: evaluations go there (the caller keeps and closes it); by default the
    config's executor is opened here and closed with the context. ``prompts_only_on``: the run's recorded device;
    no executor is opened and every evaluation pauses for a process that has the device (``agent.device_pause``)."""
    task = resolve_task(config.task)
    ensure_task_unchanged(config, task)  # a resumed or forked run never mixes verdicts of an edited task file
    if config.language not in task.languages:
        raise UserError(
            f"task {task.name} supports {', '.join(task.languages)}, not {config.language}",
            hint=f"use --language {task.languages[0]}",
        )
    if prompts_only_on is not None:
        return _context(config, store, task, None, prompts_only_on, close=None)
    owned = executor is None
    if executor is None:
        executor = open_executor(config)
    try:
        info = executor.device_info(config.device)  # for dask, a worker's device: the agent needs no GPU
        if config.device != "cpu" and not info.is_gpu:
            where = f"on the GPU workers of the Dask cluster at {config.scheduler}" if config.executor == "dask" else ""
            raise UserError(
                f"--device {config.device} asked for a GPU, but none is visible to torch {where}".rstrip(),
                hint="use --device cpu to check kernels under the Triton interpreter (correctness only); to answer a "
                "paused GPU run on this machine, add --prompts-only to `ksearch respond` or `ksearch resume`: the run "
                "plans and writes here and each kernel waits for `ksearch resume RUN` on the GPU machine",
            )
        return _context(config, store, task, executor, info, close=executor.close if owned else None)
    except BaseException:
        if owned:
            executor.close()
        raise


def _context(
    config: RunConfig,
    store: Store,
    task: Task,
    executor: Executor | None,
    info: DeviceInfo,
    close: Callable[[], None] | None,
) -> SearchContext:
    """The services of a run; without an executor, of a process that writes prompts only (evaluations pause)."""
    recorder = StoreRecorder(store, config.run_id)
    b = config.budget
    llm = LLMClient(
        build_model(config, store),
        recorder,
        Budget(
            max_total_tokens=b.max_total_tokens,
            max_cost_usd=b.max_cost_usd,
            price_input_per_mtok=b.price_input_per_mtok,
            price_output_per_mtok=b.price_output_per_mtok,
        ),
        recorder.usage,
        model_name=config.model,
        max_attempts=config.llm_max_attempts,
        endpoint=config.base_url,
        on_notice=_to_stream,
    )
    return SearchContext(
        config=config,
        store=store,
        task=task,
        llm=llm,
        evaluate=executor.evaluate if executor is not None else device_pause.evaluate_later,
        eval_key=info.eval_key(task.name, target_gpu=config.target_gpu),
        device_description=device_description(info, task, config.target_gpu),
        gpu_pool=build_gpu_pool(config) if executor is not None else None,
        compare=(executor.compare if executor is not None else device_pause.compare_later)
        if config.device != "cpu"
        else None,
        counters=executor.counters if executor is not None and config.device != "cpu" and config.counters else None,
        confirm_bests=config.device != "cpu",
        close=close,
        device_info=info,
        prompts_only=executor is None,
        skill_context=SkillContext(
            family=task_family(task.name), language=config.language, arch=arch_from_capability(info.capability)
        ),
        skills=load_snapshot(store, config.skill_snapshot) if config.skills and config.skill_snapshot else [],
    )


def _to_stream(event: str, fields: dict[str, Any]) -> None:
    """An LLM call's notice (a request, a retry) as a progress event of the node that makes the call; outside a
    graph (no node runs) it has nowhere to go, and the log keeps it."""
    try:
        writer = get_stream_writer()
    except RuntimeError:
        return
    writer({"event": event, **fields})
