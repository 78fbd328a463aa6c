"""Baselines, measured by the evaluator for the flows that need them (``run``/``eval`` speedups, ``sweep``, bench
scripts): a task only says what its baseline runs (``ksearch.tasks.kernelbench.baseline``,
``ksearch.tasks.flashinfer.baseline``), this module times it.

KernelBench: the problem's own ``Model`` is evaluated through the same ``evaluate()`` as candidates, on the same
benchmark configs, seeds and timing procedure, in a fresh worker process, and cached per (problem content, mode,
device model and software versions) in ``<workspace>/baselines/<key>.json``, so a run, an ``eval`` or a sweep
measures it once. ``speedup(baseline, evaluation)`` = baseline latency / candidate latency, both the geometric mean
of the per-config medians over the same configs. On the CPU (Triton interpreter) nothing is timed: the baseline has
``latency_ms=None`` and speedups are None. The baseline is trusted code (the user's problem file); the harness runs
it with the thread rule off (``EvalRequest.harness_baseline``), since torch.compile keeps worker threads.

FlashInfer-Bench: the definition's reference source defines ``run(*inputs)`` exactly like a solution, so it is
evaluated like one; the medians per benchmark config are written to a JSON file that
``flashinfer:<def>?baseline=FILE`` reads (flashinfer-bench's ``speedup_factor``, averaged like K-Search's
``mean_vs_baseline``). FlashInfer's production kernels (``ksearch.tasks.flashinfer.production``) go through the same
door, as the harness's own baseline: ``measure_flashinfer_production``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Timing
from ksearch.tasks.flashinfer.baseline import reference_candidate
from ksearch.tasks.flashinfer.definitions import FlashInferError
from ksearch.tasks.flashinfer.production import production_source
from ksearch.tasks.kernelbench import KernelBenchTask
from ksearch.tasks.kernelbench.baseline import BASELINE_MODES, BASELINE_VERSION, baseline_candidate
from ksearch.tasks.keyless import DescribedTask
from ksearch.tasks.registry import resolve_task
from ksearch.tools.evaluator import EvalRequest, evaluate
from ksearch.tools.fingerprint import probe_device

BaselineMode = Literal["eager", "compile"]


# -- KernelBench --------------------------------------------------------------------------------------------------
class Baseline(BaseModel):
    """The reference's latency on one device, measured like a candidate."""

    model_config = ConfigDict(extra="forbid")

    task: str
    mode: str
    device: str
    key: str
    latency_ms: float | None = None
    """Geometric mean of the per-config medians; None when untimed (CPU) or when the reference failed."""
    timings: list[Timing] = Field(default_factory=list)
    verdict: str = ""
    log: str = ""


def cache_key(task: KernelBenchTask | DescribedTask, mode: str, eval_key: str) -> str:
    content = hashlib.sha256(task.source.encode()).hexdigest()
    raw = json.dumps([BASELINE_VERSION, task.name, content, mode, eval_key], separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def baseline_path(workspace: Path, key: str) -> Path:
    return workspace / "baselines" / f"{key}.json"


def measure_baseline(
    task: KernelBenchTask | DescribedTask,
    *,
    device: str,
    mode: str = "eager",
    workspace: Path,
    evaluate_fn: Callable[..., Evaluation] | None = None,
    eval_key: str | None = None,
    run_timeout_s: float = 600.0,
) -> Baseline:
    """The cached baseline for ``task`` on ``device``, measuring it (one evaluation) if it is not cached yet."""
    if mode not in BASELINE_MODES:
        raise ValueError(f"baseline mode must be one of {', '.join(BASELINE_MODES)}, not {mode!r}")
    if device == "cpu":
        return Baseline(
            task=task.name,
            mode=mode,
            device="cpu",
            key="",
            verdict="untimed",
            log="the CPU interpreter does not time: no baseline",
        )
    if eval_key is None:
        eval_key = probe_device(device).eval_key(task.name)
    key = cache_key(task, mode, eval_key)
    path = baseline_path(workspace, key)
    if path.is_file():
        try:
            return Baseline.model_validate_json(path.read_text(encoding="utf-8"))
        except ValueError:
            pass  # a damaged cache file is measured again
    if evaluate_fn is None:
        evaluate_fn = evaluate
    evaluation = evaluate_fn(
        EvalRequest(
            candidate=baseline_candidate(task, mode),
            task=task.name,
            device=device,
            timing=True,
            run_timeout_s=run_timeout_s,
            harness_baseline=True,
        )
    )
    baseline = Baseline(
        task=task.name,
        mode=mode,
        device=evaluation.device,
        key=key,
        latency_ms=evaluation.latency_ms if evaluation.passed else None,
        timings=list(evaluation.timings),
        verdict=evaluation.verdict.value,
        log=evaluation.log,
    )
    if evaluation.passed and evaluation.latency_ms is not None:  # only a good measurement is worth keeping
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text(baseline.model_dump_json(indent=2), encoding="utf-8")
        partial.replace(path)
    return baseline


def speedup(baseline: Baseline | float | None, evaluation: Evaluation | float | None) -> float | None:
    """Baseline latency / candidate latency; None when either is missing (untimed, failed)."""
    base = baseline.latency_ms if isinstance(baseline, Baseline) else baseline
    if isinstance(evaluation, Evaluation):
        cand = evaluation.latency_ms if evaluation.passed and evaluation.timed else None
    else:
        cand = evaluation
    if base is None or cand is None or not math.isfinite(base) or not math.isfinite(cand) or cand <= 0:
        return None
    return base / cand


# -- FlashInfer-Bench ---------------------------------------------------------------------------------------------
def measure_flashinfer_baseline(
    task: Any, device: str = "cuda", timing_method: str | None = None
) -> tuple[dict[str, float], Any]:
    """({benchmark config name: reference ms (``Timing.headline_ms``)}, the Evaluation). Raises if the reference does
    not pass."""
    evaluation = evaluate(
        EvalRequest(
            candidate=reference_candidate(task),
            device=device,
            timing=True,
            timing_method=timing_method,
            run_timeout_s=600.0,
            harness_baseline=True,
        )
    )
    if str(evaluation.verdict) != "passed" or not evaluation.timings:
        raise FlashInferError(f"the reference of {task.name} did not pass on {device}: {evaluation.log[:2000]}")
    return {t.config: t.headline_ms for t in evaluation.timings}, evaluation


def measure_flashinfer_production(
    task: Any, device: str = "cuda", timing_method: str | None = None, run_timeout_s: float = 600.0
) -> Evaluation:
    """FlashInfer's own production kernel for the task's definition (``ksearch.tasks.flashinfer.production``),
    evaluated through the same door as the reference: the harness's own baseline, checked against the reference on
    every workload and timed like a solution. Not profiled: the profiling process would import flashinfer and build its
    kernels again. Returns the Evaluation (a failed one carries flashinfer's error in its log); with ``?baseline=`` in
    the task's name its score is the mean speedup over the reference."""
    definition = task.flashinfer_definition()
    return evaluate(
        EvalRequest(
            candidate=Candidate(
                task=task.name, language="triton", code=production_source(definition), entry_point="run"
            ),
            device=device,
            timing=True,
            timing_method=timing_method,
            run_timeout_s=run_timeout_s,
            profile=False,
            harness_baseline=True,
        )
    )


def write_flashinfer_baseline(path: str | Path, configs: dict[str, float], **meta: Any) -> Path:
    path = Path(path)
    path.write_text(json.dumps({"configs": configs, **meta}, indent=2) + "\n", encoding="utf-8")
    return path


# -- speedup of a run's best kernel ----------------------------------------------------------------------------------
def kernelbench_speedup(
    task: str, device: str, best: Evaluation, *, mode: str = "eager", workspace: Path
) -> tuple[Baseline, float | None]:
    """The (cached) PyTorch baseline of a ``kernelbench:`` task and the speedup of ``best`` over it."""
    base = measure_baseline(resolve_task(task), device=device, mode=mode, workspace=workspace)
    return base, speedup(base, best)
