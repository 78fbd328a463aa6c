"""What both sides of the Dask executor agree on (the agent's client and the workers' tasks), without importing
``distributed``: resource names, the event topic, and which device a request uses on a worker."""

from __future__ import annotations

GPU_RESOURCE = "GPU"
"""The Dask resource a GPU evaluation asks for: one per GPU worker, so a GPU runs one evaluation at a time."""
INTERPRETER_RESOURCE = "INTERPRETER"
"""The resource of a CPU evaluation (Triton interpreter, correctness only), offered by workers without a GPU."""
EVENT_TOPIC = "ksearch-evaluation"
"""Each task logs ``{"key", "worker", "host", "pid"}`` here when it starts running: the agent times its hard limit
from then, not from submission (a task may wait long for a free GPU)."""
TASK_PREFIX = "ksearch-"
"""Every task key the agent submits starts with this."""


def resource_for(device: str) -> str:
    """The resource an evaluation on ``device`` (``cpu``, ``cuda``) asks for."""
    return INTERPRETER_RESOURCE if device == "cpu" else GPU_RESOURCE


def device_kind(resource: str) -> str:
    return "cpu" if resource == INTERPRETER_RESOURCE else "cuda"


def worker_device(device: str) -> str:
    """The device a request for ``device`` uses on a worker: its one visible GPU, or the interpreter."""
    return "cpu" if device == "cpu" else "cuda:0"
