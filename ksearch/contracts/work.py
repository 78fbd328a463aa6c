"""Records of where a candidate's work happened, observed at run time (issue 60): what the worker ships to the checker.

The worker (the candidate's process) collects them; the trusted checker judges them with the task's policy
(``ksearch.tools.evaluator.checker.work_judged``). What the candidate's process collects is its word: the harness
installs the collection before the candidate is imported, reports whether it was still installed after each call
(``intact``), and the checker judges the one thing the candidate cannot write, the ghost replay's output against the
reference, in its own process.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

TRACE_TAMPERED = "trace_tampered"
NO_CUSTOM_LAUNCH = "no_custom_launch"
ATEN_COMPUTE = "aten_compute"
GHOST_OUTPUT = "ghost_output"
WORK_RULES = (ATEN_COMPUTE, GHOST_OUTPUT, NO_CUSTOM_LAUNCH, TRACE_TAMPERED)
"""The rules the checker judges these records by (``ksearch.tools.evaluator.checker.work_judged``)."""
MAX_TRACED_OPS = 64
"""Ops a trace reports, the largest first (a candidate cannot make a record unbounded)."""


class TracedOp(BaseModel):
    """One ATen op (its overload packet, ``mm``, ``_softmax``) the candidate's call ran outside its own launches."""

    model_config = ConfigDict(extra="forbid")

    op: str
    calls: int
    elements: int
    """Summed over its calls: the element count of the largest tensor each call read or wrote."""


class WorkTrace(BaseModel):
    """What one call of the candidate ran: the ATen ops outside custom launches, and the launches."""

    model_config = ConfigDict(extra="forbid")

    ops: list[TracedOp] = Field(default_factory=list, max_length=MAX_TRACED_OPS)
    unlisted_elements: int = 0
    """The elements of the ops beyond the ``MAX_TRACED_OPS`` largest: the checker counts them as compute."""
    launches: int = 0
    """Custom launches (Triton kernels, functions of a C++ extension) the harness's hooks saw."""
    intact: bool = True
    """The harness's tracing mode and launch hooks were still in place when the call returned."""
    ghost: bool = False
    """The call was the ghost replay: every custom launch a no-op, fresh uninitialised allocations poisoned."""
    raised: str = ""
    """The ghost replay raised this (its output is then taken as wrong: nothing right came without the launches)."""


__all__ = [
    "ATEN_COMPUTE",
    "GHOST_OUTPUT",
    "MAX_TRACED_OPS",
    "NO_CUSTOM_LAUNCH",
    "TRACE_TAMPERED",
    "WORK_RULES",
    "TracedOp",
    "WorkTrace",
]
