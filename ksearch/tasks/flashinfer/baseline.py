"""Baseline latencies for the mean-speedup score: the definition's reference, timed as a candidate.

The reference source defines ``run(*inputs)`` exactly like a solution, so it is evaluated through the same
evaluator (same worker, same timing method, same device) as any candidate; the medians per benchmark config are
written to a JSON file that ``flashinfer:<def>?baseline=FILE`` reads. Measuring both sides with one harness keeps
the ratio honest; it is flashinfer-bench's ``speedup_factor`` (reference latency / solution latency), averaged
arithmetically over workloads like K-Search's ``mean_vs_baseline``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ksearch.tasks.flashinfer.definitions import FlashInferError


def reference_candidate(task: Any) -> Any:
    """The task's reference as a ksearch Candidate (language triton: a plain Python module is accepted as such)."""
    from ksearch.tools.candidate import Candidate

    return Candidate(task=task.name, language="triton", code=task.reference_source(), entry_point="run")


def measure_baseline(task: Any, device: str = "cuda", timing_method: str | None = None) -> tuple[dict[str, float], Any]:
    """({benchmark config name: reference ms (``headline_ms``)}, the Evaluation). Raises if the reference does not pass."""
    from ksearch.tools.evaluator import EvalRequest, evaluate

    evaluation = evaluate(
        EvalRequest(candidate=reference_candidate(task), device=device, timing=True, timing_method=timing_method,
                    run_timeout_s=600.0, harness_baseline=True)  # fmt: skip
    )
    if str(evaluation.verdict) != "passed" or not evaluation.timings:
        raise FlashInferError(f"the reference of {task.name} did not pass on {device}: {evaluation.log[:2000]}")
    from ksearch.tasks.flashinfer.task import headline_ms

    return {t.config: headline_ms(t) for t in evaluation.timings}, evaluation


def write_baseline(path: str | Path, configs: dict[str, float], **meta: Any) -> Path:
    path = Path(path)
    path.write_text(json.dumps({"configs": configs, **meta}, indent=2) + "\n", encoding="utf-8")
    return path
