"""A launch-parameter sweep is ONE action (issue 57: about 11 of examples/trimul-record's 24 rounds were one launch
setting each): the planner states a bounded grid, the coder writes one autotune over it, the evaluator tunes it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ksearch.agent.edits import apply_edit_script
from ksearch.agent.prompting import action_view, node_line
from ksearch.agent.world_model import ROOT_ID, Action, LaunchSweep, Node, WorldModel

GRID = {"BM": [32, 64, 128], "num_warps": [4, 8], "num_stages": [1, 2]}


def test_a_sweep_is_a_bounded_grid() -> None:
    sweep = LaunchSweep(kernel="_out", params=GRID)
    assert sweep.points == 12 and sweep.describe() == (
        "_out: BM in [32, 64, 128], num_warps in [4, 8], num_stages in [1, 2] (12 configs)"
    )
    with pytest.raises(ValidationError, match="at most 64"):
        LaunchSweep(kernel="_out", params={"A": [1, 2, 3, 4, 5], "B": [1, 2, 3, 4], "C": [1, 2, 3, 4]})
    with pytest.raises(ValidationError, match="1 to 8 positive values"):
        LaunchSweep(kernel="_out", params={"BM": []})
    with pytest.raises(ValidationError, match="1 to 8 positive values"):
        LaunchSweep(kernel="_out", params={"BM": [0, 64]})
    with pytest.raises(ValidationError):
        LaunchSweep(kernel="_out", params={})
    with pytest.raises(ValidationError):
        LaunchSweep(kernel="_out", params={"not a name": [1]})
    assert LaunchSweep(kernel="_out", params={"A": [1] * 8, "B": [1] * 8}).points == 64


def test_the_planner_inserts_or_patches_a_sweep_and_a_bad_grid_rejects_the_script() -> None:
    wm = WorldModel(nodes={ROOT_ID: Node(id=ROOT_ID), "a": Node(id="a", parent_id=ROOT_ID, action=Action(title="a"))})
    sweep = {"kernel": "_out", "params": GRID, "key": ["C"]}
    script = {
        "ops": [
            {"op": "insert", "parent_id": "a", "node": {"id": "tune", "action": {"title": "tune", "sweep": sweep}}},
            {"op": "update", "node_id": "a", "patch": {"action": {"sweep": {"kernel": "_k", "params": {"BK": [32]}}}}},
        ]
    }
    outcome = apply_edit_script(wm, script, round_index=0, max_new_nodes=3, id_prefix="n")
    assert not outcome.errors
    tune = outcome.world_model.nodes["tune"].action
    assert tune is not None and tune.sweep == LaunchSweep(kernel="_out", params=GRID, key=["C"])
    assert outcome.world_model.nodes["a"].action.sweep.params == {"BK": [32]}  # type: ignore[union-attr]
    too_big = {"kernel": "_out", "params": {"A": list(range(1, 9)), "B": list(range(1, 9)), "C": [1, 2]}}
    bad = {"ops": [{"op": "insert", "parent_id": "a", "node": {"action": {"title": "t", "sweep": too_big}}}]}
    rejected = apply_edit_script(wm, bad, round_index=0, max_new_nodes=3, id_prefix="n")
    assert rejected.errors and any("at most 64" in e for e in rejected.errors)


def test_the_coder_is_told_to_write_one_autotune_over_exactly_the_grid() -> None:
    action = Action(title="Tune the output kernel", sweep=LaunchSweep(kernel="_out", params=GRID, key=["C", "NN"]))
    text = action_view(Node(id="x", action=action))
    assert "Launch-parameter sweep, ONE round that the evaluator tunes: _out: BM in [32, 64, 128]" in text
    assert "Put ONE @triton.autotune on _out with exactly these 12 configs, every combination: " in text
    assert "triton.Config({'BM': ...}, num_warps=..., num_stages=...), key=['C', 'NN']" in text
    assert "the evidence names the config chosen at each shape" in text
    only_blocks = Action(title="t", sweep=LaunchSweep(kernel="_k", params={"BK": [32, 64]}))
    assert "triton.Config({'BK': ...}), key= the kernel arguments that set the shape" in action_view(
        Node(id="y", action=only_blocks)
    )
    assert "Launch-parameter sweep" not in action_view(Node(id="z", action=Action(title="t")))
    assert "[sweep of 12 configs of _out]" in node_line(Node(id="x", action=action), 0)
