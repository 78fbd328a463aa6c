"""Renders the prompt templates in ``ksearch/prompts`` with views of the state. No I/O besides reading templates.

Templates use ``$name`` placeholders (string.Template) so JSON examples need no brace escaping.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from string import Template

from ksearch.agent.selection import SelectionPolicy, frontier_report
from ksearch.agent.world_model import ROOT_ID, Node, WorldModel

_PLACEHOLDER = re.compile(r"\$(?:(\w+)|\{(\w+)\})")


@cache
def template_text(name: str) -> str:
    return resources.files("ksearch.prompts").joinpath(f"{name}.txt").read_text(encoding="utf-8")


def template_placeholders(name: str) -> set[str]:
    return {a or b for a, b in _PLACEHOLDER.findall(template_text(name))}


def render(name: str, **values: object) -> str:
    """Fill a template; a missing or an unexpected value is a programming error, raised at once."""
    expected = template_placeholders(name)
    missing = expected - values.keys()
    unused = values.keys() - expected
    if missing or unused:
        raise KeyError(f"template {name}: missing {sorted(missing)}, unused {sorted(unused)}")
    return Template(template_text(name)).substitute({k: str(v) for k, v in values.items()})


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return text[:head] + f"\n... [{len(text) - limit} characters cut] ...\n" + text[-(limit - head) :]


def node_line(node: Node, depth: int) -> str:
    parts = [f"{'  ' * depth}{node.id} | {node.status.value}"]
    if node.decision or node.choice:
        parts.append(f"{node.decision or '?'} -> {node.choice or '?'}")
    if node.action:
        a = node.action
        parts.append(f"{a.title} [d{a.difficulty}, s{a.score:.2f}]" + (f" applies {a.skill_id}" if a.skill_id else ""))
    parts.append(f"r{node.rating:.1f}, c{node.confidence:.2f}")
    if node.solution:
        sol = node.solution
        perf = f"{sol.latency_ms:.4f} ms" if sol.latency_ms is not None else "correct (untimed)"
        flag = ", regression vs parent" if sol.regression_vs_parent else ""
        parts.append(f"solution {sol.candidate_id[-10:]}: {perf}{flag}")
    if node.failed_cycles:
        parts.append(f"failed cycles: {node.failed_cycles}")
    marks = [m for m, on in (("added", node.by_person), ("pinned", node.pinned), ("pruned", node.pruned)) if on]
    if marks:
        parts.append(" and ".join(marks) + " by a person")
    return " | ".join(parts)


def tree_view(wm: WorldModel, *, limit: int = 12000, with_notes: bool = True) -> str:
    """The whole tree, depth-first, one line per node (plus clipped notes): the planner sees everything."""
    lines: list[str] = []

    def walk(node_id: str, depth: int) -> None:
        node = wm.nodes[node_id]
        lines.append(node_line(node, depth))
        if with_notes and node.notes:
            lines.append(f"{'  ' * (depth + 1)}notes: {_clip(node.notes.strip(), 400)}")
        for child in wm.children(node_id):
            walk(child.id, depth + 1)

    walk(ROOT_ID, 0)
    return _clip("\n".join(lines), limit)


def frontier_view(wm: WorldModel, policy: SelectionPolicy) -> str:
    rows = frontier_report(wm, policy)
    if not rows:
        return "(empty: insert new actions)"
    out = []
    for row in rows:
        node = wm.nodes[row.node_id]
        deferred = " (deferred: above the difficulty gate)" if row.deferred else ""
        pinned = " (pinned by a person: chosen first)" if row.pinned else ""
        title = node.action.title if node.action else ""
        out.append(f"- {node.id} under {node.parent_id}: {title}{pinned}{deferred}")
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
    return "\n".join(lines)


def edit_schema_text(schema: dict) -> str:
    return json.dumps(schema, separators=(",", ":"))


def clip(text: str, limit: int) -> str:
    return _clip(text, limit)
