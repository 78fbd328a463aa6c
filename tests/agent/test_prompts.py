"""Every prompt template renders with a fixture state, and no placeholder is missing or unused."""

from __future__ import annotations

from importlib import resources

import pytest

from ksearch.agent.edit_ops import edit_script_json_schema
from ksearch.agent.prompting import edit_schema_text, frontier_view, tree_view
from ksearch.agent.selection import SelectionPolicy
from ksearch.agent.world_model import Action, Node, SolutionRef, WorldModel, attach_solution, mark_failed
from ksearch.prompts import render, template_placeholders

TEMPLATES = sorted(
    p.name.removesuffix(".txt") for p in resources.files("ksearch.prompts").iterdir() if p.name.endswith(".txt")
)


def fixture_tree() -> WorldModel:
    wm = WorldModel()
    nodes = {
        **wm.nodes,
        "a": Node(
            id="a", parent_id="root", decision="family", choice="row", action=Action(title="Row kernel", score=0.8)
        ),
        "b": Node(id="b", parent_id="root", action=Action(title="Tiles", score=0.6, difficulty=5)),
        "c": Node(id="c", parent_id="root", action=Action(title="Broken idea", score=0.7)),
    }
    wm = wm.model_copy(update={"nodes": nodes})
    wm = attach_solution(
        wm,
        "a",
        SolutionRef(candidate_id="sha256-v1:abc", evaluation_id="ev", verdict="passed", score=2.0, latency_ms=0.5),
    )
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


def test_planner_templates_carry_a_skills_section():
    for name in ("plan_init", "plan_update"):
        assert "skills" in template_placeholders(name)
        assert "skill_id" in render(name, **{k: f"<{k}>" for k in template_placeholders(name)})


def test_skill_role_prompts_render_from_real_inputs():
    from ksearch.skills.lifting import LiftInput, lift_prompt
    from ksearch.skills.records import SkillContext
    from ksearch.skills.walk import WalkServices, WalkStep, simplify_prompt
    from tests.helpers.skill_scripts import ONLINE_ONE_ROW, WHOLE_ROW

    context = SkillContext(family="softmax", language="triton", arch="sm90")
    lift = lift_prompt(
        LiftInput(
            origin="a search edge",
            context=context,
            task_spec="SPEC",
            change="Action: stream",
            before_code=WHOLE_ROW,
            after_code=ONLINE_ONE_ROW,
            measurement="x1.5 [1.4, 1.6]",
            failures=["dropping the max: incorrect"],
        )
    )
    assert "Architecture: sm90" in lift and "x1.5 [1.4, 1.6]" in lift and "- dropping the max: incorrect" in lift
    assert "-    x = x - tl.max(x, axis=0)" in lift and '"provides"' in lift  # the diff and the draft's schema
    services = WalkServices(
        llm=None,
        evaluate=None,
        compare=None,
        task_spec="SPEC",
        language="triton",  # type: ignore[arg-type]
        device_description="an H100",
    )
    done = WalkStep(
        index=1,
        category="row_batching",
        locus="launch",
        removed="rows per program",
        before_candidate_id="a",
        after_candidate_id="b",
        verdict="passed",
        accepted=True,
        reason="ok",
    )
    text = simplify_prompt(services, ONLINE_ONE_ROW, 2, 16, [done], {"online_softmax": ["incorrect: overflow"]})
    assert "proposal 2 of at most 16" in text and "- row_batching at launch: rows per program" in text
    assert "- online_softmax: incorrect: overflow" in text and "Device: an H100" in text


def test_the_first_plan_asks_for_rating_and_confidence_inside_each_node():
    """Issue 33's hand-driven search: "Give rating and confidence" read as fields of the edit script, which has none,
    and the first reply was sent back for repair; the prompt now says where they go."""
    from ksearch.agent.edits import EditScript

    text = render("plan_init", **{k: f"<{k}>" for k in template_placeholders("plan_init")})
    assert 'Give each node a "rating"' in text and "inside the node" in text
    assert "rating" not in EditScript.model_fields and "confidence" not in EditScript.model_fields


def test_a_node_line_and_an_action_view_show_only_what_is_set():
    from ksearch.agent.prompting import action_view, node_line

    bare = Node(id="x", parent_id="root", action=Action(title="t"))
    assert node_line(bare, 0) == "x | open | t [d3, s0.50] | r5.0, c0.50"
    assert action_view(bare) == "Title: t\nDescription: (none)\nDifficulty: 3/5"
    half = bare.model_copy(update={"decision": "Layout"})
    assert node_line(half, 0) == "x | open | Layout -> ? | t [d3, s0.50] | r5.0, c0.50"
    assert action_view(half).endswith("\nDecision: Layout -> ")
    other = bare.model_copy(update={"choice": "rows"})
    assert node_line(other, 1) == "  x | open | ? -> rows | t [d3, s0.50] | r5.0, c0.50"
    assert action_view(other).endswith("\nDecision:  -> rows")
    full = Action(title="t", expected_speedup=1.2, rationale="why", skill_id="sk-0123456789ab")
    shown = action_view(Node(id="x", action=full))
    assert "Expected speedup over the base: 1.2x\nRationale: why" in shown
    assert node_line(Node(id="x", action=full), 0) == "x | open | t [d3, s0.50] applies sk-0123456789ab | r5.0, c0.50"


def test_a_solution_against_its_parent_reads_its_ratio_and_noise_or_the_old_flag():
    from ksearch.agent.prompting import node_line

    def line(**fields: object) -> str:
        ref = SolutionRef(
            candidate_id="sha256-v1:abcdef", evaluation_id="e", verdict="passed", latency_ms=1.0, **fields
        )  # type: ignore[arg-type]
        return node_line(Node(id="x", solution=ref), 0)

    assert line().endswith("solution -v1:abcdef: 1.0000 ms")
    assert line(regression_vs_parent=True).endswith("1.0000 ms, regression vs parent")  # stored before the ratio
    assert line(vs_parent=0.98, vs_parent_within_noise=True).endswith("x0.98 vs parent (within noise)")
    assert line(vs_parent=0.86, regression_vs_parent=True).endswith("x0.86 vs parent (regression)")
    assert line(vs_parent=1.2).endswith("x1.20 vs parent (faster)")
