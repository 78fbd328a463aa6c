"""Skill records and the rules derived from them: ids, static feature checks, contract checks, effect estimates,
admission and retirement, retrieval filters and ranking, the planner's section, bindings and snapshots. Pure."""

from __future__ import annotations

import math

import pytest

from ksearch.agent.skill_use import new_bindings
from ksearch.agent.world_model import Action, Node, WorldModel
from ksearch.skills.evidence import Evidence, EvidenceKind, SkillStatus, derive_status, estimate, is_held_out, summarize
from ksearch.skills.features import draft_contract_errors, feature_present
from ksearch.skills.records import (
    Feature,
    Scope,
    Skill,
    SkillContext,
    SkillDraft,
    SkillSource,
    arch_from_capability,
    make_skill,
    task_family,
)
from ksearch.skills.retrieval import (
    MAX_BLOCK_CHARS,
    binding_errors,
    coder_skill_text,
    exclusion_reasons,
    retrieve,
    skills_block,
)
from ksearch.skills.snapshot import freeze, snapshot_id
from tests.helpers.skill_scripts import ONLINE_DRAFT, ONLINE_ONE_ROW, ROWS_DRAFT, WHOLE_ROW

CPU = SkillContext(family="softmax", language="triton", arch="cpu")
SM90 = SkillContext(family="softmax", language="triton", arch="sm90")


def skill(draft: dict = ONLINE_DRAFT, **scope) -> Skill:
    scope = {"families": ["softmax"], "languages": ["triton"], "archs": ["sm90"], **scope}
    return make_skill(SkillDraft.model_validate(draft), source=SkillSource.SEARCH, scope=Scope(**scope))


def ev(
    kind: str = "trial",
    *,
    task: str = "softmax",
    base: str | None = "b",
    cand: str | None = "c",
    verdict="passed",
    timed=True,
    speedup=None,
    ci=None,
    held_out=False,
    run="r",
    cycle="c1",
    arch="sm90",
) -> Evidence:
    low, high = ci if ci else (None, None)
    return Evidence(
        kind=EvidenceKind(kind),
        run_id=run,
        cycle_id=cycle,
        task=task,
        family="softmax",
        language="triton",
        arch=arch,
        base_candidate_id=base,
        candidate_id=cand,
        verdict=verdict,
        timed=timed,
        speedup=speedup,
        ci_low=low,
        ci_high=high,
        held_out=held_out,
    )


# ---- records -----------------------------------------------------------------------------------------------------


def test_skill_ids_are_content_hashes_and_survive_a_round_trip():
    a, b = skill(), skill()
    assert a.skill_id == b.skill_id and a.skill_id.startswith("sk-") and len(a.skill_id) == 15
    dumped = a.model_dump(mode="json")
    assert dumped["skill_id"] == a.skill_id
    assert Skill.model_validate(dumped).skill_id == a.skill_id
    assert Skill.model_validate({**dumped, "skill_id": "sk-000000000000"}).skill_id == a.skill_id  # never trusted
    assert skill(archs=["sm100"]).skill_id != a.skill_id  # the scope is content: a widened skill is another skill


def test_a_draft_needs_a_precondition_an_effect_and_something_it_provides():
    bad = {**ONLINE_DRAFT, "preconditions": [], "effects": [], "provides": []}
    with pytest.raises(ValueError) as info:
        SkillDraft.model_validate(bad)
    text = str(info.value)
    assert "preconditions" in text and "effects" in text and "provides" in text


@pytest.mark.parametrize(
    ("task", "family"),
    [
        ("softmax", "softmax"),
        ("trimul", "trimul"),
        ("flashinfer:gqa_paged_decode_h32_kv4_d128_ps1", "flashinfer:gqa_paged_decode"),
        (
            "flashinfer:moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048",
            "flashinfer:moe_fp8_block_scale_ds_routing",
        ),
        ("kernelbench:/data/KernelBench/level1/19_ReLU.py", "kernelbench:19_ReLU"),
        ("/home/me/my_op.py", "my_op"),
    ],
)
def test_task_families(task, family):
    assert task_family(task) == family


def test_architectures_from_capabilities():
    assert arch_from_capability("9.0") == "sm90"
    assert arch_from_capability("10.0") == "sm100"
    assert arch_from_capability(None) == "cpu"


# ---- static feature checks ---------------------------------------------------------------------------------------


def test_features_are_detected_by_literal_fragments_ignoring_whitespace():
    online = Feature(locus="softmax.row_loop", name="online", detect=["tl.exp(m-m_new)"])
    assert feature_present(online, ONLINE_ONE_ROW, "cpu") is True
    assert feature_present(online, WHOLE_ROW, "cpu") is False
    assert feature_present(online, None, "cpu") is None
    assert feature_present(Feature(locus="x", name="y"), ONLINE_ONE_ROW, "cpu") is None  # no detect: unknown
    regexish = Feature(locus="x", name="y", detect=["tl.exp(.*)"])
    assert feature_present(regexish, ONLINE_ONE_ROW, "cpu") is False  # fragments are never regular expressions


def test_hardware_capabilities_are_never_implicit_supersets():
    wgmma = Feature(locus="hardware", name="wgmma")
    assert feature_present(wgmma, None, "sm90") is True
    assert feature_present(wgmma, None, "sm100") is False
    assert feature_present(wgmma, None, "cpu") is False
    assert feature_present(wgmma, None, "sm120") is None  # unknown architecture: cannot tell


def test_contract_checks_hold_the_claims_against_both_versions_of_the_code():
    good = SkillDraft.model_validate(ONLINE_DRAFT)
    assert draft_contract_errors(good, WHOLE_ROW, ONLINE_ONE_ROW, "cpu") == []
    # reversed direction: the provided feature is in the before code and missing after
    errors = draft_contract_errors(good, ONLINE_ONE_ROW, WHOLE_ROW, "cpu")
    assert any("not all in the after code" in e for e in errors)
    assert any("already in the before code" in e for e in errors)
    undetectable = SkillDraft.model_validate({**ONLINE_DRAFT, "provides": [{"locus": "a", "name": "b"}]})
    assert any("detect" in e for e in draft_contract_errors(undetectable, WHOLE_ROW, ONLINE_ONE_ROW, "cpu"))
    rows = SkillDraft.model_validate(ROWS_DRAFT)  # requires online softmax in the before code
    assert any(e.startswith("requires[0]") for e in draft_contract_errors(rows, WHOLE_ROW, ONLINE_ONE_ROW, "cpu"))
    conflicted = SkillDraft.model_validate(
        {**ONLINE_DRAFT, "conflicts": [{"locus": "launch", "name": "whole_row", "detect": ["next_power_of_2(n_cols)"]}]}
    )
    assert any(
        e.startswith("conflicts[0]") for e in draft_contract_errors(conflicted, WHOLE_ROW, ONLINE_ONE_ROW, "cpu")
    )
    tma = SkillDraft.model_validate({**ONLINE_DRAFT, "requires": [{"locus": "hardware", "name": "tma"}]})
    assert draft_contract_errors(tma, WHOLE_ROW, ONLINE_ONE_ROW, "sm90") == []
    assert any("tma" in e for e in draft_contract_errors(tma, WHOLE_ROW, ONLINE_ONE_ROW, "sm80"))


# ---- evidence: estimates, admission, retirement --------------------------------------------------------------------


def test_no_measurement_means_no_estimate():
    est = estimate([ev("origin", timed=False)])
    assert est.speedup is None and est.source_speedup is None and est.trials == 0 and est.pass_rate == 0.5


def test_the_source_gain_is_only_a_shrunk_prior_and_paired_trials_move_it():
    origin = ev("origin", speedup=2.0, ci=(1.9, 2.1))
    prior = estimate([origin])
    assert prior.source_speedup == pytest.approx(2.0)
    assert prior.speedup == pytest.approx(math.exp(0.5 * math.log(2.0)))  # half the source's log gain
    assert prior.low < prior.speedup < prior.high
    slow = ev(base="b2", cand="c2", speedup=0.9, ci=(0.88, 0.92), held_out=True)
    after = estimate([origin, slow])
    assert after.paired_trials == 1 and after.speedup < prior.speedup
    assert after.speedup == pytest.approx(0.9, rel=0.02)  # a tight measurement dominates the weak prior
    assert after.high - after.low < prior.high - prior.low


def test_failures_lower_the_pass_rate_and_become_observed_risks():
    failed = ev(verdict="incorrect", timed=False, cycle="c9")
    failed = failed.model_copy(update={"note": "large_6x257: 283 non-finite values"})
    view = summarize(skill(), [failed, ev(base="b3", cand="c3", timed=False, cycle="c10")])
    assert view.estimate.trials == 2 and view.estimate.trials_passed == 1
    assert view.estimate.pass_rate == pytest.approx(0.5)
    assert any("incorrect" in r and "non-finite" in r for r in view.observed_risks)
    assert view.risks[: len(view.skill.risks)] == view.skill.risks  # the skill's own risks stay first


def test_a_replay_measuring_the_same_pair_counts_once():
    trial = ev(speedup=1.5, ci=(1.4, 1.6), held_out=True)
    replayed = trial.model_copy(update={"run_id": "replay-of-r"})
    assert estimate([trial, replayed]).paired_trials == 1


def test_held_out_means_another_task_or_other_code():
    origins = [ev("origin", base="before", cand="after")]
    assert is_held_out("trimul", "before", origins)
    assert is_held_out("softmax", "other-code", origins)
    assert not is_held_out("softmax", "before", origins)  # the code it was learned on (a replay, a sibling)
    assert not is_held_out("softmax", "after", origins)
    assert is_held_out("softmax", None, origins)  # from the spec: no paired measurement, so it cannot verify anyway
    assert is_held_out("softmax", "before", [])  # a hand-written skill has no source


@pytest.mark.parametrize(
    ("trials", "status"),
    [
        ([], SkillStatus.CANDIDATE),
        ([ev(speedup=1.5, ci=(1.3, 1.7), held_out=False)], SkillStatus.CANDIDATE),  # verified, not held out
        ([ev(timed=False, held_out=True)], SkillStatus.CANDIDATE),  # correct but untimed (CPU): never admits
        ([ev(speedup=1.01, ci=(0.98, 1.04), held_out=True)], SkillStatus.CANDIDATE),  # not significant
        ([ev(speedup=1.5, ci=(1.3, 1.7), held_out=True)], SkillStatus.ADMITTED),
        (
            [ev(verdict="incorrect", timed=False, cycle=f"c{i}", base=f"b{i}", cand=f"x{i}") for i in range(5)],
            SkillStatus.RETIRED,
        ),
        (
            [ev(speedup=0.8, ci=(0.75, 0.85), cycle=f"c{i}", base=f"b{i}", cand=f"x{i}") for i in range(3)]
            + [ev(speedup=1.5, ci=(1.3, 1.7), held_out=True, cycle="c9", base="b9", cand="x9")],
            SkillStatus.ADMITTED,
        ),
        # five trials, mostly slower: retirement wins over the one admitting trial
        (
            [ev(speedup=0.8, ci=(0.75, 0.85), cycle=f"c{i}", base=f"b{i}", cand=f"x{i}") for i in range(4)]
            + [ev(speedup=1.5, ci=(1.3, 1.7), held_out=True, cycle="c9", base="b9", cand="x9")],
            SkillStatus.RETIRED,
        ),
    ],
)
def test_status_is_derived_from_the_evidence(trials, status):
    assert derive_status([ev("origin", speedup=1.3, ci=(1.2, 1.4)), *trials]) == status


# ---- retrieval -----------------------------------------------------------------------------------------------------


def view_of(s: Skill, *evidence: Evidence):
    return summarize(s, list(evidence))


def test_hard_filters_scope_status_and_preconditions():
    online = view_of(skill())
    assert exclusion_reasons(online, SM90, WHOLE_ROW) == []
    assert exclusion_reasons(online, SM90, None) == []  # no code: the typed part cannot be checked, so it passes
    assert exclusion_reasons(online, SM90.model_copy(update={"arch": "sm100"}), WHOLE_ROW)  # no supersets
    assert exclusion_reasons(online, SM90.model_copy(update={"family": "trimul"}), WHOLE_ROW)
    assert exclusion_reasons(online, SM90.model_copy(update={"language": "cuda"}), WHOLE_ROW)
    assert exclusion_reasons(view_of(skill(archs=["*"], families=["*"])), CPU, WHOLE_ROW) == []
    assert any("already applied" in r for r in exclusion_reasons(online, SM90, ONLINE_ONE_ROW))
    rows = view_of(skill(ROWS_DRAFT))
    assert any("requires" in r for r in exclusion_reasons(rows, SM90, WHOLE_ROW))
    assert exclusion_reasons(rows, SM90, ONLINE_ONE_ROW) == []
    conflicted = view_of(
        skill({**ONLINE_DRAFT, "conflicts": [{"locus": "k", "name": "pow2", "detect": ["next_power_of_2"]}]})
    )
    assert any("conflicts" in r for r in exclusion_reasons(conflicted, SM90, WHOLE_ROW))
    retired = view_of(skill(), *[ev(verdict="crashed", timed=False, cycle=f"c{i}", base=f"b{i}") for i in range(5)])
    assert retired.status == SkillStatus.RETIRED
    assert any("retired" in r for r in exclusion_reasons(retired, SM90, WHOLE_ROW))
    tma = view_of(skill({**ONLINE_DRAFT, "requires": [{"locus": "hardware", "name": "tma"}]}, archs=["*"]))
    assert exclusion_reasons(tma, SM90, WHOLE_ROW) == []
    assert any("hardware" in r or "architecture" in r for r in exclusion_reasons(tma, CPU, WHOLE_ROW))


def test_ranking_puts_admitted_skills_first_then_the_most_similar():
    similar = view_of(skill())
    unrelated = view_of(
        skill(
            {
                **ONLINE_DRAFT,
                "category": "gemm_tiles",
                "intent": "Tile the matrix product",
                "recipe": "use tl.dot on 128x128 tiles",
                "effects": ["tensor cores busy"],
            }
        )
    )
    query = "row-wise softmax: stream each row, running maximum, rescaled sum"
    assert [r.view for r in retrieve([unrelated, similar], SM90, WHOLE_ROW, query, 5)] == [similar, unrelated]
    admitted = view_of(
        skill(
            {
                **ONLINE_DRAFT,
                "category": "gemm_tiles2",
                "intent": "Tile the matrix product",
                "recipe": "use tl.dot",
                "effects": ["x"],
            }
        ),
        ev("trial", speedup=1.4, ci=(1.2, 1.6), held_out=True),
    )
    assert admitted.status == SkillStatus.ADMITTED
    ranked = retrieve([unrelated, similar, admitted], SM90, WHOLE_ROW, query, 2)
    assert [r.view for r in ranked] == [admitted, similar]


def test_the_planner_section_lists_fitting_skills_and_says_how_to_bind_them():
    online, rows = view_of(skill()), view_of(skill(ROWS_DRAFT))
    text = skills_block([online, rows], SM90, WHOLE_ROW, "softmax", 5, "skills-sha256:abc")
    assert online.skill_id in text and rows.skill_id not in text  # rows needs online softmax first
    assert "skills-sha256:abc" in text and '"skill_id"' in text and "candidate, unverified" in text
    assert "softmax.row_loop/online_softmax" in text and "data_types:" in text
    assert "overflows" in text  # the top risk
    assert "no skill" in skills_block([rows], SM90, WHOLE_ROW, "softmax", 5, "skills-sha256:abc")
    assert "off" in skills_block([online], SM90, WHOLE_ROW, "softmax", 5, None)
    many = [view_of(skill({**ONLINE_DRAFT, "category": f"c{i}", "recipe": "r" * 3000})) for i in range(20)]
    assert len(skills_block(many, SM90, WHOLE_ROW, "q", 20, "s")) <= MAX_BLOCK_CHARS


def test_the_coder_gets_the_recipe_preconditions_and_risks():
    text = coder_skill_text(view_of(skill(), ev(verdict="incorrect", timed=False)))
    assert "Recipe: Replace the whole-row block" in text
    assert "- data_types: float32 accumulation" in text
    assert "overflows" in text and "observed incorrect" in text
    assert "Implement only this transformation" in text


def test_bindings_are_checked_against_the_library_scope_and_the_parent_code():
    online = view_of(skill())
    views = {online.skill_id: online}
    assert binding_errors("n1", online.skill_id, views, SM90, WHOLE_ROW) == []
    assert "not in this run's skill library" in binding_errors("n1", "sk-000000000000", views, SM90, WHOLE_ROW)[0]
    assert "already applied" in binding_errors("n1", online.skill_id, views, SM90, ONLINE_ONE_ROW)[0]
    assert "scope" in binding_errors("n1", online.skill_id, views, CPU, WHOLE_ROW)[0]


def test_new_bindings_are_new_or_changed_skill_ids():
    before = WorldModel()
    nodes = {
        **before.nodes,
        "a": Node(id="a", parent_id="root", action=Action(title="x", skill_id="sk-aaaaaaaaaaaa")),
        "b": Node(id="b", parent_id="root", action=Action(title="y")),
    }
    after = before.model_copy(update={"nodes": nodes})
    assert new_bindings(before, after) == [("a", "sk-aaaaaaaaaaaa")]
    assert new_bindings(after, after) == []
    changed = after.model_copy(
        update={
            "nodes": {
                **nodes,
                "b": Node(id="b", parent_id="root", action=Action(title="y", skill_id="sk-bbbbbbbbbbbb")),
            }
        }
    )
    assert new_bindings(after, changed) == [("b", "sk-bbbbbbbbbbbb")]


# ---- snapshots -------------------------------------------------------------------------------------------------------


def test_snapshots_keep_what_a_run_may_use_under_a_content_hash():
    online = view_of(skill())
    other_arch = view_of(skill(ROWS_DRAFT, archs=["sm100"]))
    retired = view_of(
        skill({**ONLINE_DRAFT, "category": "r"}),
        *[ev(verdict="crashed", timed=False, cycle=f"c{i}", base=f"b{i}") for i in range(5)],
    )
    frozen = freeze([other_arch, retired, online], SM90)
    assert frozen == [online]
    assert snapshot_id(frozen) == snapshot_id([online]) and snapshot_id(frozen).startswith("skills-sha256:")
    assert snapshot_id([online, view_of(skill(ROWS_DRAFT))]) == snapshot_id([view_of(skill(ROWS_DRAFT)), online])
    measured = view_of(skill(), ev(speedup=1.2, ci=(1.1, 1.3), held_out=True))
    assert snapshot_id([measured]) != snapshot_id([online])  # new evidence: another library
