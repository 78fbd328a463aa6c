"""A run's services besides its model: where its evaluations go (an executor), the GPUs it leases, and the device
as its prompts describe it."""

from __future__ import annotations

from ksearch.agent.config import RunConfig
from ksearch.tasks.base import Task
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
