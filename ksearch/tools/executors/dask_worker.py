"""The worker side of the Dask executor: what runs inside a Dask worker process (started by ``ksearch worker``).

A Dask task never runs candidate code itself. It hands the request to an ``EvaluatorSession`` of this worker's
device, whose sandboxed checker and candidate processes are exactly those of a local evaluation (scrubbed
environment, private directories, process-group kill at the hard time limits, death with their parent). Sessions are
kept between tasks, per run salt, so consecutive evaluations of a run find their checker, its cached references and
the next worker already started; they are closed when the Dask worker stops (``SessionsPlugin``, or this module's
``dask_teardown`` when it is a ``--preload``).

The device: ``ksearch worker --gpu N`` gives its Dask worker one GPU (``CUDA_VISIBLE_DEVICES=N``, resource
``GPU=1``), so a ``cuda`` request runs on ``cuda:0`` there; a worker without ``--gpu`` offers the Triton
interpreter (resource ``INTERPRETER=1``). Needs ``distributed`` (the ``dask`` extra); the agent imports it only
through ``ksearch.tools.executors.dask``, which says how to install the extra when it is missing.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections import OrderedDict
from typing import Any

from distributed import WorkerPlugin, get_worker

import ksearch
from ksearch.contracts.evaluation import Comparison, Evaluation
from ksearch.tools.evaluator.parent.request import HARNESS_VERSION, EvalRequest
from ksearch.tools.executors.dask_common import EVENT_TOPIC, GPU_RESOURCE, worker_device
from ksearch.tools.executors.local import LocalExecutor
from ksearch.tools.fingerprint import DeviceInfo, probe_device

MAX_RUNS = 2
"""Runs (salts) whose sessions a worker keeps; the oldest is closed when another run arrives. Safe because every
task that uses a session holds the worker's one GPU (or interpreter) resource, so none is in use then."""

_lock = threading.Lock()
_probe_lock = threading.Lock()
_executors: OrderedDict[int, LocalExecutor] = OrderedDict()


def evaluate_task(request: EvalRequest, salt: int) -> tuple[Evaluation, dict[str, Any]]:
    """The Dask task of one evaluation: (the evaluation, where and how long it ran)."""
    where = _announce()
    started = time.monotonic()
    local = request.model_copy(update={"device": worker_device(request.device)})
    evaluation = _executor(salt).evaluate(local)
    evaluation = evaluation.model_copy(
        update={"environment": {**evaluation.environment, "host": where["host"], "dask_worker": where["worker"]}}
    )
    return evaluation, {**where, "seconds": time.monotonic() - started}


def compare_task(
    incumbent: EvalRequest, challenger: EvalRequest, rounds: int, salt: int
) -> tuple[Comparison, dict[str, Any]]:
    """The Dask task of one paired comparison, on this worker's GPU."""
    where = _announce()
    started = time.monotonic()
    device = worker_device(incumbent.device)
    comparison = _executor(salt).compare(
        incumbent.model_copy(update={"device": device}), challenger.model_copy(update={"device": device}), rounds=rounds
    )
    return comparison, {**where, "seconds": time.monotonic() - started}


async def describe(device: str) -> dict[str, Any]:
    """This worker's device and the ksearch it runs, so that the agent can key its evaluations and refuse a worker
    with another harness. Run through ``Client.run``, on the worker's event loop: the probe (a subprocess, once per
    worker process) runs in a thread so that the worker keeps answering the scheduler meanwhile."""
    info = await asyncio.to_thread(_probe, worker_device(device))
    return {
        "info": info.model_dump(),
        "harness": HARNESS_VERSION,
        "ksearch": ksearch.__version__,
        "host": socket.gethostname(),
    }


def _probe(device: str) -> DeviceInfo:
    with _probe_lock:  # the preload's background probe and the agent's question share one subprocess
        return probe_device(device)


def close_sessions() -> None:
    """Stop every session's checker and pre-started worker (at the Dask worker's teardown)."""
    with _lock:
        executors = list(_executors.values())
        _executors.clear()
    for executor in executors:
        executor.close()


def _executor(salt: int) -> LocalExecutor:
    """The sessions of the run with this salt (one salt per run: every candidate is checked on the same inputs)."""
    stale: list[LocalExecutor] = []
    with _lock:
        executor = _executors.pop(salt, None)
        if executor is None:
            executor = LocalExecutor(salt=salt)
        _executors[salt] = executor
        while len(_executors) > MAX_RUNS:
            stale.append(_executors.popitem(last=False)[1])
    for old in stale:
        old.close()
    return executor


def _announce() -> dict[str, Any]:
    """Tell the agent that this task started, and where (it times the hard limit from here, not from submission)."""
    worker = get_worker()
    where = {
        "key": str(worker.get_current_task()),
        "worker": worker.address,
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    worker.log_event(EVENT_TOPIC, where)
    return where


class SessionsPlugin(WorkerPlugin):
    """Closes the worker's evaluator sessions when the Dask worker stops (the agent registers it on every worker)."""

    name = "ksearch-sessions"

    def teardown(self, worker: Any) -> None:
        close_sessions()


# ---- as a Dask preload (``ksearch worker`` passes --preload ksearch.tools.executors.dask_worker) ---------------
def dask_setup(worker: Any) -> None:
    """Probe this worker's device in the background, so that the agent's first question is answered at once."""
    resources = getattr(getattr(worker, "state", None), "total_resources", None) or {}
    device = "cuda" if GPU_RESOURCE in resources else "cpu"
    threading.Thread(target=_probe, args=(worker_device(device),), daemon=True).start()


def dask_teardown(worker: Any) -> None:
    close_sessions()
