"""What the mean-speedup baseline of a FlashInfer-Bench definition runs: the definition's reference, as a candidate.

The reference source defines ``run(*inputs)`` exactly like a solution, so the flows time it with the same evaluator as
any candidate (``ksearch.flows.baselines``); a task never calls the evaluator itself.
"""

from __future__ import annotations

from typing import Any

from ksearch.contracts.candidate import Candidate


def reference_candidate(task: Any) -> Candidate:
    """The task's reference as a ksearch Candidate (language triton: a plain Python module is accepted as such)."""
    return Candidate(task=task.name, language="triton", code=task.reference_source(), entry_point="run")
