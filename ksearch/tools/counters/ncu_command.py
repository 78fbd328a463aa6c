"""The Nsight Compute command lines counters are collected and read with, and what its log says went wrong.

One fixed collection, so its cost is fixed too: the sections ``SECTIONS`` (speed of light, occupancy, launch
statistics, warp states, memory and compute workload) plus DRAM bytes, kernel replay (each profiled kernel is
replayed once per pass over the same inputs), only the kernels launched inside the NVTX ranges the counters worker
puts around one call per chosen shape, and at most ``launch_cap`` launches in all. Nsight Compute's defaults stay:
caches flushed before each pass, clocks locked to base (so its durations read slower than the timing's).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from ksearch.contracts.counters import CounterStatus
from ksearch.tools.counters.ncu_csv import RANGE_PREFIX

NCU_VARIABLE = "KSEARCH_NCU"
"""The ncu executable to use (else ``ncu`` on PATH, else CUDA's default install)."""
DEFAULT_LOCATIONS = ("/usr/local/cuda/bin/ncu",)
SECTIONS = (
    "SpeedOfLight",
    "Occupancy",
    "LaunchStats",
    "WarpStateStats",
    "MemoryWorkloadAnalysis",
    "ComputeWorkloadAnalysis",
)
EXTRA_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
REPORT_NAME = "counters"
"""ncu writes ``counters.ncu-rep`` into the trusted folder."""
LOG_NAME = "ncu.log"
LOG_LIMIT = 400
"""A failure quotes this many characters of ncu's log at most."""
PERMISSION_MARK = "ERR_NVGPUCTRPERM"
NOTHING_PROFILED = ("No kernels were profiled", "No ranges were profiled")


def find_ncu(environ: dict[str, str] | None = None) -> str | None:
    """The ncu to run: ``KSEARCH_NCU``, else ``ncu`` on PATH, else CUDA's default install; None when there is none."""
    env = os.environ if environ is None else environ
    chosen = env.get(NCU_VARIABLE, "")
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    found = shutil.which("ncu", path=env.get("PATH"))
    if found:
        return found
    return next((p for p in DEFAULT_LOCATIONS if os.access(p, os.X_OK)), None)


def range_name(index: int) -> str:
    """The NVTX range around shape ``index``'s profiled call."""
    return f"{RANGE_PREFIX}{index}"


def profile_argv(
    ncu: str,
    trusted: Path,
    shapes: int,
    launch_cap: int,
    program: list[str],
    *,
    sections: tuple[str, ...] = SECTIONS,
    metrics: tuple[str, ...] = EXTRA_METRICS,
) -> list[str]:
    """ncu profiling ``program`` (the contained counters worker): the report and ncu's own log go to ``trusted``,
    a folder the candidate cannot write."""
    argv = [
        ncu,
        "--target-processes",
        "all",
        "--replay-mode",
        "kernel",
        "--nvtx",
        *[arg for index in range(shapes) for arg in ("--nvtx-include", f"{range_name(index)}/")],
        "--launch-count",
        str(launch_cap),
        *[arg for section in sections for arg in ("--section", section)],
        *(["--metrics", ",".join(metrics)] if metrics else []),
        "--print-summary",
        "none",
        "--export",
        str(trusted / REPORT_NAME),
        "--force-overwrite",
        "--log-file",
        str(trusted / LOG_NAME),
    ]
    return [*argv, *program]


def report_path(trusted: Path) -> Path:
    return trusted / f"{REPORT_NAME}.ncu-rep"


def import_argv(ncu: str, report: Path, *, by_range: bool) -> list[str]:
    """ncu reading its own report as the raw CSV page; ``by_range``: each kernel named by its NVTX range instead."""
    argv = [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]
    return [*argv, "--print-nvtx-rename", "kernel"] if by_range else argv


def version_argv(ncu: str) -> list[str]:
    return [ncu, "--version"]


def version_of(text: str) -> str:
    """'ncu 2025.3.0.0' from ``ncu --version``'s output (a line ``Version 2025.3.0.0 (build ...)``), '' if none."""
    match = re.search(r"Version\s+(\d[\w.]*)", text)
    return f"ncu {match.group(1)}" if match else ""


def diagnose(log: str, *, returncode: int | None, report_exists: bool) -> tuple[CounterStatus, str]:
    """What ncu's own log (never the candidate's output) says about a collection: ``COLLECTED`` with '' when the
    report exists and nothing went wrong, else the status and a sentence that says why."""
    if PERMISSION_MARK in log:
        return CounterStatus.NO_PERMISSION, (
            "the GPU driver refuses performance counters to this user (ERR_NVGPUCTRPERM): allow them with the "
            "nvidia module option NVreg_RestrictProfilingToAdminUsers=0, or run as an administrator"
        )
    errors = [line.strip() for line in log.splitlines() if line.startswith("==ERROR==")]
    if any(mark in log for mark in NOTHING_PROFILED):
        return CounterStatus.FAILED, "ncu profiled no kernel inside the marked calls" + (
            f" ({errors[0][:LOG_LIMIT]})" if errors else ""
        )
    if not report_exists:
        why = errors[0] if errors else f"ncu exited with status {returncode} and wrote no report"
        return CounterStatus.FAILED, why[:LOG_LIMIT]
    return CounterStatus.COLLECTED, ""
