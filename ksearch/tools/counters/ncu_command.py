"""The Nsight Compute command lines counters are collected and read with, and what its log says went wrong.

One fixed collection, so its cost is fixed too: the sections ``SECTIONS`` (speed of light, occupancy, launch
statistics, warp states, memory and compute workload) plus DRAM bytes, kernel replay (each profiled kernel is
replayed once per pass over the same inputs), only the kernels launched inside the NVTX ranges the counters worker
puts around one call per chosen shape, and at most ``launch_cap`` launches in all. Nsight Compute's defaults stay:
caches flushed before each pass, clocks locked to base (so its durations read slower than the timing's).

ncu runs inside the candidate's containment (``ncu_process``): what the sandbox must let it read (``installation``),
the environment it gets there (``ENVIRONMENT``), and what its log and the processes' stderr say went wrong, in a few
lines (``problems``).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from ksearch import settings
from ksearch.contracts.counters import CounterStatus
from ksearch.tools.counters.ncu_csv import RANGE_PREFIX

NCU_VARIABLE = settings.NCU.name
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
"""ncu writes ``counters.ncu-rep`` into its folder (the sandbox's: the candidate could change it too)."""
LOG_NAME = "ncu.log"
PERMISSION_MARK = "ERR_NVGPUCTRPERM"
NOTHING_PROFILED = ("No kernels were profiled", "No ranges were profiled")
CONNECTED_MARK = "==PROF== Connected to process"
ENVIRONMENT = {"NV_COMPUTE_PROFILER_DISABLE_STOCK_FILE_DEPLOYMENT": "1"}
"""ncu reads its section files from its installation instead of first copying them into the home (Nsight Compute's
documented variable): nothing to write there, and the sandbox's home is a fresh folder anyway."""
INSTALLATION_NAMES = ("nsight-compute", "NsightCompute", "Nsight_Compute")
"""How an Nsight Compute installation's folder starts, beside a CUDA toolkit's ``bin`` (``nsight-compute-2025.3.1``)."""
STANDALONE_ROOT = "/opt/nvidia"
"""Where a toolkit's ncu launcher script looks for Nsight Compute when none lies beside its ``bin`` (CUDA 13's
packages install it as ``/opt/nvidia/nsight-compute/<version>``: seen on an H100 machine, 2026-12-07)."""
DRIVER_PARAMS = Path("/proc/driver/nvidia/params")
PROBLEM_LIMIT = 3
PROBLEM_CHARS = 200
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")
_OWN_LINE = ("ksearch containment", "==ERROR==", "==WARNING==")
_LAUNCHER_ERROR = "ERROR :"
"""How a toolkit's ncu launcher script says it found no Nsight Compute to start."""


def find_ncu(environ: dict[str, str] | None = None) -> str | None:
    """The ncu to run: ``KSEARCH_NCU``, else ``ncu`` on PATH, else CUDA's default install; None when there is none."""
    env = os.environ if environ is None else environ
    chosen = settings.NCU.raw(env)
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    found = shutil.which("ncu", path=env.get("PATH"))
    if found:
        return found
    return next((p for p in DEFAULT_LOCATIONS if os.access(p, os.X_OK)), None)


def installation(ncu: str, standalone_root: str = STANDALONE_ROOT) -> tuple[str, ...]:
    """The folders ``ncu`` runs from, which the sandbox lets it read: its resolved file's folder (a CUDA toolkit's
    ``bin``, or ``/opt/nvidia/nsight-compute/<version>``, outside the allow-list), and for a launcher in a ``bin``
    the Nsight Compute installations it may start (``nsight-compute-<version>`` beside the ``bin``, else under
    ``standalone_root``), with ncu's libraries, the library it puts in the profiled process, and its section files.
    Without them the launcher stops at once ("nsight-compute directory is not found")."""
    real = os.path.realpath(ncu)
    folder = os.path.dirname(real)
    found = [folder]
    if os.path.basename(folder) == "bin":
        for parent in (os.path.dirname(folder), standalone_root):
            found += _installations_in(parent)
    return tuple(path for path in dict.fromkeys(found) if path != "/" and os.path.isdir(path))


def _installations_in(parent: str) -> list[str]:
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return []
    return [os.path.realpath(os.path.join(parent, name)) for name in names if name.startswith(INSTALLATION_NAMES)]


def profiling_restriction(params: Path = DRIVER_PARAMS) -> str:
    """What the NVIDIA driver says of its restriction of counters to administrators (``RmProfilingAdminOnly: 1``,
    or the option's older name), '' where it cannot be read."""
    try:
        text = params.read_text(errors="replace")
    except OSError:
        return ""
    found = re.findall(r"^\s*((?:Rm)?(?:ProfilingAdminOnly|RestrictProfilingToAdminUsers))\s*:\s*(\S+)", text, re.M)
    return ", ".join(f"{name}: {value}" for name, value in found)


def range_name(index: int) -> str:
    """The NVTX range around shape ``index``'s profiled call."""
    return f"{RANGE_PREFIX}{index}"


def profile_argv(
    ncu: str,
    folder: Path,
    shapes: int,
    launch_cap: int,
    program: list[str],
    *,
    sections: tuple[str, ...] = SECTIONS,
    metrics: tuple[str, ...] = EXTRA_METRICS,
) -> list[str]:
    """ncu profiling ``program`` (the counters worker): the report and ncu's own log go to ``folder``, ncu's folder
    in the sandbox; ncu reads no configuration file (the sandbox's home and working folder are fresh anyway)."""
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
        "--config-file",
        "off",
        "--export",
        str(folder / REPORT_NAME),
        "--force-overwrite",
        "--log-file",
        str(folder / LOG_NAME),
    ]
    return [*argv, *program]


def report_path(folder: Path) -> Path:
    return folder / f"{REPORT_NAME}.ncu-rep"


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


def problems(log: str, stderr: str, *, limit: int = PROBLEM_LIMIT) -> list[str]:
    """What went wrong, in the fewest lines: the launcher's own words on stderr (a layer refused, the tool out of
    reach), then ncu's errors and its first warning (its log, or stderr where it could not write one), then the
    program's exception (its last such line); each clipped, at most ``limit``, none twice."""
    logged = [line.strip() for line in log.splitlines()]
    said = [line.strip() for line in stderr.splitlines() if line.strip()]
    launcher = [line for line in said if line.startswith("ksearch containment")]
    errors = [line for line in [*logged, *said] if line.startswith(("==ERROR==", _LAUNCHER_ERROR))]
    warnings = [line for line in [*logged, *said] if line.startswith("==WARNING==")]
    exceptions = [line for line in said if _EXCEPTION_LINE.match(line) and not line.startswith(_OWN_LINE)]
    picked = [*launcher[:1], *errors[:2], *warnings[:1], *exceptions[-1:]]
    return list(dict.fromkeys(line[:PROBLEM_CHARS] for line in picked))[:limit]


def diagnose(
    log: str, *, returncode: int | None, report_exists: bool, stderr: str = "", restriction: str = ""
) -> tuple[CounterStatus, str]:
    """What ncu's own log and the run's stderr say about a collection: ``COLLECTED`` with '' when the report exists
    and nothing went wrong, else the status and a sentence that says why (``problems``' lines; on a refusal of
    counters, what the driver says of its ``restriction``, ``profiling_restriction``)."""
    if PERMISSION_MARK in log or PERMISSION_MARK in stderr:
        return CounterStatus.NO_PERMISSION, (
            "the GPU driver refuses performance counters to this user (ERR_NVGPUCTRPERM"
            + (f"; {restriction}" if restriction else "")
            + "): allow them with the nvidia module option NVreg_RestrictProfilingToAdminUsers=0"
        )
    found = problems(log, stderr)
    why = " | ".join(found)
    if any(mark in log for mark in NOTHING_PROFILED):
        return CounterStatus.FAILED, "ncu profiled no kernel inside the marked calls" + (f" ({why})" if why else "")
    if not report_exists:
        if not found and log and CONNECTED_MARK not in log:
            found = ["ncu never connected to the profiled process"]
        tail = f"ncu exited with status {returncode} and wrote no report"
        return CounterStatus.FAILED, " | ".join(found) or tail
    return CounterStatus.COLLECTED, ""
