"""Counters of one candidate: Nsight Compute inside the candidate's containment, started here (the parent's side).

    containment launcher (the probe's rung) -> ncu -> worker --role counters (one call per shape in an NVTX range)
    then ``ncu --import`` of that report, twice (kernel names; kernels renamed by their range), contained, parsed here.

The numbers come from ncu's report, never from the candidate's output. ncu's library runs inside the profiled
process (that is how it reads the GPU's counters), and ncu shares the sandbox with the candidate (``ncu_process``),
so a hostile candidate could disturb what it measures of itself or change the report: counters are diagnostics for
the model and never decide a verdict, a score or a promotion.

The layers are the strongest rung a trusted probe finds ncu can profile through (``probe``), once per process;
``KSEARCH_COUNTERS_SANDBOX`` names them instead (``off``, or a comma list).
"""

from __future__ import annotations

import functools
import os
import subprocess
import time
from pathlib import Path

from ksearch.contracts.counters import CounterReport, CounterStatus, ShapeCounters
from ksearch.contracts.exchange import WorkerRequest, WorkerResult
from ksearch.tools.counters import budget, ncu_command, ncu_process
from ksearch.tools.counters.ncu_csv import Launch, RawPageError, parse_raw_page, range_of, shape_counters
from ksearch.tools.counters.ncu_process import Folders, ImportFailure
from ksearch.tools.counters.probe import choose_rung
from ksearch.tools.counters.rungs import Rung
from ksearch.tools.evaluator.parent.request import EvalRequest
from ksearch.tools.evaluator.shared.sandbox import read_report

WORKER_MODULE = "ksearch.tools.evaluator.worker.main"
WORKER_STAGES = {"counters_load": "load", "counters_warm": "warm", "counters_profiled": "profiled"}
"""The counters worker's own stages (its report) under the names ``CounterReport.stages`` gives them."""


def collect_counters(
    request: EvalRequest,
    shapes: list[str],
    *,
    timeout_s: float | None = None,
    launch_cap: int | None = None,
    keep: Path | None = None,
) -> CounterReport:
    """Nsight Compute's counters of ``request``'s candidate on ``shapes`` (benchmark config names, in the order they
    are called), or a report that says why there are none. Never raises for the candidate's, the tool's or this
    machine's failure (counters are diagnostics: a fault here must not end an evaluation or a run). ``keep``: a
    folder that receives ncu's report (``counters.ncu-rep``, for Nsight Compute's UI), its log and the raw pages
    read from it."""
    started = time.monotonic()
    try:
        return _collect(request, shapes, started, timeout_s=timeout_s, launch_cap=launch_cap, keep=keep)
    except Exception as exc:  # noqa: BLE001 - a diagnostic: the fault is said in the report, never raised
        why = f"the counters collector failed: {type(exc).__name__}: {exc}"[:400]
        return CounterReport(status=CounterStatus.FAILED, detail=why, wall_s=round(time.monotonic() - started, 3))


def _collect(
    request: EvalRequest,
    shapes: list[str],
    started: float,
    *,
    timeout_s: float | None,
    launch_cap: int | None,
    keep: Path | None,
) -> CounterReport:
    def report(status: CounterStatus, detail: str = "", **fields: object) -> CounterReport:
        return CounterReport(status=status, detail=detail, wall_s=round(time.monotonic() - started, 3), **fields)  # type: ignore[arg-type]

    if request.device == "cpu":
        return report(CounterStatus.NO_GPU, "the CPU (Triton's interpreter) has no hardware counters")
    found = ncu_command.find_ncu()
    if found is None:
        return report(
            CounterStatus.NO_NCU,
            f"Nsight Compute (ncu) is not on PATH here; install it, or set {ncu_command.NCU_VARIABLE} to its path",
        )
    ncu = resolved(found)
    from ksearch.tasks.registry import resolve_task  # not at import: the task may import torch

    task = resolve_task(request.task)
    by_name = {c.name: c for c in task.benchmark_configs(request.device)}
    chosen = [name for name in shapes if name in by_name]
    if not chosen:
        return report(CounterStatus.FAILED, f"none of {shapes} is a benchmark shape of {request.task}")
    minimal = minimal_bytes(task, [by_name[name] for name in chosen])
    rung, why = choose_rung(request.device, ncu)
    if rung is None:
        status = CounterStatus.NO_PERMISSION if ncu_command.PERMISSION_MARK in why else CounterStatus.FAILED
        return report(status, why)
    cap = launch_cap or budget.launch_cap(len(chosen))
    limit = timeout_s or budget.timeout_s(len(chosen))
    common: dict[str, object] = {"launch_cap": cap, "layers": rung.describe(), "tool": tool_version(ncu)}
    with ncu_process.scratch("ksearch-counters-") as folders:
        worker_request = counters_request(request, folders.work, chosen)
        argv = ncu_command.profile_argv(ncu, folders.ncu, len(chosen), cap, [])
        finished = ncu_process.profile(
            argv,
            WORKER_MODULE,
            ["--device", request.device, "--role", "counters"],
            folders,
            request.device,
            rung,
            stdin_text=worker_request.model_dump_json(),
            timeout_s=limit,
        )
        result = worker_result(Path(worker_request.result_path))
        common["stages"] = stages(finished.seconds, result)
        if finished.timed_out:
            return report(CounterStatus.TIMEOUT, f"ncu and the candidate were killed after {limit:g} s", **common)
        log = ncu_process.tail(folders.ncu / ncu_command.LOG_NAME)
        status, detail = ncu_command.diagnose(
            log,
            returncode=finished.returncode,
            report_exists=ncu_process.is_regular(ncu_command.report_path(folders.ncu)),
            stderr=ncu_process.tail(folders.work / "stderr.txt"),
            restriction=ncu_command.profiling_restriction(),
        )
        notes = worker_notes(result)
        if status != CounterStatus.COLLECTED:
            return report(status, "; ".join(part for part in (detail, notes) if part), **common)
        read_started = time.monotonic()
        try:
            shaped = read_ncu_report(ncu, folders, request.device, rung, chosen, minimal, keep=keep)
        except (RawPageError, ImportFailure, OSError, subprocess.SubprocessError) as exc:
            return report(CounterStatus.FAILED, f"ncu's report could not be read: {exc}"[:400], **common)
        finally:
            common["stages"] = {**common["stages"], "import": round(time.monotonic() - read_started, 3)}  # type: ignore[dict-item]
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                for name in (ncu_command.report_path(folders.ncu).name, ncu_command.LOG_NAME):
                    ncu_process.copy_regular(folders.ncu / name, keep / name)
    if not shaped:
        return report(
            CounterStatus.FAILED, "ncu's report holds no kernel of the marked calls" + _suffix(notes), **common
        )
    capped = sum(s.launches for s in shaped) >= cap
    detail = "; ".join(
        part for part in (f"launch cap of {cap} reached: later kernels not profiled" if capped else "", notes) if part
    )
    return report(CounterStatus.COLLECTED, detail, shapes=shaped, device=request.device, **common)


def resolved(ncu: str) -> str:
    """ncu's own file, links resolved: the sandbox starts it by the path its file layer lets it read (a link in a
    folder the mount layer empties, ``/opt`` say, is not there)."""
    return os.path.realpath(ncu)


def counters_request(request: EvalRequest, work: Path, configs: list[str]) -> WorkerRequest:
    """The counters worker's request: public seeds (never an evaluation's secret salts), nothing checked or timed."""
    candidate = work / "candidate.py"
    candidate.write_text(request.candidate.code, encoding="utf-8")
    return WorkerRequest(
        task=request.task,
        device=request.device,
        entry_point=request.candidate.entry_point,
        candidate_path=str(candidate),
        result_path=str(work / "result.json"),
        mode="counters",
        support_dir=str(work / "_support"),
        counter_configs=configs,
    )


def read_ncu_report(
    ncu: str,
    folders: Folders,
    device: str,
    rung: Rung,
    configs: list[str],
    minimal: dict[str, float],
    *,
    keep: Path | None = None,
) -> list[ShapeCounters]:
    """The report's launches by shape, read by ncu in contained processes (``ncu_process.import_pages``): one page
    for the figures, one with each kernel renamed by its NVTX range (``keep``: both pages are written there too)."""
    report = ncu_command.report_path(folders.ncu)
    ranged = len(configs) > 1 or keep is not None
    pages = ncu_process.import_pages(ncu, report, folders, device, rung, by_range=ranged)
    page, renamed = pages[0], (pages[1] if ranged else "")
    launches = parse_raw_page(page)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / "raw_page.csv").write_text(page)
        (keep / "raw_page_by_range.csv").write_text(renamed)
    if len(configs) == 1:
        shape_of = {launch.id: 0 for launch in launches}
    else:
        shape_of = carried_ranges(parse_raw_page(renamed))
    return shape_counters(launches, shape_of, configs, minimal)


def stages(ncu_s: float, result: WorkerResult | None) -> dict[str, float]:
    """Where a collection's time went (``CounterReport.stages``): ``ncu`` (ncu with the worker, start to exit),
    measured here, and the worker's own ``load``, ``warm`` and ``profiled`` (its report: diagnostics), the rest of
    ``ncu``'s time being ``start`` (the launcher's layers, ncu's, Python's and the worker's start, and exit)."""
    found = {"ncu": ncu_s}
    if result is not None:
        found |= {name: result.stage_seconds[key] for key, name in WORKER_STAGES.items() if key in result.stage_seconds}
    worker = sum(found.get(name, 0.0) for name in WORKER_STAGES.values())
    if worker:
        found["start"] = round(max(0.0, ncu_s - worker), 3)
    return found


def carried_ranges(renamed: list[Launch]) -> dict[int, int]:
    """Each launch's shape from its innermost NVTX range; a launch inside a range of the candidate's own (nested in
    ours, so renamed after it) takes the shape of the launch before it: the shapes' calls run one after another."""
    shape_of: dict[int, int] = {}
    current: int | None = None
    for launch in sorted(renamed, key=lambda x: x.id):
        index = range_of(launch.name)
        current = index if index is not None else current
        if current is not None:
            shape_of[launch.id] = current
    return shape_of


def minimal_bytes(task: object, configs: list) -> dict[str, float]:
    found = {}
    for config in configs:
        try:
            found[config.name] = float(task.flops_and_bytes(config)[1])  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - a task without a cost model for this shape
            continue
    return found


def worker_result(path: Path) -> WorkerResult | None:
    """The counters worker's own report (the candidate's process wrote it: notes and stage times only), if any."""
    text, _ = read_report(path)
    if not text:
        return None
    try:
        return WorkerResult.model_validate_json(text)
    except ValueError:
        return None


def worker_notes(result: WorkerResult | None) -> str:
    """Which of the candidate's calls failed under ncu (its own report: a note, bounded)."""
    if result is None:
        return ""
    if result.error:
        return f"the candidate failed under ncu: {result.error.strip().splitlines()[-1][:200]}"
    return "; ".join(note[:200] for note in result.notes[:2])


@functools.cache
def tool_version(ncu: str) -> str:
    """``ncu --version``, once per process and executable."""
    try:
        out = subprocess.run(ncu_command.version_argv(ncu), capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return "ncu"
    return ncu_command.version_of(out.stdout) or "ncu"


def _suffix(notes: str) -> str:
    return f" ({notes})" if notes else ""
