"""Views of the search's state for the prompt templates (``ksearch.prompts`` fills them). No I/O."""

from __future__ import annotations

import json
from typing import Any

from ksearch.agent.selection import SelectionPolicy, family_cycles, frontier_report
from ksearch.agent.world_model import ROOT_ID, LaunchSweep, Node, SolutionRef, WorldModel
from ksearch.prompts import clip


def node_line(node: Node, depth: int) -> str:
    parts = [f"{'  ' * depth}{node.id} | {node.status.value}"]
    if node.decision or node.choice:
        parts.append(f"{node.decision or '?'} -> {node.choice or '?'}")
    if node.action:
        a = node.action
        sweep = f" [sweep of {a.sweep.points} configs of {a.sweep.kernel}]" if a.sweep else ""
        skill = f" applies {a.skill_id}" if a.skill_id else ""
        parts.append(f"{a.title} [d{a.difficulty}, s{a.score:.2f}]{sweep}{skill}")
    parts.append(f"r{node.rating:.1f}, c{node.confidence:.2f}")
    if node.solution:
        sol = node.solution
        perf = f"{sol.latency_ms:.4f} ms" if sol.latency_ms is not None else "correct (untimed)"
        parts.append(f"solution {sol.candidate_id[-10:]}: {perf}{_versus_parent(sol)}")
    if node.failed_cycles:
        parts.append(f"failed cycles: {node.failed_cycles}")
    marks = [m for m, on in (("added", node.by_person), ("pinned", node.pinned), ("pruned", node.pruned)) if on]
    if marks:
        parts.append(" and ".join(marks) + " by a person")
    return " | ".join(parts)


def _versus_parent(sol: SolutionRef) -> str:
    """``, x0.98 vs parent (within noise)``; a regression beyond the noise band says so."""
    if sol.vs_parent is None:
        return ", regression vs parent" if sol.regression_vs_parent else ""
    if sol.vs_parent_within_noise:
        verdict = "within noise"
    else:
        verdict = "regression" if sol.regression_vs_parent else "faster"
    return f", x{sol.vs_parent:.2f} vs parent ({verdict})"


def tree_view(wm: WorldModel, *, limit: int = 12000, with_notes: bool = True) -> str:
    """The whole tree, depth-first, one line per node (plus clipped notes): the planner sees everything."""
    lines: list[str] = []

    def walk(node_id: str, depth: int) -> None:
        node = wm.nodes[node_id]
        lines.append(node_line(node, depth))
        if with_notes and node.notes:
            lines.append(f"{'  ' * (depth + 1)}notes: {clip(node.notes.strip(), 400)}")
        for child in wm.children(node_id):
            walk(child.id, depth + 1)

    walk(ROOT_ID, 0)
    return clip("\n".join(lines), limit)


def frontier_view(wm: WorldModel, policy: SelectionPolicy) -> str:
    rows = frontier_report(wm, policy)
    if not rows:
        return "(empty: insert new actions)"
    most = max(family_cycles(wm).values(), default=0)
    out = []
    for row in rows:
        node = wm.nodes[row.node_id]
        deferred = " (deferred: above the difficulty gate)" if row.deferred else ""
        pinned = " (pinned by a person: chosen first)" if row.pinned else ""
        explores = (
            f" (the next exploration cycle runs it: its family {row.branch_id} has had {row.branch_cycles} "
            f"cycle{'s' if row.branch_cycles != 1 else ''}, the most-explored {most})"
            if row.explores
            else ""
        )
        title = node.action.title if node.action else ""
        out.append(f"- {node.id} under {node.parent_id}: {title}{pinned}{deferred}{explores}")
    return "\n".join(out)


def action_view(node: Node) -> str:
    assert node.action is not None
    a = node.action
    lines = [f"Title: {a.title}", f"Description: {a.description or '(none)'}", f"Difficulty: {a.difficulty}/5"]
    if a.expected_speedup:
        lines.append(f"Expected speedup over the base: {a.expected_speedup}x")
    if a.rationale:
        lines.append(f"Rationale: {a.rationale}")
    if node.decision or node.choice:
        lines.append(f"Decision: {node.decision} -> {node.choice}")
    if a.sweep is not None:
        lines.append(sweep_instructions(a.sweep))
    return "\n".join(lines)


def sweep_instructions(sweep: LaunchSweep) -> str:
    """What the coder does for a launch-parameter sweep: one autotune over the grid, nothing picked by hand."""
    launch = {"num_warps", "num_stages"}
    constexprs = [p for p in sweep.params if p not in launch]
    key = f"key={sweep.key}" if sweep.key else "key= the kernel arguments that set the shape"
    return (
        f"Launch-parameter sweep, ONE round that the evaluator tunes: {sweep.describe()}.\n"
        f"Put ONE @triton.autotune on {sweep.kernel} with exactly these {sweep.points} configs, every combination: "
        f"triton.Config({{{', '.join(repr(p) + ': ...' for p in constexprs)}}}"
        + (", num_warps=..., num_stages=...)" if launch & set(sweep.params) else ")")
        + f", {key}; the launch passes none of the swept values (the grid is a lambda of META). Change nothing "
        "else. Before the timed calls of each timed shape the evaluator lets the autotuner time every config "
        "(Triton's own benchmark; a config that does not fit the device is skipped) and the kernel keeps the best; "
        "the evidence names the config chosen at each shape."
    )


def edit_schema_text(schema: dict) -> str:
    return json.dumps(schema, separators=(",", ":"))


def edit_schema_outline(schema: dict) -> str:
    """The edit script's JSON schema in a few lines, one per object type (``?`` marks an optional field), for every
    planner prompt; the repair prompt carries the full schema (``edit_schema_text``)."""
    definitions = schema.get("$defs", {})
    lines = [f"EditScript: {_object_outline(schema)}"]
    for name, definition in definitions.items():
        lines.append(f"{name}: {_object_outline(definition)}")
    return "\n".join(lines)


def _object_outline(definition: dict) -> str:
    required = set(definition.get("required", []))
    fields = [
        f"{'' if key in required else '?'}{key}: {_type_outline(value)}"
        for key, value in definition.get("properties", {}).items()
    ]
    return "{" + ", ".join(fields) + "}"


def _type_outline(value: dict) -> str:
    """A property's type in a few characters: ``str``, ``int 1-5``, ``[NewNode] 1-8``, ``"insert"``, ``A | B``."""
    if "$ref" in value:
        return value["$ref"].rsplit("/", 1)[-1]
    if "const" in value:
        return json.dumps(value["const"])
    if "anyOf" in value or "oneOf" in value:
        options = [_type_outline(v) for v in value.get("anyOf", value.get("oneOf", [])) if v.get("type") != "null"]
        return " | ".join(options)
    if value.get("type") == "object":  # a mapping: {name: value type}, with its count of entries
        values = [*value.get("patternProperties", {}).values(), value.get("additionalProperties")]
        inner = next((_type_outline(v) for v in values if isinstance(v, dict)), "any")
        count = _range_outline(value.get("minProperties"), value.get("maxProperties"))
        return f"{{str: {inner}}}" + (f" {count}" if count else "")
    kind = {"string": "str", "integer": "int", "number": "num", "boolean": "bool"}.get(value.get("type", ""), "")
    if value.get("type") == "array":
        items = value.get("items", {})
        count = _range_outline(value.get("minItems"), value.get("maxItems"))
        return f"[{_type_outline(items)}]" + (f" {count}" if count else "")
    bounds = _range_outline(value.get("minimum", value.get("exclusiveMinimum")), value.get("maximum"))
    if value.get("exclusiveMinimum") is not None and value.get("minimum") is None:
        bounds = f">{value['exclusiveMinimum']:g}" + (f" <={value['maximum']:g}" if "maximum" in value else "")
    if "pattern" in value:
        bounds = f"/{value['pattern']}/"
    elif "maxLength" in value:
        bounds = f"<={value['maxLength']} chars"
    return f"{kind} {bounds}".strip() or "any"


def _range_outline(low: float | None, high: float | None) -> str:
    if low is None and high is None:
        return ""
    if high is None:
        return f">={low:g}"
    if low is None:
        return f"<={high:g}"
    return f"{low:g}-{high:g}"


REFERENCE_LIMIT = 6000


def spec_with_reference(task: Any, language: str) -> str:
    """The task's spec with its runnable reference implementation appended, unless the spec already shows it (a
    KernelBench problem file, an operator file)."""
    spec = task.spec(language)
    try:
        reference = task.reference_source().strip()
    except Exception:  # noqa: BLE001 - a task without a printable reference: the spec alone
        return spec
    if not reference or _shown(reference, spec):
        return spec
    return (
        f"{spec.rstrip()}\n\nReference implementation (runnable PyTorch; the kernel must match what it computes):\n"
        f"```python\n{clip(reference, REFERENCE_LIMIT)}\n```"
    )


def _shown(reference: str, spec: str) -> bool:
    """Whether the spec already quotes the reference (its first definition line appears in it)."""
    for line in reference.splitlines():
        if line.startswith(("def ", "class ")):
            return line.strip() in spec
    return reference[:200] in spec
