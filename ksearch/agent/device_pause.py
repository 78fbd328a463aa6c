"""Evaluations that wait for the run's device: the services of a process that only writes prompts.

A GPU run can be answered on a machine without its GPU (``ksearch resume RUN --prompts-only``, a laptop or a
cluster's login node): planning and writing go on there, and each kernel, promotion check or paired comparison
pauses the graph (a LangGraph interrupt, like a prompt) until ``ksearch resume RUN`` on a machine with the GPU
drives the run on; the paused node then runs again from its top and evaluates there. Nothing is evaluated twice:
evaluations are looked up by candidate and evaluation key before they run.
"""

from __future__ import annotations

from ksearch.contracts.evaluation import Comparison, Evaluation
from ksearch.errors import KsearchError
from ksearch.llm.interactive import wait_for_device
from ksearch.tools.evaluator.parent.request import EvalRequest


def evaluate_later(request: EvalRequest) -> Evaluation:
    """Stands for ``SearchContext.evaluate``: pauses until a process with ``request.device`` drives the run. Kernels
    are named by the last 10 characters of their id, as the prompts name them."""
    candidate = request.candidate.id
    method = f":{request.timing_method}" if request.timing_method else ""  # a confirmation is another pause
    what = f"the evaluation of kernel {candidate[-10:]}" + (f" ({request.timing_method})" if method else "")
    wait_for_device(f"device:evaluate:{candidate}{method}", what, request.device)
    raise _answered_here()


def compare_later(incumbent: EvalRequest, challenger: EvalRequest, *, rounds: int = 5) -> Comparison:
    """Stands for ``SearchContext.compare``: pauses like ``evaluate_later``."""
    a, b = incumbent.candidate.id, challenger.candidate.id
    wait_for_device(
        f"device:compare:{a}:{b}", f"the paired comparison of kernels {a[-10:]} and {b[-10:]}", incumbent.device
    )
    raise _answered_here()


def _answered_here() -> KsearchError:
    # Only a process that can evaluate answers a device pause, and its context evaluates for real.
    return KsearchError("a device pause was answered in a process that writes prompts only")
