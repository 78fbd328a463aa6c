"""bench/skills_learn_apply.py, the GPU demonstration of skills, checked on the CPU: its scripted TriMul edits still
apply to examples/trimul_triton.py and satisfy the skill contracts (no evaluation needed), and the whole script runs
end to end on the softmax task under the Triton interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ksearch.skills.features import draft_contract_errors, precondition_problems
from ksearch.skills.records import SkillDraft
from tests.helpers.bench_scripts import load_bench

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "skills_learn_apply.py"


def test_the_trimul_script_edits_apply_and_its_skills_keep_their_contracts():
    script = load_bench("skills_learn_apply")
    expert = (REPO / "examples" / "trimul_triton.py").read_text()
    variants = script._trimul_variants(expert)
    replies = dict(script.trimul_scenario("full", arch_is_gpu=True).learn_replies)
    fp16 = SkillDraft.model_validate_json(replies["lift:1"])
    channel_major = SkillDraft.model_validate_json(replies["lift:3"])

    # each lift is checked against its step reversed: before = the simpler kernel, after = the one it came from
    assert draft_contract_errors(fp16, variants["fp32"], expert, "sm90") == []
    assert draft_contract_errors(channel_major, variants["row_major"], variants["fp32"], "sm90") == []
    # the search's starting kernel lacks fp16 operands (offered) but has the channel-major store (applied already)
    assert precondition_problems(fp16, variants["parent"], "sm90") == []
    assert precondition_problems(fp16, variants["parent"], "cpu")  # no tensor cores: not offered on the CPU
    assert any("already applied" in p for p in precondition_problems(channel_major, variants["parent"], "sm90"))
    assert any("already applied" in p for p in precondition_problems(fp16, variants["child"], "sm90"))
    # the scripted wrong removal really drops the mask, and the short walk scripts only what the search applies
    assert "mask_ptr + rows" not in variants["no_mask"] and "mask_ptr + rows" in variants["fp32"]
    short = dict(script.trimul_scenario("short", arch_is_gpu=False).learn_replies)
    assert set(short) == {"simplify:1", "simplify:2", "lift:1"} and json.loads(short["simplify:2"])["done"]


@pytest.mark.slow
def test_the_script_learns_then_applies_a_skill_on_the_cpu(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "out"), "--task", "softmax", "--device", "cpu"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    learn, search = results["phases"]["learn"], results["phases"]["search"]
    assert learn["termination"] == "complete" and [s["accepted"] for s in learn["steps"]] == [True, False, True]
    assert search["status"] == "finished" and search["skill_id"] == learn["skills"]["online_softmax"]
    assert search["skill_in_planner_prompt"] and search["recipe_in_coder_prompt"]
    [trial] = search["trials"]
    # held out (code the skill was not learned from), passed, but nothing is timed on the CPU: not admitted
    assert (trial["verdict"], trial["held_out"], trial["speedup"]) == ("passed", True, None)
    status = {s["skill_id"]: s["status"] for s in search["library"]}
    assert status[search["skill_id"]] == "candidate"
    assert (tmp_path / "out" / "prompts" / "plan_1_0.txt").read_text().count(search["skill_id"]) >= 1
