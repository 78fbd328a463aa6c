"""The data every part of ksearch shares: candidates, evaluations and their verdicts, and the records the
evaluator's processes exchange. Imports nothing of ours, so tasks, tools, the store and the agent can all use it.
"""

from ksearch.contracts.candidate import HASH_PREFIX, Candidate, Language, candidate_id
from ksearch.contracts.evaluation import (
    Comparison,
    ConfigComparison,
    Evaluation,
    Mismatch,
    Rejection,
    Timing,
    Verdict,
)

__all__ = [
    "HASH_PREFIX",
    "Candidate",
    "Comparison",
    "ConfigComparison",
    "Evaluation",
    "Language",
    "Mismatch",
    "Rejection",
    "Timing",
    "Verdict",
    "candidate_id",
]
