"""What the parent saw of one worker process (``Outcome``), and the records the session keeps in it as the worker's
messages arrive: the span in which the device was timing the candidate, and each timing-phase handoff attributed to
the window of the ledger it audits.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ksearch.contracts.exchange import Handoff, StagingHandle, WorkerResult
from ksearch.tools.evaluator.parent.ledger import TimingLedger


class Outcome(BaseModel):
    """What the session saw of one worker process."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    result: WorkerResult | None = None
    timed_out: bool = False
    phase: str = "start"
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    unreadable: str = ""
    wall_s: float = 0.0
    """From the request to the worker's exit."""
    phase_seconds: dict[str, float] = {}
    """Wall time the session saw in each of the worker's phases (load, run, timing) and waiting for it to start."""
    checker_s: float = 0.0
    """Time spent waiting for the checker's answers."""
    harness_error: str = ""
    """A failure of the harness (the checker), not of the candidate."""
    scout_s: float | None = None
    """From the scout's request until it finished (None: no scout, or it was killed unfinished)."""
    ledger: TimingLedger | None = None
    """Every timed window of the worker's timing phase, stamped on the session's clock as its messages arrived."""
    calibration: dict[str, float] = {}
    """The worker's measurement of the harness's own costs, from its ``ready`` message (before its request)."""
    staging_on_host: bool = False
    """The parent handed the worker a staging buffer in host memory on a GPU (no CUDA IPC here): the ledger's rules
    allow for crossings at host speed (``Calibration.staging_on_host``)."""
    stopped_out_of_order: bool = False
    """The worker was stopped at the first timing message out of order (``ledger.out_of_order``: no honest worker
    sends one)."""
    oom_kills_before: int = 0
    """The kernel's count of OOM kills when the worker got its request (``exhaustion.oom_kills``)."""
    oom_killed: bool = False
    """The kernel's OOM killer ended a process while the worker ran (with the OOM score its limits give it, most
    likely the worker)."""
    timed_span: tuple[float, float] | None = None
    """Epoch seconds on the session's clock from the worker's ``timing`` phase to the phase after it (or its end):
    when the device was timing this candidate, to show that no two evaluations were timed on one GPU at once
    (``bench/throughput.py``). Announced by the worker, so a record of scheduling, not evidence for a verdict."""


def ledger_handoff(ledger: TimingLedger, message: dict[str, Any]) -> None:
    """Attribute a timing-phase handoff to the window it audits (a malformed one is the checker's to refuse)."""
    try:
        handoff = Handoff.model_validate(message)
    except (ValidationError, ValueError):
        return
    nbytes = 0
    for shape, dtype in zip(handoff.shapes, handoff.dtypes):
        count = 1
        for size in shape:
            count *= max(0, int(size))
        nbytes += count * _itemsize(dtype)
    ledger.handoff(
        handoff.kind, handoff.config_index, handoff.input_seed, handoff.activation_seed, nbytes, window=handoff.window
    )


def _itemsize(dtype: str) -> int:
    """Bytes per element of a torch dtype's name (``torch.float16`` -> 2), without importing torch."""
    name = dtype.removeprefix("torch.")
    for width in (128, 64, 32, 16, 8):
        if str(width) in name:
            return width // 8
    return 1 if name == "bool" else 4


def mark_timed_span(outcome: Outcome, new_phase: str | None) -> None:
    """Open ``outcome.timed_span`` when the worker enters its timing phase, close it when it leaves (``new_phase``
    None: the worker's messages ended)."""
    now = time.time()
    if new_phase == "timing" and outcome.phase != "timing":
        outcome.timed_span = (now, now)
    elif outcome.phase == "timing" and new_phase != "timing" and outcome.timed_span is not None:
        outcome.timed_span = (outcome.timed_span[0], now)


def staging_on_host(staging: StagingHandle | None, device: str) -> bool:
    """Whether a GPU evaluation's staging buffer lies in host memory (the fallback where CUDA IPC is unavailable) for
    the timing rules' allowance. The session falls back only where the trusted side chose it: a checker that cannot
    export CUDA IPC, ``KSEARCH_STAGING=shm``, or a worker's "cannot open" that a fresh worker loading no candidate
    confirmed (``evaluate._buffer_unopenable``); a candidate's word alone would buy it room between windows."""
    return staging is not None and staging.kind != "cuda_ipc" and device.startswith("cuda")
