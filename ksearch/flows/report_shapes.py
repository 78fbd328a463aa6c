"""The report's per-shape table: the best kernel, the seed and the task's reference, timed per benchmark config.

The reference column comes only from measurements the workspace already holds; nothing is measured here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ksearch.contracts.evaluation import Evaluation, Timing
from ksearch.flows.report_model import CandidatePoint, ComparedSource, ShapeRow, ShapeTable
from ksearch.store import Store

if TYPE_CHECKING:
    from ksearch.flows.report_gather import EvaluationCache


def shape_table(
    store: Store,
    run: dict[str, Any],
    best_eval: Evaluation | None,
    points: list[CandidatePoint],
    evaluations: EvaluationCache,
) -> ShapeTable:
    seed_point = next((p for p in points if p.is_seed), None)
    seed_eval = evaluations.get(seed_point.evaluation_id) if seed_point else None
    if seed_point is None:
        seed = ComparedSource(
            label="seed", available=False, note="no seed: the run started from the task spec (no --seed-from)"
        )
    elif seed_eval is None or not seed_eval.timings:
        seed = ComparedSource(
            label="seed",
            available=False,
            note=f"the seed was evaluated but not timed ({seed_eval.summary() if seed_eval else 'no evaluation'})",
        )
    else:
        seed = ComparedSource(
            label="seed",
            available=True,
            note=f"the seed kernel: {seed_eval.summary()}",
            latency_ms=seed_eval.latency_ms,
        )
    eval_key = store.get_evaluation_key(run["best_evaluation_id"]) if run["best_evaluation_id"] else None
    ref_timings, reference = reference_measurement(store, run["task"], eval_key, best_eval)

    if best_eval is None:
        note = "no kernel has passed yet"
    elif not best_eval.timings:
        note = f"correctness only, not timed: {best_eval.summary()}; no per-shape latencies exist"
    else:
        note = f"median latency per benchmark config ({best_eval.timings[0].method} timing on {best_eval.device})"
    rows: dict[str, ShapeRow] = {}
    for source, timings in (
        ("best", best_eval.timings if best_eval else []),
        ("seed", seed_eval.timings if seed_eval and seed.available else []),
        ("reference", ref_timings),
    ):
        for t in timings:
            row = rows.setdefault(t.config, ShapeRow(config=t.config))
            setattr(row, source, t)
    for point in best_eval.roofline if best_eval else []:
        if point.config in rows:
            rows[point.config].roofline = point
    return ShapeTable(
        best_summary=best_eval.summary() if best_eval else None,
        timed=bool(best_eval and best_eval.timings),
        note=note,
        rows=list(rows.values()),
        seed=seed,
        reference=reference,
    )


def reference_measurement(
    store: Store, task_name: str, eval_key: str | None, best_eval: Evaluation | None
) -> tuple[list[Timing], ComparedSource]:
    """The task's reference timed like the best kernel, if the workspace holds such a measurement; never measured here.

    Looked for, in order: a stored evaluation (same evaluation key) of the reference packaged as a candidate (TriMul's
    submission form, a FlashInfer definition's reference); a FlashInfer ``?baseline=FILE`` of per-config reference
    medians; KernelBench's cached eager baseline in ``WORKSPACE/baselines``."""

    def missing(note: str) -> tuple[list[Timing], ComparedSource]:
        return [], ComparedSource(label="reference", available=False, note=note)

    if best_eval is None or not best_eval.timings or eval_key is None:
        return missing("nothing to compare with: the best kernel has no per-shape latencies")
    try:
        from ksearch.tasks.registry import resolve_task

        task = resolve_task(task_name)
    except Exception as exc:  # a task that cannot be loaded here (a missing KernelBench checkout, a moved file)
        return missing(f"the task could not be loaded here to find its reference: {exc}")

    candidate = task.reference_candidate()
    if candidate is not None:
        found = store.find_evaluation(candidate.id, eval_key)
        if found is not None and found[1].passed and found[1].timings:
            return list(found[1].timings), ComparedSource(
                label="reference",
                available=True,
                latency_ms=found[1].latency_ms,
                note=f"the task's reference, evaluated in this workspace like a candidate: {found[1].summary()}",
            )
    baseline_ms = task.reference_latencies_ms()
    if baseline_ms:
        method = best_eval.timings[0].method
        timings = [
            Timing(config=c, median_ms=ms, mean_ms=ms, stdev_ms=0.0, samples=0, method=method)
            for c, ms in baseline_ms.items()
        ]
        return timings, ComparedSource(
            label="reference",
            available=True,
            note="the definition's reference, from the baseline file the task names (medians only)",
        )
    kb = _kernelbench_baseline(task, store.path.parent, eval_key)
    if kb is not None:
        return kb
    return missing(
        "the reference was never timed in this workspace on this device and harness, so the table has no reference "
        "column (the report never measures anything)"
    )


def _kernelbench_baseline(task: Any, workspace: Path, eval_key: str) -> tuple[list[Timing], ComparedSource] | None:
    """A PyTorch baseline of the task's reference (KernelBench's ``Model``) cached in the workspace, if any."""
    if not task.pytorch_baseline_modes:
        return None
    from ksearch.flows.baselines import Baseline, baseline_path, cache_key

    for mode in task.pytorch_baseline_modes:
        path = baseline_path(workspace, cache_key(task, mode, eval_key))
        if path.is_file():
            try:
                base = Baseline.model_validate_json(path.read_text(encoding="utf-8"))
            except ValueError:
                continue
            if base.timings:
                return list(base.timings), ComparedSource(
                    label="reference",
                    available=True,
                    latency_ms=base.latency_ms,
                    note=f"the problem's PyTorch Model ({mode}), cached by an earlier run or sweep in {path.parent}",
                )
    return None
