"""The hardened evaluator: the trust boundary between the agent and untrusted kernel code.

Modules, one job each:

- ``request``: ``EvalRequest`` (what the caller asks) and the harness version in every cache key;
- ``evaluate``: ``evaluate()``, one candidate from static rules to verdict;
- ``session``: ``EvaluatorSession``, a device's long-lived checker and pre-started worker, relaying between them;
- ``processes`` and ``sandbox``: those processes, started with a scrubbed environment, limits, private directories;
- ``worker`` (+ ``guard``, ``timing_runner``): the candidate's own process, never trusted for correctness;
- ``checker``: the trusted process that computes the reference and judges outputs;
- ``staging``: the GPU buffer (CUDA IPC, or shared host memory) outputs reach the checker through;
- ``seeds``: salted seeds and input digests both sides share;
- ``verdicts``: one typed ``Evaluation`` from what the processes reported, and logs trimmed for the LLM;
- ``compare``: paired timing of two candidates, for promotion.

Knows nothing about the graph or the agent.
"""

from ksearch.tools.evaluator.compare import ComparisonError, compare, comparison_from_samples
from ksearch.tools.evaluator.evaluate import HarnessError, build_worker_request, evaluate, static_verdict
from ksearch.tools.evaluator.request import HARNESS_VERSION, EvalRequest
from ksearch.tools.evaluator.sandbox import worker_environment
from ksearch.tools.evaluator.session import EvaluatorSession
from ksearch.tools.evaluator.verdicts import LOG_LIMIT, candidate_traceback, timings_from_samples, trim_log

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
