"""The closed set of typed edit operations on the world model, and the parsing of a script the LLM wrote.

Every op is a pydantic model with ``extra="forbid"`` that simply has no field for evidence (solution, status, cycle
counts, ids of existing nodes): a script naming one is refused with a line per problem (``edits`` applies a valid
script all or nothing).

Everything here is pure: no I/O, no logging, deterministic.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ksearch.agent.world_model import (
    Action,
    Difficulty,
    LaunchSweep,
    NodeId,
    NonEmptyStr,
    Rating,
    SkillId,
    UnitFloat,
)

SYSTEM_OWNED_FIELDS = frozenset(
    {
        "id",
        "parent_id",
        "status",
        "solution",
        "solution_ref",
        "solution_id",
        "parent_solution_id",
        "cycles",
        "failed_cycles",
        "revived",
        "pinned",
        "pruned",
        "by_person",
        "created_round",
        "computed_signals",
    }
)
"""Field names that only code may write; naming one in an edit script is reported as such."""

_OP_TAGS = frozenset({"update", "insert", "split", "delete"})


# ---- the op models ------------------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ActionPatch(_Strict):
    """Fields to change in a node's action; ``None`` (or absent) means 'leave unchanged'."""

    title: NonEmptyStr | None = None
    description: str | None = None
    difficulty: Difficulty | None = None
    score: UnitFloat | None = None
    expected_speedup: Annotated[float, Field(gt=0.0, le=1000.0)] | None = None
    rationale: str | None = None
    skill_id: SkillId | None = None
    sweep: LaunchSweep | None = None


class NodePatch(_Strict):
    """Planner-owned fields of a node to change; ``None`` (or absent) means 'leave unchanged'."""

    decision: str | None = None
    choice: str | None = None
    rating: Rating | None = None
    confidence: UnitFloat | None = None
    notes: str | None = None
    action: ActionPatch | None = None
    """Merged into the existing action; a node without one needs at least a title."""
    revive: bool | None = None
    """True deliberately re-opens a FAILED node (status becomes open again); valid only on failed nodes."""


class NewNode(_Strict):
    """A node to create. Its parent, status and evidence are set by code, never by the planner."""

    id: NodeId | None = None
    """Optional; a deterministic id is generated when absent."""
    decision: str = ""
    choice: str = ""
    action: Action
    rating: Rating = 5.0
    confidence: UnitFloat = 0.5
    notes: str = ""


class UpdateNode(_Strict):
    op: Literal["update"]
    node_id: str
    patch: NodePatch


class InsertNode(_Strict):
    op: Literal["insert"]
    parent_id: str
    node: NewNode


class SplitNode(_Strict):
    """Refine a node into sub-steps: optionally patch it, then add children under it."""

    op: Literal["split"]
    node_id: str
    parent_patch: NodePatch | None = None
    children: list[NewNode] = Field(min_length=1, max_length=8)


class DeleteNode(_Strict):
    op: Literal["delete"]
    node_id: str


EditOp = Annotated[UpdateNode | InsertNode | SplitNode | DeleteNode, Field(discriminator="op")]


class EditScript(_Strict):
    """What the planner returns: ops applied in order, plus optional free-text understanding of the kernel."""

    ops: list[EditOp] = Field(default_factory=list)
    kernel_summary: str | None = None
    open_questions: list[str] | None = None
    active_leaf_id: str | None = None
    counters_for: list[str] | None = Field(default=None, max_length=2)
    """Ids of nodes whose solutions' hardware counters (Nsight Compute) the next plan should show; collected after
    this step's cycles, within the run's budget for counters."""


def edit_script_json_schema() -> dict[str, Any]:
    """JSON schema of :class:`EditScript`, for prompts and provider-side structured output."""
    return EditScript.model_json_schema()


# ---- parsing ----------------------------------------------------------------------------------------------------


def _render_loc(loc: list[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _clean_loc(loc: tuple[str | int, ...]) -> list[str | int]:
    """Drop the discriminator tag pydantic inserts after ``ops[i]``, so paths read ``ops[2].patch``."""
    out: list[str | int] = []
    for i, part in enumerate(loc):
        after_op_index = i >= 2 and loc[i - 2] == "ops" and isinstance(loc[i - 1], int)
        if after_op_index and part in _OP_TAGS:
            continue
        out.append(part)
    return out


def format_validation_error(exc: ValidationError, prefix: str = "") -> list[str]:
    """One readable line per pydantic error, naming the op index and field; system-owned fields are flagged."""
    messages = []
    for err in exc.errors():
        loc = _clean_loc(tuple(err["loc"]))
        if err["type"] == "extra_forbidden" and loc:
            name = str(loc[-1])
            where = _render_loc(loc[:-1]) or "script"
            owned = " (system-owned)" if name in SYSTEM_OWNED_FIELDS else ""
            messages.append(f"{prefix}{where}: extra field '{name}' is not allowed{owned}")
        else:
            messages.append(f"{prefix}{_render_loc(loc) or 'script'}: {err['msg']}")
    return messages


def _strip_fences(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        stripped = stripped.rsplit("```", 1)[0]
    return stripped.strip()


def parse_edit_script(script: EditScript | dict[str, Any] | str) -> EditScript | list[str]:
    """Validate a script given as a model, a dict or JSON text; returns the model or the error lines."""
    if isinstance(script, EditScript):
        return script
    raw: Any = script
    if isinstance(script, str):
        try:
            raw = json.loads(_strip_fences(script))
        except json.JSONDecodeError as exc:
            return [f"script: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"]
    try:
        return EditScript.model_validate(raw)
    except ValidationError as exc:
        return format_validation_error(exc)
