"""Is someone else's work on the GPU this session times on?

The parent's ledger holds each timed window's device time against its wall time (rule ``timing_forgery``). On a GPU
that another process keeps busy, an honest kernel's launches wait behind the other's work, so its windows take wall
time no device event of its own accounts for: the signature of a forged time. Measured on an H200 with four
evaluations sharing it (2026-11-29): ten honest files were rejected as timing forgeries, and all ten passed one at a
time. A rejection names the candidate a cheat, so a ``timing_forgery`` verdict that would stand (after its retry) is
first checked against the GPU: if the GPU is still busy once this evaluation's worker is gone, the evaluation is the
harness's failure (``HarnessError``: no verdict, the run stops resumable), never the candidate's.

How: ``nvidia-smi``, in the parent (trusted; the candidate's processes are gone or paused), only from a system
folder and with a bare environment (``sandbox.system_binary``: one a candidate put first on the ``PATH`` would run
with the parent's rights and keys), and only on a finding of the parent's own ledger (a worker that reports
``timing_forgery`` of itself is the candidate's word). The GPU is the one the
session's checker holds a context on (found by the checker's pid among the compute processes); it is busy when its
utilisation stays at ``BUSY_PERCENT`` or more in every one of ``SAMPLES`` readings ``SAMPLE_GAP_S`` apart (the last
worker's own kernels, and a next worker's start, leave a reading within a fraction of a second). The processes on it
outside this process's own tree are named in the error.

What it cannot tell, and then the verdict stands as before: no ``nvidia-smi``; a container whose process ids differ
from the driver's (the checker is not found); a MIG slice (no utilisation reading); a neighbour that was busy during
the timing loop and idle by the check.
A candidate gains nothing here: the most it could do is make a forgery end as a stopped run instead of a rejection,
and neither gives a score.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ksearch.tools.containment.policy import parent_pid
from ksearch.tools.evaluator.shared.sandbox import BARE_ENV, system_binary

BUSY_PERCENT = 10
"""GPU utilisation (percent of the driver's sample period with a kernel running) that counts as someone's work."""
SAMPLES = 6
SAMPLE_GAP_S = 0.2
NVIDIA_SMI_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ComputeApp:
    """One process with a context on a GPU, as ``nvidia-smi --query-compute-apps`` lists it."""

    uuid: str
    pid: int
    name: str
    used_mib: int | None


@dataclass(frozen=True)
class Sharing:
    """A GPU found busy with work that is not this session's."""

    uuid: str
    busy_percent: int
    others: tuple[ComputeApp, ...]

    def describe(self) -> str:
        if self.others:
            named = ", ".join(
                f"pid {app.pid} ({Path(app.name).name or '?'}"
                + (f", {app.used_mib} MiB)" if app.used_mib is not None else ")")
                for app in self.others[:5]
            )
        else:
            named = "none this process can see (another container's, or a process that has exited)"
        return (
            f"the GPU ({self.uuid}) stayed {self.busy_percent} % busy after this evaluation's worker had ended; other "
            f"processes on it: {named}. On a shared GPU an honest kernel's timed windows wait behind the other work, "
            f"which reads as a forged time, so ksearch gives no verdict: give it the GPU to itself while it times "
            f"(CUDA_VISIBLE_DEVICES, an exclusive allocation) and evaluate or resume again"
        )


def parse_apps(text: str) -> list[ComputeApp]:
    """Rows of ``--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits``."""
    apps = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) < 4 or not fields[1].isdigit():
            continue
        uuid, pid, memory = fields[0], int(fields[1]), fields[-1]
        name = ",".join(fields[2:-1])  # a process name may itself hold commas
        apps.append(ComputeApp(uuid, pid, name, int(memory) if memory.isdigit() else None))
    return apps


def parse_utilisation(text: str) -> dict[str, int]:
    """Rows of ``--query-gpu=uuid,utilization.gpu --format=csv,noheader,nounits``: uuid -> percent."""
    readings = {}
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 2 and fields[1].isdigit():
            readings[fields[0]] = int(fields[1])
    return readings


def process_tree(root: int) -> set[int]:
    """``root`` and every process descended from it (from ``/proc``; just ``root`` where there is none)."""
    children: dict[int, list[int]] = {}
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return {root}
    for pid in pids:
        parent = parent_pid(pid)
        if parent is not None:  # None: exited meanwhile
            children.setdefault(parent, []).append(pid)
    tree, frontier = {root}, [root]
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in tree:
                tree.add(child)
                frontier.append(child)
    return tree


def gpu_of(apps: list[ComputeApp], anchor: int) -> str | None:
    """The uuid of the GPU process ``anchor`` holds a context on, if ``nvidia-smi`` lists it."""
    return next((app.uuid for app in apps if app.pid == anchor), None)


def judge(apps: list[ComputeApp], readings: list[dict[str, int]], ours: set[int], anchor: int) -> Sharing | None:
    """The GPU ``anchor`` (a process of ours with a context) is on, if every reading finds it busy; else None.
    Pure: the caller gathers ``apps`` and ``readings``."""
    uuid = gpu_of(apps, anchor)
    if uuid is None or not readings or any(uuid not in reading for reading in readings):
        return None
    busy = min(reading[uuid] for reading in readings)
    if busy < BUSY_PERCENT:
        return None
    others = sorted(
        (app for app in apps if app.uuid == uuid and app.pid not in ours), key=lambda app: -(app.used_mib or 0)
    )
    return Sharing(uuid, busy, tuple(others))


def shared_gpu(anchor: int) -> Sharing | None:
    """Whether the GPU that process ``anchor`` holds a context on is busy with work outside this process's tree
    (see the module docstring); None when it is not, or when ``nvidia-smi`` cannot tell."""
    smi = nvidia_smi()
    if smi is None:
        return None
    apps_text = _query(smi, "--query-compute-apps=gpu_uuid,pid,process_name,used_memory")
    if apps_text is None:
        return None
    apps = parse_apps(apps_text)
    if gpu_of(apps, anchor) is None:  # before a second of readings that could not be judged
        return None
    readings = []
    for index in range(SAMPLES):
        if index:
            time.sleep(SAMPLE_GAP_S)
        text = _query(smi, "--query-gpu=uuid,utilization.gpu")
        if text is None:
            return None
        readings.append(parse_utilisation(text))
    return judge(apps, readings, process_tree(os.getpid()), anchor)


def nvidia_smi() -> str | None:
    return system_binary("nvidia-smi")


def _query(smi: str, query: str) -> str | None:
    """One query's output, or None if it failed or took too long (then the tool is abandoned: one stuck in the
    driver may not even die when killed, and the evaluator must not hang on it)."""
    try:
        process = subprocess.Popen(
            [smi, query, "--format=csv,noheader,nounits"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=BARE_ENV,
        )
    except OSError:
        return None
    try:
        stdout, _ = process.communicate(timeout=NVIDIA_SMI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        try:
            process.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        return None
    return stdout if process.returncode == 0 else None
