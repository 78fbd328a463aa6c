"""Baselines for KernelBench speedups: the problem's own ``Model`` timed by the same evaluator as the candidates.

KernelBench scores a solution by its speedup over the PyTorch reference (eager, or ``torch.compile``). A Task's
``score(timings)`` only sees the candidate's timings, so the baseline is measured separately, here:

- the reference is packaged as a candidate module (the problem file's source plus ``ModelNew = Model``, or a
  ``ModelNew`` whose forward is ``torch.compile``d) and evaluated through the same ``evaluate()`` as candidates, on
  the same benchmark configs, seeds and timing procedure, in a fresh worker process;
- the result is cached per (problem content, mode, device model and software versions) in
  ``<workspace>/baselines/<key>.json``, so a run, an ``eval`` or a sweep measures it once;
- ``speedup(baseline, evaluation)`` = baseline latency / candidate latency, both the geometric mean of the
  per-config medians over the same configs (KernelBench has one timed input set per problem).

On the CPU (Triton interpreter) nothing is timed: ``measure_baseline`` returns a baseline with ``latency_ms=None``
without starting a worker, and speedups are None.

The baseline is trusted code (the user's problem file). If the evaluator's static integrity rules would reject it
(they target generated kernels), ``measure_baseline`` reports the rejection in ``Baseline.log`` instead of a time.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ksearch.tasks.kernelbench import KernelBenchTask
from ksearch.tools.candidate import Candidate
from ksearch.tools.evaluation import Evaluation, Timing

BaselineMode = Literal["eager", "compile"]
BASELINE_MODES: tuple[str, ...] = ("eager", "compile")
BASELINE_VERSION = "kb-baseline-1"
"""Part of the cache key: bump when the packaging of the reference changes."""

_EAGER = '''

# --- added by ksearch: the reference itself, timed as the eager PyTorch baseline ---
ModelNew = Model
'''
_COMPILE = '''

# --- added by ksearch: the reference under torch.compile (default mode), timed as the compiled baseline ---
import torch as _ksearch_torch


class ModelNew(Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ksearch_compiled_forward = _ksearch_torch.compile(super().forward)

    def forward(self, *inputs):
        return self._ksearch_compiled_forward(*inputs)
'''


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


def baseline_code(task: KernelBenchTask, mode: str = "eager") -> str:
    if mode not in BASELINE_MODES:
        raise ValueError(f"baseline mode must be one of {', '.join(BASELINE_MODES)}, not {mode!r}")
    return task.source.rstrip() + "\n" + (_EAGER if mode == "eager" else _COMPILE)


def baseline_candidate(task: KernelBenchTask, mode: str = "eager") -> Candidate:
    """The reference packaged as a candidate module for ``evaluate()``."""
    return Candidate(task=task.name, language="triton", code=baseline_code(task, mode), entry_point=task.entry_point)


def cache_key(task: KernelBenchTask, mode: str, eval_key: str) -> str:
    content = hashlib.sha256(task.source.encode()).hexdigest()
    raw = json.dumps([BASELINE_VERSION, task.name, content, mode, eval_key], separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def baseline_path(workspace: Path, key: str) -> Path:
    return workspace / "baselines" / f"{key}.json"


def measure_baseline(
    task: KernelBenchTask,
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
        return Baseline(task=task.name, mode=mode, device="cpu", key="", verdict="untimed",
                        log="the CPU interpreter does not time: no baseline")  # fmt: skip
    if eval_key is None:
        from ksearch.tools.fingerprint import probe_device

        eval_key = probe_device(device).eval_key(task.name)
    key = cache_key(task, mode, eval_key)
    path = baseline_path(workspace, key)
    if path.is_file():
        try:
            return Baseline.model_validate_json(path.read_text(encoding="utf-8"))
        except ValueError:
            pass  # a damaged cache file is measured again
    if evaluate_fn is None:
        from ksearch.tools.evaluator import evaluate as evaluate_fn
    from ksearch.tools.evaluator import EvalRequest

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


__all__ = ["BASELINE_MODES", "Baseline", "baseline_candidate", "baseline_code", "measure_baseline", "speedup"]
