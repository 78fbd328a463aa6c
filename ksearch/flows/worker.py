"""The ``worker`` flow: one Dask worker that evaluates ksearch candidates, for one GPU or for the CPU interpreter.

``ksearch worker --scheduler ADDR --gpu N`` is a Dask worker (under a nanny, which restarts it if it dies) that
sees only GPU N (``CUDA_VISIBLE_DEVICES=N``), offers the resource ``GPU=1`` and has ksearch preloaded; without
``--gpu`` it offers ``INTERPRETER=1``: CPU evaluations under the Triton interpreter. Run one per GPU, on any machine
that reaches the scheduler (compute nodes need no internet). It stops on SIGINT or SIGTERM (Slurm's ``scancel``),
closing its evaluator processes.

The process drops every environment variable that looks like a secret before the worker starts: a worker needs
no API key, and the sandbox of each evaluation rebuilds its environment from an allowlist anyway.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from ksearch.errors import UserError
from ksearch.tools.executors.dask import import_distributed
from ksearch.tools.executors.dask_common import (
    GPU_RESOURCE,
    INTERPRETER_RESOURCE,
    worker_device,
)
from ksearch.tools.fingerprint import DeviceInfo, probe_device

PRELOAD = "ksearch.tools.executors.dask_worker"
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE", re.IGNORECASE)
"""Names dropped from a worker's environment (as the evaluator's sandbox drops them); Dask's own settings
(``DASK_*``, e.g. TLS key paths) are kept."""


@dataclass(frozen=True)
class WorkerSpec:
    scheduler: str
    """The scheduler's address, ``tcp://host:8786``."""
    gpu: int | None = None
    """The GPU this worker owns, as torch numbers the GPUs this process sees (``cuda:N``; under Slurm, the N-th
    of the job's ``CUDA_VISIBLE_DEVICES``); None: CPU evaluations only."""
    nthreads: int = 1
    """Threads of the Dask worker; evaluations are one at a time whatever this is (one unit of the resource)."""
    name: str | None = None
    """The worker's name in the cluster (default ``HOST-gpuN`` or ``HOST-cpu-PID``)."""
    death_timeout_s: float | None = None
    """Exit when the scheduler stays unreachable this long (None: keep trying)."""


@dataclass(frozen=True)
class WorkerStarted:
    address: str
    """The Dask worker's own address."""
    name: str
    device: DeviceInfo


def worker_resources(spec: WorkerSpec) -> dict[str, float]:
    return {GPU_RESOURCE: 1} if spec.gpu is not None else {INTERPRETER_RESOURCE: 1}


def worker_name(spec: WorkerSpec) -> str:
    if spec.name:
        return spec.name
    host = socket.gethostname()
    return f"{host}-gpu{spec.gpu}" if spec.gpu is not None else f"{host}-cpu-{os.getpid()}"


def scrub_secrets(environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """Remove secret-looking variables (not Dask's own) from ``environ``; returns the names removed."""
    removed = [name for name in environ if _SECRET.search(name) and not name.startswith("DASK_")]
    for name in removed:
        del environ[name]
    return removed


def visible_device(gpu: int, visible: str | None) -> str:
    """``CUDA_VISIBLE_DEVICES`` for the worker of ``--gpu N``: the N-th GPU this process sees, as torch numbers
    them (under Slurm, or any ``CUDA_VISIBLE_DEVICES`` already set, the N-th of that list)."""
    if gpu < 0:
        raise UserError(f"--gpu {gpu}: a GPU index is 0 or more")
    entries = [e.strip() for e in (visible or "").split(",") if e.strip()]
    if visible is None or not visible.strip():
        return str(gpu)
    if gpu >= len(entries):
        raise UserError(
            f"--gpu {gpu}: this process sees {len(entries)} GPU(s) (CUDA_VISIBLE_DEVICES={visible})",
            hint=f"use --gpu 0 to {len(entries) - 1}: indices count the GPUs visible here, as torch numbers them",
        )
    return entries[gpu]


def prepare_process(spec: WorkerSpec) -> DeviceInfo:
    """This process's environment for the worker it starts: its GPU only, no secrets; then its device, checked."""
    if spec.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_device(spec.gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))
    scrub_secrets(os.environ)
    device = worker_device("cuda" if spec.gpu is not None else "cpu")
    info = probe_device(device)
    if spec.gpu is not None and not info.is_gpu:
        raise UserError(
            f"--gpu {spec.gpu}: torch sees no such GPU on {socket.gethostname()}",
            hint="list this machine's GPUs with nvidia-smi; without --gpu the worker offers CPU evaluations",
        )
    return info


SCHEDULER_HINT = (
    "check the address, and that the scheduler runs (dask scheduler --port 8786) and this machine reaches its port"
)


def ensure_scheduler_reachable(address: str, wait_s: float = 0.0) -> None:
    """UserError at once when nothing answers at a TCP (or TLS) scheduler address: Dask's nanny would retry for its
    connect timeout (30 s) and then end in a traceback. ``wait_s``: keep trying this long first (the scheduler may
    be starting). Other transports are left to Dask."""
    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port

    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location, 8786)
    except ValueError as exc:
        raise UserError(f"--scheduler {address} is not a Dask address: {exc}", hint="e.g. tcp://host:8786") from exc
    if scheme not in ("tcp", "tls"):
        return
    deadline = time.monotonic() + wait_s
    while True:
        try:
            socket.create_connection((host, port), timeout=10).close()
            return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise UserError(
                    f"cannot reach the Dask scheduler at {address}: {exc.strerror or exc}", hint=SCHEDULER_HINT
                ) from exc
            time.sleep(1.0)


def serve_worker(spec: WorkerSpec, on_started: Callable[[WorkerStarted], None] | None = None) -> None:
    """Run the worker until SIGINT/SIGTERM or until its nanny ends (the scheduler gone past ``death_timeout_s``)."""
    distributed = import_distributed()
    info = prepare_process(spec)  # this machine's own mistakes (a GPU it lacks) first
    ensure_scheduler_reachable(spec.scheduler, wait_s=spec.death_timeout_s or 0.0)
    name = worker_name(spec)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        try:
            nanny = distributed.Nanny(
                spec.scheduler,
                nthreads=spec.nthreads,
                resources=worker_resources(spec),
                name=name,
                preload=[PRELOAD],
                death_timeout=spec.death_timeout_s,
            )
            try:
                await nanny  # joins the scheduler (retrying until death_timeout_s, if any)
            except (
                OSError,
                TimeoutError,
                RuntimeError,
            ) as exc:  # RuntimeError: "Nanny failed to start", from the cause
                cause = exc.__cause__ if isinstance(exc, RuntimeError) and exc.__cause__ is not None else exc
                raise UserError(
                    f"the worker could not join the Dask scheduler at {spec.scheduler}: {cause}", hint=SCHEDULER_HINT
                ) from exc
            try:
                if on_started is not None:
                    on_started(WorkerStarted(address=str(nanny.worker_address), name=name, device=info))
                finished = asyncio.ensure_future(nanny.finished())
                stopped = asyncio.ensure_future(stop.wait())
                await asyncio.wait([finished, stopped], return_when=asyncio.FIRST_COMPLETED)
                for pending in (finished, stopped):
                    pending.cancel()
            finally:
                await nanny.close()
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)

    asyncio.run(main())
