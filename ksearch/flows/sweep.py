"""Sweeps: one search per KernelBench problem, resumable, reported as KernelBench's fast_p and geomean speedup.

``run_sweep(SweepSpec(...), workspace=...)`` runs ``ksearch.flows.run.start_run`` once per problem of a level
(sequentially), and keeps a JSON manifest at ``<workspace>/sweeps/<name>.json`` with one entry per problem: its run id,
status, correctness, latency, baseline latency and speedup. Running the same sweep again:

- skips problems whose run finished (their results are re-read from the store if the manifest lacks them);
- resumes a problem whose run exists but did not finish (interrupted, killed, or an error), with ``resume_run``;
- starts the others.

Run ids are deterministic (``<name>-p<id>``), so a crash between creating a run and saving the manifest is harmless.
``--model`` may contain ``{problem}`` and ``{level}``, replaced per problem (e.g. per-problem replay files).
Speedups (``ksearch.tasks.kernelbench.baseline``) need a GPU; on the CPU interpreter only fast_0 (correctness) means
anything and speedups are reported as missing.

The KernelBench checks of issue 36 are reported per problem and summed per check (``summary["checks"]``: how many
problems each check failed at least one kernel of), so a sweep says what its fast_p owes to them. A problem whose
reference is not deterministic is not searched: it is ``unjudgeable`` (``summary["unjudgeable"]``), listed apart,
and counts as not correct, as in KernelBench's fast_p. With ``kernelbench:LEVEL?allow=reference_op`` (kernels may keep
some of the reference's PyTorch ops) every problem's task allows it, and ``summary["waived"]`` says how many of the
correct kernels relied on an allowed rule.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ksearch.errors import KsearchError, RunInterrupted, UserError
from ksearch.flows import metrics

SWEEPS_DIR = "sweeps"
EntryStatus = Literal["pending", "running", "finished", "error", "unjudgeable"]
_COMPARED = ("suite", "model", "device", "max_rounds", "baseline", "language")
"""Settings that must match for a sweep to be continued under the same name."""


class SweepSpec(BaseModel):
    """What a sweep was asked to do (stored in its manifest)."""

    model_config = ConfigDict(extra="forbid")

    suite: str
    """``kernelbench:<level>`` (e.g. ``kernelbench:1``), optionally with ``?allow=...`` for every problem's task."""
    model: str
    problems: str | None = None
    """Problem ids and ranges (``1-20,25``); None means every problem of the level."""
    max_rounds: int = Field(default=20, ge=1)
    device: str = "cpu"
    baseline: Literal["eager", "compile"] = "eager"
    kernelbench_root: str | None = None
    name: str | None = None
    language: str = "triton"
    stagnation_window: int = Field(default=5, ge=1)
    run_timeout_s: float = Field(default=300.0, gt=0)
    base_url: str | None = None
    temperature: float | None = None


class ProblemEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    problem_id: int
    title: str
    task: str
    run_id: str
    status: EntryStatus = "pending"
    correct: bool = False
    latency_ms: float | None = None
    baseline_ms: float | None = None
    speedup: float | None = None
    best_candidate_id: str | None = None
    done_reason: str | None = None
    error: str | None = None
    updated_at: float = 0.0
    checks: dict[str, int] = Field(default_factory=dict)
    """KernelBench check -> how many of this problem's evaluated kernels it failed."""
    waived: list[str] = Field(default_factory=list)
    """Allowed rules (``?allow=``) the best kernel broke: its speedup is partly PyTorch's own."""


class SweepManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    spec: SweepSpec
    created_at: float
    entries: dict[str, ProblemEntry] = Field(default_factory=dict)
    """Keyed by the problem id as a string (JSON object keys)."""


class SweepReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    manifest: str
    spec: SweepSpec
    problems: list[ProblemEntry]
    summary: dict[str, Any]
    """``ksearch.flows.metrics.summary`` over the selected problems: n, correct, fast_p by threshold,
    geomean_speedup."""


ProblemSink = Callable[[str, ProblemEntry], None]
"""Receives ('start' | 'resume' | 'skip' | 'done' | 'error', entry) as the sweep goes."""
EventSinkFactory = Callable[[ProblemEntry], Any]
"""Builds the per-run graph event sink (``runner.start_run(on_event=...)``) for a problem, or returns None."""


# -- names and files ------------------------------------------------------------------------------------------------
def _slug(text: str, limit: int = 40) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^A-Za-z0-9._-]", "-", text)).strip("-")[:limit] or "x"


def parse_suite(suite: str) -> int:
    """The level of ``kernelbench:<level>``."""
    from ksearch.tasks.kernelbench.problem_files import PREFIX, parse_level

    if not suite.startswith(PREFIX):
        raise UserError(f"unknown sweep suite {suite!r}", hint="sweep a KernelBench level: ksearch sweep kernelbench:1")
    return parse_level(suite.removeprefix(PREFIX).partition("?")[0])


def suite_options(suite: str) -> str:
    """The canonical ``?allow=...`` of a suite, carried into every problem's task name ('' for none)."""
    from ksearch.tasks.kernelbench.problem_files import options_suffix, parse_options

    return options_suffix(parse_options(suite.removeprefix("kernelbench:"))[1])


def sweep_name(spec: SweepSpec) -> str:
    if spec.name:
        return _slug(spec.name, 80)
    level = parse_suite(spec.suite)
    allowed = suite_options(spec.suite).removeprefix("?allow=").replace(",", "+")
    name = (
        f"kb-l{level}-{_slug(spec.model.replace('{', '').replace('}', ''))}-{_slug(spec.device, 10)}-r{spec.max_rounds}"
    )
    return name + (f"-allow-{_slug(allowed, 40)}" if allowed else "")


def manifest_path(workspace: Path, name: str) -> Path:
    return workspace / SWEEPS_DIR / f"{name}.json"


def load_manifest(path: Path) -> SweepManifest | None:
    if not path.is_file():
        return None
    return SweepManifest.model_validate_json(path.read_text(encoding="utf-8"))


def save_manifest(path: Path, manifest: SweepManifest) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    os.replace(partial, path)


def select_problems(spec: SweepSpec) -> dict[int, Path]:
    """Problem id -> file for the sweep's level and ``--problems`` selection (every id must exist)."""
    from ksearch.tasks.kernelbench.problem_files import (
        KernelBenchError,
        compact_ranges,
        kernelbench_root,
        parse_ids,
        problems,
    )

    level = parse_suite(spec.suite)
    found = problems(kernelbench_root(spec.kernelbench_root), level)
    if spec.problems is None:
        if not found:
            raise KernelBenchError(f"KernelBench level {level} holds no problems")
        return found
    wanted = parse_ids(spec.problems)
    missing = [i for i in wanted if i not in found]
    if missing:
        raise KernelBenchError(
            f"KernelBench level {level} has no problem {compact_ranges(missing)} "
            f"(problems there: {compact_ranges(list(found)) or 'none'})"
        )
    return {i: found[i] for i in wanted}


# -- the sweep ------------------------------------------------------------------------------------------------------
def run_sweep(
    spec: SweepSpec,
    *,
    workspace: Path,
    on_problem: ProblemSink | None = None,
    event_sink: EventSinkFactory | None = None,
) -> SweepReport:
    """Run (or continue) the sweep and return its report. KeyboardInterrupt saves the manifest and propagates."""
    from ksearch.tasks.kernelbench.problem_files import describe_level_path

    name = sweep_name(spec)
    path = manifest_path(workspace, name)
    selected = select_problems(spec)
    manifest = load_manifest(path)
    if manifest is None:
        manifest = SweepManifest(name=name, spec=spec, created_at=time.time())
    else:
        _check_same_settings(manifest.spec, spec, name)
        manifest.spec = manifest.spec.model_copy(update={"problems": spec.problems})
    level = parse_suite(spec.suite)
    for problem_id, file in selected.items():
        key = str(problem_id)
        if key not in manifest.entries:
            manifest.entries[key] = ProblemEntry(
                problem_id=problem_id,
                title=describe_level_path(file),
                task="kernelbench:" + str(file.resolve()) + suite_options(spec.suite),
                run_id=f"{name}-p{problem_id}",
            )
    save_manifest(path, manifest)

    for problem_id in selected:
        entry = manifest.entries[str(problem_id)]
        if entry.status == "finished":
            if on_problem:
                on_problem("skip", entry)
            continue
        try:
            if _unjudgeable(spec, entry):
                save_manifest(path, manifest)
                if on_problem:
                    on_problem("unjudgeable", entry)
                continue
            _run_problem(spec, entry, level, workspace, on_problem, event_sink)
        except (KeyboardInterrupt, RunInterrupted):  # Ctrl-C / SIGTERM stop the sweep, not just this problem
            entry.status, entry.error, entry.updated_at = "running", "interrupted by the user", time.time()
            save_manifest(path, manifest)
            raise
        except Exception as exc:  # one problem's failure must not end the sweep; it is retried next time
            entry.status, entry.error, entry.updated_at = "error", _one_line(exc), time.time()
            if on_problem:
                on_problem("error", entry)
        save_manifest(path, manifest)
    return report(manifest, path, selected=list(selected))


def _unjudgeable(spec: SweepSpec, entry: ProblemEntry) -> bool:
    """Whether the problem cannot be judged as written (its reference is random); if so the entry says why."""
    from ksearch.tasks.kernelbench import UnjudgeableProblem
    from ksearch.tasks.registry import prepare_task

    try:
        prepare_task(entry.task, device=spec.device)  # in a process without the key (``tasks.keyless``)
    except UnjudgeableProblem as exc:
        entry.status, entry.correct, entry.updated_at = "unjudgeable", False, time.time()
        entry.error = f"{exc} (fix: {exc.hint})"
        return True
    return False


def _check_same_settings(old: SweepSpec, new: SweepSpec, name: str) -> None:
    differ = [f for f in _COMPARED if getattr(old, f) != getattr(new, f)]
    if differ:
        detail = ", ".join(f"{f}: {getattr(old, f)!r} then, {getattr(new, f)!r} now" for f in differ)
        raise UserError(
            f"sweep {name} already exists with other settings ({detail})",
            hint="continue it with its settings, or start another with --name NEW",
        )


def _run_problem(
    spec: SweepSpec,
    entry: ProblemEntry,
    level: int,
    workspace: Path,
    on_problem: ProblemSink | None,
    event_sink: EventSinkFactory | None,
) -> None:
    from ksearch.errors import RunNotFoundError
    from ksearch.flows import run as runner
    from ksearch.flows.run_config import run_config

    store = runner.open_store(workspace)
    try:
        try:
            existing = store.get_run(entry.run_id)
            existing = existing if existing["id"] == entry.run_id else None
        except RunNotFoundError:
            existing = None
    finally:
        store.close()
    sink = event_sink(entry) if event_sink else None
    entry.status, entry.error, entry.updated_at = "running", None, time.time()
    if existing is not None and existing["status"] == "finished":
        pass  # finished after the manifest was last saved: just collect it
    elif existing is not None:
        if on_problem:
            on_problem("resume", entry)
        runner.resume_run(entry.run_id, workspace=workspace, on_event=sink, base_url=spec.base_url)
    else:
        if on_problem:
            on_problem("start", entry)
        config = run_config(
            entry.task,
            spec.model.replace("{problem}", str(entry.problem_id)).replace("{level}", str(level)),
            run_id=entry.run_id,  # deterministic: a sweep run again finds its problems' runs
            language=spec.language,
            base_url=spec.base_url,
            temperature=spec.temperature,
            device=spec.device,
            max_rounds=spec.max_rounds,
            stagnation_window=spec.stagnation_window,
            run_timeout_s=spec.run_timeout_s,
        )
        runner.start_run(config, workspace=workspace, on_event=sink)
    _collect(spec, entry, workspace)
    entry.status, entry.updated_at = "finished", time.time()
    if on_problem:
        on_problem("done", entry)


def _collect(spec: SweepSpec, entry: ProblemEntry, workspace: Path) -> None:
    """Fill the entry's result from the store, and the speedup from the (cached) baseline when it is timed."""
    from ksearch.flows import run as runner
    from ksearch.flows.baselines import measure_baseline, speedup
    from ksearch.tasks.kernelbench.judging import check_of
    from ksearch.tasks.registry import resolve_task
    from ksearch.tools.integrity import reference_ops

    task = resolve_task(entry.task)
    store = runner.open_store(workspace)
    try:
        run = store.get_run(entry.run_id)
        evaluation = store.get_evaluation(run["best_evaluation_id"]) if run["best_evaluation_id"] else None
        best_code = store.get_candidate(run["best_candidate_id"]).code if run["best_candidate_id"] else ""
        ids = dict.fromkeys(a["evaluation_id"] for a in store.list_attempts(entry.run_id) if a["evaluation_id"])
        checks = [check_of(store.get_evaluation(i)) for i in ids]
    finally:
        store.close()
    entry.checks = {c: checks.count(c) for c in dict.fromkeys(checks) if c is not None}
    entry.waived = reference_ops.waived(best_code, task) if best_code else []
    entry.done_reason = run.get("done_reason")
    entry.best_candidate_id = run["best_candidate_id"]
    entry.correct = evaluation is not None and evaluation.passed
    entry.latency_ms = evaluation.latency_ms if evaluation is not None and evaluation.timed else None
    entry.baseline_ms = entry.speedup = None
    if entry.correct and entry.latency_ms is not None and spec.device != "cpu":
        base = measure_baseline(
            task,
            device=spec.device,
            mode=spec.baseline,
            workspace=workspace,
            run_timeout_s=max(spec.run_timeout_s, 600.0),
        )
        entry.baseline_ms = base.latency_ms
        entry.speedup = speedup(base, entry.latency_ms)
        if base.latency_ms is None:
            entry.error = f"baseline ({spec.baseline}) not measured: {base.verdict} {base.log[:200]}".strip()


def report(manifest: SweepManifest, path: Path, *, selected: list[int] | None = None) -> SweepReport:
    ids = selected if selected is not None else sorted(int(k) for k in manifest.entries)
    rows = [manifest.entries[str(i)] for i in ids]
    return SweepReport(
        name=manifest.name,
        manifest=str(path),
        spec=manifest.spec,
        problems=rows,
        summary={**metrics.summary(rows), **checks_summary(rows)},
    )


def checks_summary(rows: list[ProblemEntry]) -> dict[str, Any]:
    """{"checks": {check: problems it failed a kernel of}, "unjudgeable": [problem ids], "waived": {rule: correct
    problems whose kernel relied on it}}, checks in ``CHECKS`` order."""
    from ksearch.tasks.kernelbench.judging import CHECKS

    touched = {c: sum(1 for r in rows if r.checks.get(c)) for c in CHECKS}
    waived: dict[str, int] = {}
    for row in rows:
        for rule in row.waived if row.correct else []:
            waived[rule] = waived.get(rule, 0) + 1
    return {
        "checks": {c: n for c, n in touched.items() if n},
        "unjudgeable": [r.problem_id for r in rows if r.status == "unjudgeable"],
        "waived": waived,
    }


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    hint = getattr(exc, "hint", "") if isinstance(exc, KsearchError) else ""
    return f"{type(exc).__name__}: {text}" + (f" (hint: {hint})" if hint else "")


def report_json(rep: SweepReport) -> str:
    return json.dumps(rep.model_dump(mode="json"), indent=2)


__all__ = [
    "ProblemEntry",
    "SweepManifest",
    "SweepReport",
    "SweepSpec",
    "load_manifest",
    "manifest_path",
    "report",
    "run_sweep",
    "select_problems",
    "sweep_name",
]
