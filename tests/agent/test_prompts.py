"""Every prompt template renders with a fixture state, and no placeholder is missing or unused."""

from __future__ import annotations

from importlib import resources

import pytest

from ksearch.agent.edits import edit_script_json_schema
from ksearch.agent.prompting import (
    edit_schema_text,
    frontier_view,
    render,
    template_placeholders,
    tree_view,
)
from ksearch.agent.selection import SelectionPolicy
from ksearch.agent.world_model import Action, Node, SolutionRef, WorldModel, attach_solution, mark_failed

TEMPLATES = sorted(
    p.name.removesuffix(".txt") for p in resources.files("ksearch.prompts").iterdir() if p.name.endswith(".txt")
)


def fixture_tree() -> WorldModel:
    wm = WorldModel()
    nodes = {
        **wm.nodes,
        "a": Node(id="a", parent_id="root", decision="family", choice="row", action=Action(title="Row kernel", score=0.8)),
        "b": Node(id="b", parent_id="root", action=Action(title="Tiles", score=0.6, difficulty=5)),
        "c": Node(id="c", parent_id="root", action=Action(title="Broken idea", score=0.7)),
    }
    wm = wm.model_copy(update={"nodes": nodes})
    wm = attach_solution(wm, "a", SolutionRef(candidate_id="sha256-v1:abc", evaluation_id="ev", verdict="passed",
                                              score=2.0, latency_ms=0.5))
    wm = mark_failed(wm, "c")
    nodes = {**wm.nodes, "a1": Node(id="a1", parent_id="a", action=Action(title="Pack rows", score=0.9), notes="n")}
    return wm.model_copy(update={"nodes": nodes})


@pytest.mark.parametrize("name", TEMPLATES)
def test_template_renders_with_exactly_its_placeholders(name):
    values = {key: f"<{key}>" for key in template_placeholders(name)}
    text = render(name, **values)
    for key in values:
        assert f"<{key}>" in text
    assert "$" not in text.replace("$$", "")  # nothing left unfilled
    with pytest.raises(KeyError):
        render(name, **values, not_a_placeholder="x")
    if values:
        missing = dict(values)
        missing.pop(next(iter(missing)))
        with pytest.raises(KeyError):
            render(name, **missing)


def test_views_show_status_evidence_and_selection_order():
    wm = fixture_tree()
    view = tree_view(wm)
    assert "a | solved" in view and "0.5000 ms" in view
    assert "c | failed" in view and "failed cycles: 1" in view
    assert "  a1 | open" in view  # indented under its parent
    frontier = frontier_view(wm, SelectionPolicy(max_difficulty=4))
    lines = frontier.splitlines()
    assert lines[0].startswith("- a1")  # highest score first
    assert "deferred" in next(line for line in lines if line.startswith("- b"))
    assert "- c " not in frontier  # failed actions are not on the frontier


def test_edit_schema_is_compact_json():
    text = edit_schema_text(edit_script_json_schema())
    assert text.startswith("{") and "\n" not in text and '"ops"' in text
