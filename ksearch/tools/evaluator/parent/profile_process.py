"""The per-kernel profile of an evaluation taken in a process beside the worker, seen from the parent (issue 31).

Starting PyTorch's profiler (CUPTI) costs 4-7 s once per process, and a process that has profiled launches kernels
slower afterwards (bench/profile_start.py), so the worker cannot start it before it times; started after the timing
it was 20-32 % of a live verdict (bench/RESULTS.md, "Hardware evidence"). Instead an evaluation on a GPU takes a second
process of the candidate's own, started as ``--role profiler``, which paid the profiler's start before it was taken
(a session keeps one started ahead of need; a process starting the profiler beside one timing launches did not slow
them, bench/profile_start.py ``beside``). It gets its request with the worker's and waits: no code of the candidate
runs in it, and it launches nothing, before the parent's go, sent once the worker has exited with a passed verdict.
Then it imports the candidate, its kernels from the evaluation's Triton cache (built there by the worker and the
compile scout) and its autotuner's choices too (``WorkerRequest.cache_autotuning``), and profiles one call per
benchmark config on public seeds (``kernel_profile.profile_shapes``).

Trust: it is sandboxed like any worker and its report is the candidate's word. The profile is a diagnostic for the
model: it never decides a verdict, a score or a promotion, and what is read of the report is bounded here.

Not used, the worker profiling after its timing instead: for a candidate that builds a C++ extension (this process
would build its own copy) or calls ``torch.compile`` (this process would trace and compile its graphs again, one
per shape: on an H200 a public leaderboard kernel's profile calls took 17.8 s here, a 21.6 s profile stage of a 73 s
verdict, against 0.16 s in its worker after the timing, whose profiler started in 0.02 s: 2026-11-29), in
and in low-memory mode (a third CUDA context beside a large task's tensors).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

from pydantic import ValidationError

from ksearch.contracts.evaluation import ShapeProfile, Verdict
from ksearch.contracts.exchange import PROFILE_GO, WorkerRequest, WorkerResult
from ksearch.tools.evaluator.parent.evidence import EXTENSION_MARKERS
from ksearch.tools.evaluator.parent.processes import CANDIDATE_FILE, WorkerProcess
from ksearch.tools.evaluator.profiler.kernel_profile import PROFILE_KERNELS
from ksearch.tools.evaluator.shared.sandbox import read_report

PROFILE_WAIT_S = 60.0
"""How long the verdict waits, after the go, for the profile (then it goes without one)."""
PROFILE_STAGES = frozenset(
    {"profile_wait", "profile_import", "profile_start", "profile_calls", "profile_stop", "profile_read"}
)
"""The stage times read from the process's report (the report is the candidate's word: nothing else of it)."""
NAME_LIMIT = 200
"""A kernel's name is cut to this many characters (the report is the candidate's word)."""


IN_WORKER_MARKERS = (*EXTENSION_MARKERS, "torch.compile")
"""Code holding one of these is profiled in its worker after the timing (see the module's docstring)."""


def profiler_wanted(code: str, device: str, *, low_memory: bool = False) -> bool:
    """Whether an evaluation of ``code`` on ``device`` profiles in a process of its own."""
    return device.startswith("cuda") and not low_memory and not any(marker in code for marker in IN_WORKER_MARKERS)


def ask_profiler(profiler: WorkerProcess, code: str, request: WorkerRequest) -> None:
    """Give ``profiler`` the candidate and its request (the worker's, in mode ``profile``, on public seeds, never the
    evaluation's secret salts): it waits for the go (``collect``)."""
    (profiler.work / CANDIDATE_FILE).write_text(code, encoding="utf-8")
    own = request.model_copy(
        update={
            "mode": "profile",
            "candidate_path": str(profiler.work / CANDIDATE_FILE),
            "result_path": str(profiler.result_path),
            "support_dir": str(profiler.work / "_support"),
            "salt": 0,
            "bench_salt": 0,
            "staging": None,
            "timing": False,
            "profile": False,
            "cache_autotuning": True,
            "yardstick_rounds": 0,
        }
    )
    profiler.send(own.model_dump_json())


@dataclass
class ProfileReport:
    """What the parent takes from a profiling process."""

    profiles: list[ShapeProfile] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    """The process's own breakdown (``profile_wait``, ``profile_import``, ``profile_start``, ``profile_calls``...)."""
    wait_s: float = 0.0
    """From the go to the report: what the verdict waited for the profile."""
    problem: str = ""
    """Why there is no profile, when a profile was asked for and none came."""


def collect(
    profiler: WorkerProcess, *, go: bool, configs: list[str], timeout_s: float = PROFILE_WAIT_S
) -> ProfileReport:
    """Send the go (``go``: the worker passed and was timed) and read the report within ``timeout_s``; without the go
    nothing is asked. The caller kills the process either way."""
    if not go:
        return ProfileReport()
    # A report is read as soon as it exists: one already there was not written for this go (planted in the folder
    # while the process waited, where a machine lacks the containment that keeps candidates out of it).
    try:
        profiler.result_path.unlink(missing_ok=True)
    except OSError as exc:  # a folder or an unremovable entry where the report goes: the candidate's doing
        return ProfileReport(
            problem=f"the profiling process's report could not be cleared before the go ({type(exc).__name__})"
        )
    asked = time.monotonic()
    if not profiler.send(json.dumps({"op": PROFILE_GO})):
        return ProfileReport(
            problem="the profiling process had exited before it was asked (its stderr is in the "
            "evaluation folder while it runs)"
        )
    # Still starting the profiler when the go came (a process taken soon after it was started): that part of the wait
    # is its start, not the profile (the parent's clock: ``profile_ready``).
    profiler.wait_ready(asked + timeout_s)
    ready_s = round(max(0.0, (profiler.ready_at or asked) - asked), 3)
    # The report is written atomically (``write_result``): read it without waiting for the process to tear its CUDA
    # context down (it is killed). ``lexists`` never raises: the folder is the candidate's, which may make it
    # unreadable to a parent that is not root (``Path.exists`` raises PermissionError then).
    report_path = str(profiler.result_path)
    finished = profiler.wait_exit(
        max(0.0, asked + timeout_s - time.monotonic()), or_until=lambda: os.path.lexists(report_path)
    )
    waited = round(time.monotonic() - asked, 3)
    if not finished:
        return ProfileReport(
            wait_s=waited,
            problem=f"the profile was not ready within {timeout_s:g} s",
            stage_seconds={"profile_ready": ready_s},
        )
    text, why = read_report(profiler.result_path)
    try:
        report = WorkerResult.model_validate_json(text or "")
    except ValidationError as exc:
        return ProfileReport(
            wait_s=waited, problem=f"the profiling process left no readable report ({why or type(exc).__name__})"
        )
    stages = {k: round(float(v), 3) for k, v in report.stage_seconds.items() if k in PROFILE_STAGES}
    stages["profile_ready"] = ready_s
    if report.verdict != Verdict.PASSED:
        last = (report.error.strip().splitlines() or ["?"])[-1][:200]
        return ProfileReport(stage_seconds=stages, wait_s=waited, problem=f"the profiling process failed: {last}")
    profiles = bounded(report.profile, configs)
    problem = "" if profiles else "the profiling process profiled no call"
    return ProfileReport(profiles=profiles, stage_seconds=stages, wait_s=waited, problem=problem)


def bounded(profiles: list[ShapeProfile], configs: list[str]) -> list[ShapeProfile]:
    """The report's profiles of ``configs``, in their order, one each, with at most ``PROFILE_KERNELS`` kernels of
    names at most ``NAME_LIMIT`` long: all a candidate-written report can put in a prompt."""
    first: dict[str, ShapeProfile] = {}
    for profile in profiles:
        first.setdefault(profile.config, profile)
    kept = []
    for name in configs:
        profile = first.get(name)
        if profile is None:
            continue
        kernels = [k.model_copy(update={"name": k.name[:NAME_LIMIT]}) for k in profile.kernels[:PROFILE_KERNELS]]
        kept.append(profile.model_copy(update={"kernels": kernels}))
    return kept
