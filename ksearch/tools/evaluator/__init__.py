"""The hardened evaluator: the trust boundary between the agent and untrusted kernel code.

Packages by the process their code runs in (tests/test_layering.py keeps worker and checker away from the parent and
from each other):

- ``parent``: the agent-side process. ``request`` (``EvalRequest``, what the caller asks, and the harness version in
  every cache key); ``evaluate`` (``evaluate()``, one candidate from static rules to verdict); ``session``
  (``EvaluatorSession``, a device's long-lived checker and pre-started worker, relaying between them);
  ``processes`` (those processes, started through the shared ``sandbox``); ``ledger`` (every timed window held
  against the parent's clock); ``verdicts`` (one typed ``Evaluation`` from what the processes reported, and logs
  trimmed for the LLM); ``compare`` (paired timing of two candidates, for promotion);
- ``worker``: the candidate's own process (``main``, with ``guard`` and ``timing_runner``), never trusted for
  correctness;
- ``checker``: the trusted process that computes the reference and judges outputs (``main``);
- ``profiler``: the per-kernel profile the profiling process (or the worker, after its timing) takes;
- ``shared``: what more than one process runs: ``staging`` (the GPU buffer, CUDA IPC or shared host memory, outputs
  reach the checker through), ``seeds`` (salted seeds and input digests both sides share), ``sandbox`` (a scrubbed
  environment, limits, private directories, death with the parent), ``resources``, ``profiling``, ``pairing``.

Knows nothing about the graph or the agent.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ksearch.tools.evaluator.parent.compare import ComparisonError, compare, comparison_from_samples
    from ksearch.tools.evaluator.parent.evaluate import HarnessError, build_worker_request, evaluate, static_verdict
    from ksearch.tools.evaluator.parent.request import HARNESS_VERSION, EvalRequest
    from ksearch.tools.evaluator.parent.session import EvaluatorSession
    from ksearch.tools.evaluator.parent.verdicts import LOG_LIMIT, candidate_traceback, timings_from_samples, trim_log
    from ksearch.tools.evaluator.shared.sandbox import worker_environment

_EXPORTS = {
    "ComparisonError": "parent.compare",
    "compare": "parent.compare",
    "comparison_from_samples": "parent.compare",
    "HarnessError": "parent.evaluate",
    "build_worker_request": "parent.evaluate",
    "evaluate": "parent.evaluate",
    "static_verdict": "parent.evaluate",
    "HARNESS_VERSION": "parent.request",
    "EvalRequest": "parent.request",
    "EvaluatorSession": "parent.session",
    "LOG_LIMIT": "parent.verdicts",
    "candidate_traceback": "parent.verdicts",
    "timings_from_samples": "parent.verdicts",
    "trim_log": "parent.verdicts",
    "worker_environment": "shared.sandbox",
}
"""The parent's API, imported on first use: the worker's and the checker's processes import this package too (their
modules live beneath it), and loading the parent there cost each process start about 0.4 s of CPU (torch.export and
torch._decomp through the parent's imports) and broke the rule that they import nothing of it."""


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "HARNESS_VERSION",
    "LOG_LIMIT",
    "ComparisonError",
    "EvalRequest",
    "EvaluatorSession",
    "HarnessError",
    "build_worker_request",
    "candidate_traceback",
    "compare",
    "comparison_from_samples",
    "evaluate",
    "timings_from_samples",
    "trim_log",
    "static_verdict",
    "worker_environment",
]
