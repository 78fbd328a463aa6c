"""Which containment ncu and the candidate get: a trusted probe tries the rungs (``rungs.ladder``) strongest first,
once per process and device.

The probe profiles a one-kernel program of ksearch's own (``probe_kernel``), never the candidate: a candidate that
failed on purpose must not weaken its own containment. Each rung tried is a ``RungTrial``: its status, the first
lines of ncu's log and of the launcher's and the program's stderr that say what went wrong, and its seconds, so one
run on a GPU tells which rung works and why the others do not (``scripts/ncu_containment_probe.py`` tries them all).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from ksearch import settings
from ksearch.contracts.counters import CounterStatus
from ksearch.tools.containment import policy
from ksearch.tools.counters import ncu_command, ncu_process
from ksearch.tools.counters.rungs import SANDBOX_VARIABLE, Rung, ladder, requested_rungs

PROBE_MODULE = "ksearch.tools.counters.probe_kernel"
PROBE_TIMEOUT_S = 90.0
"""ncu, Python, torch and CUDA's start and one kernel profiled: about 10 s on an H100."""
NO_RUNG = "ncu could not profile a contained process here"


@dataclass(frozen=True)
class RungTrial:
    """What profiling the probe under one rung gave."""

    rung: Rung
    status: CounterStatus
    reasons: tuple[str, ...] = ()
    """The first lines that say what went wrong (none when it worked)."""
    seconds: float = 0.0

    def describe(self) -> str:
        head = f"{self.rung.name} ({self.rung.describe()}): {self.status.value}"
        return head + (f": {' | '.join(self.reasons)}" if self.reasons else "")


def rungs_for(device: str, ncu: str) -> list[Rung]:
    """The rungs to try for ``device``: ``KSEARCH_COUNTERS_SANDBOX``'s, else the ladder of this machine's layers."""
    readable = ncu_command.installation(ncu)
    asked = requested_rungs(settings.COUNTERS_SANDBOX.raw(), readable)
    return asked if asked is not None else ladder(policy.child_layers(device), readable)


def try_rung(
    device: str, ncu: str, rung: Rung, timeout_s: float = PROBE_TIMEOUT_S, *, keep: Path | None = None
) -> RungTrial:
    """Profile the probe under ``rung`` (``keep``: a folder that receives ncu's log and the probe's output)."""
    with ncu_process.scratch("ksearch-ncu-probe-") as folders:
        argv = ncu_command.profile_argv(ncu, folders.ncu, 1, 1, [], sections=("LaunchStats",), metrics=())
        finished = ncu_process.profile(
            argv, PROBE_MODULE, ["--device", device], folders, device, rung, stdin_text=None, timeout_s=timeout_s
        )
        log = ncu_process.tail(folders.ncu / ncu_command.LOG_NAME)
        stderr = ncu_process.tail(folders.work / "stderr.txt")
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            ncu_process.copy_regular(folders.ncu / ncu_command.LOG_NAME, keep / ncu_command.LOG_NAME)
            for name in ("stdout.txt", "stderr.txt"):
                ncu_process.copy_regular(folders.work / name, keep / name)
        if finished.timed_out:
            found = ncu_command.problems(log, stderr)
            reasons = (f"killed after {timeout_s:g} s", *found)
            return RungTrial(rung, CounterStatus.TIMEOUT, reasons, finished.seconds)
        report = ncu_process.is_regular(ncu_command.report_path(folders.ncu))
        status, detail = ncu_command.diagnose(
            log,
            returncode=finished.returncode,
            report_exists=report,
            stderr=stderr,
            restriction=ncu_command.profiling_restriction(),
        )
        if status == CounterStatus.COLLECTED:
            return RungTrial(rung, status, (), finished.seconds)
        reasons = tuple(ncu_command.problems(log, stderr)) or (detail,)
        if status == CounterStatus.NO_PERMISSION:
            reasons = (detail,)
        return RungTrial(rung, status, reasons, finished.seconds)


def probe_rungs(device: str, ncu: str, rungs: list[Rung]) -> tuple[Rung | None, str]:
    """The first rung under which ncu profiles the probe, or None and what each rung tried gave."""
    tried: list[RungTrial] = []
    for rung in rungs:
        trial = try_rung(device, ncu, rung)
        if trial.status == CounterStatus.COLLECTED:
            return rung, ""
        tried.append(trial)
        if trial.status == CounterStatus.NO_PERMISSION:  # fewer layers would not help: every rung drops capabilities
            return None, (
                f"{trial.reasons[0]}; ncu and the kernel's process run without capabilities, in a user namespace "
                f"({rung.describe()}): with the driver's restriction lifted they need none ({SANDBOX_VARIABLE} "
                "chooses other layers, at your own risk)"
            )
    return None, f"{NO_RUNG}: " + "; ".join(trial.describe() for trial in tried)


_chosen: dict[tuple[str, str], tuple[Rung | None, str]] = {}
_chosen_lock = threading.Lock()


def choose_rung(device: str, ncu: str) -> tuple[Rung | None, str]:
    """The containment ncu and the candidate get on ``device`` (once per process, device kind and ncu: a rung opens
    its ncu's installation), or None with why no rung worked."""
    key = (device.split(":")[0], ncu)
    with _chosen_lock:
        if key not in _chosen:
            _chosen[key] = probe_rungs(device, ncu, rungs_for(device, ncu))
        return _chosen[key]
