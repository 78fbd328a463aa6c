"""Where evaluations run: the one device resolver (``auto`` becomes ``cuda`` or ``cpu``; unknown devices are refused)
and a new run's ``--parallel`` default, for every door that starts a run or an evaluation (CLI, MCP, sweep, eval)."""

from __future__ import annotations

from ksearch.agent.config import device_problem
from ksearch.errors import UserError
from ksearch.tools.executors.dask import cluster_slots
from ksearch.tools.fingerprint import probe_device
from ksearch.tools.gpu_pool import GpuPool


def default_device() -> str:
    """``cuda`` when torch sees a GPU (probed in a subprocess), else ``cpu``."""
    return "cuda" if probe_device("cuda").is_gpu else "cpu"


def resolve_device(device: str) -> str:
    """``auto`` becomes ``cuda`` or ``cpu``; a device ksearch does not know is a UserError; anything else is
    returned as given."""
    if device == "auto":
        return default_device()
    problem = device_problem(device)
    if problem:
        raise UserError(problem)
    return device


def placement(
    device: str, parallel: int | None, *, executor: str = "local", scheduler: str | None = None, gpus: str = "all"
) -> tuple[str, int]:
    """``--device`` (``auto`` resolved) and ``--parallel`` (default filled in) for a new run: from this machine's
    GPUs, or with the Dask executor from the cluster's workers (the agent's machine needs no GPU then)."""
    problem = device_problem(device) if device != "auto" else None
    if problem:  # before anything probes or validates on it (an operator file's reference runs on it)
        raise UserError(problem)
    if parallel is not None and parallel < 1:
        raise UserError(
            f"--parallel {parallel}: at least one action must be explored at a time", hint="use --parallel 1 or more"
        )
    slots = None
    if executor == "dask" and scheduler and (device == "auto" or parallel is None):
        slots = cluster_slots(scheduler)
        if device == "auto" and not any(slots.values()):
            raise UserError(
                f"no worker has joined the Dask cluster at {scheduler} yet, so --device auto cannot tell GPU from CPU",
                hint=f"start workers first (ksearch worker --scheduler {scheduler} --gpu N), or pass --device cuda",
            )
    if device == "auto":
        device = ("cuda" if slots.get("cuda") else "cpu") if slots is not None else default_device()
    return device, parallel if parallel is not None else default_parallel(device, gpus, slots=slots)


def default_parallel(device: str, gpus: str = "all", *, slots: dict[str, int] | None = None) -> int:
    """``--parallel`` when not given: one cycle per GPU in the pool, 1 on the CPU or a single named GPU. With the
    Dask executor (``slots``: the cluster's evaluation slots by device, ``cluster_slots``) one per slot."""
    if slots is not None:
        return max(1, min(64, slots.get("cpu" if device == "cpu" else "cuda", 0)))
    if device == "cpu" or device.startswith("cuda:"):
        return 1
    try:
        return max(1, min(64, len(GpuPool.from_spec(gpus))))
    except UserError:
        return 1
