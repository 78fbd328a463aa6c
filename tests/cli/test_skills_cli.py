"""``ksearch skills list|show|export|import``: a shareable JSON format, idempotent import, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.errors import UserError
from ksearch.skills.evidence import Evidence, EvidenceKind
from ksearch.skills.library import record_evidence, save_skill
from ksearch.skills.records import Scope, SkillDraft, SkillSource, make_skill
from ksearch.store import Store
from tests.helpers.skill_scripts import ONLINE_DRAFT, ROWS_DRAFT, learn_script

runner = CliRunner()


def library(ws) -> list[str]:
    store = Store(ws / "ksearch.db")
    ids = []
    try:
        for draft, arch in ((ONLINE_DRAFT, "sm90"), (ROWS_DRAFT, "sm100")):
            skill = make_skill(
                SkillDraft.model_validate(draft),
                source=SkillSource.EXPERT,
                scope=Scope(families=["softmax"], languages=["triton"], archs=[arch]),
            )
            save_skill(store, skill)
            record_evidence(
                store,
                skill.skill_id,
                Evidence(
                    kind=EvidenceKind.TRIAL,
                    run_id="r9",
                    cycle_id="c4",
                    task="trimul",
                    family="trimul",
                    language="triton",
                    arch=arch,
                    base_candidate_id="b",
                    candidate_id="c",
                    verdict="passed",
                    timed=True,
                    speedup=1.3,
                    ci_low=1.2,
                    ci_high=1.4,
                    held_out=True,
                ),
            )
            ids.append(skill.skill_id)
    finally:
        store.close()
    return ids


def cli(ws, *args: str):
    return runner.invoke(app, ["--workspace", str(ws), "skills", *args])


def test_list_show_filter_and_json(tmp_path):
    online, rows = library(tmp_path)
    listed = json.loads(cli(tmp_path, "list", "--json").stdout)
    assert [v["skill"]["skill_id"] for v in listed] == [online, rows]
    assert {v["status"] for v in listed} == {"admitted"}  # a held-out verified trial each
    by_arch = json.loads(cli(tmp_path, "list", "--arch", "sm90", "--json").stdout)
    assert [v["skill"]["skill_id"] for v in by_arch] == [online]
    assert json.loads(cli(tmp_path, "list", "--task", "trimul", "--json").stdout) == []
    assert json.loads(cli(tmp_path, "list", "--status", "candidate", "--json").stdout) == []
    text = cli(tmp_path, "list").output
    assert online in text and "admitted" in text
    shown = cli(tmp_path, "show", online[:8])
    assert shown.exit_code == 0 and "Replace the whole-row block" in shown.output and "r9/c4" in shown.output
    detail = json.loads(cli(tmp_path, "show", online, "--json").stdout)
    assert detail["view"]["skill"]["skill_id"] == online and detail["evidence"][0]["speedup"] == 1.3


def test_export_then_import_elsewhere_is_lossless_and_idempotent(tmp_path):
    online, rows = library(tmp_path / "a")
    path = tmp_path / "skills.json"
    assert cli(tmp_path / "a", "export", str(path)).exit_code == 0
    payload = json.loads(path.read_text())
    assert payload["format"] == "ksearch-skills" and payload["version"] == 1 and len(payload["skills"]) == 2
    first = cli(tmp_path / "b", "import", str(path))
    assert first.exit_code == 0 and "imported 2 new skills" in first.output and "2 evidence records" in first.output
    again = cli(tmp_path / "b", "import", str(path))
    assert "imported 0 new skills (2 already known), 0 evidence" in again.output
    there = json.loads(cli(tmp_path / "b", "list", "--json").stdout)
    assert [v["skill"]["skill_id"] for v in there] == [online, rows]
    evidence = json.loads(cli(tmp_path / "b", "show", online, "--json").stdout)["evidence"]
    assert evidence[0]["imported"] is True and evidence[0]["run_id"] == "r9"
    # an edited skill is another skill: its id follows its content
    payload["skills"][0]["skill"]["scope"]["archs"] = ["sm90", "sm100"]
    path.write_text(json.dumps(payload))
    edited = cli(tmp_path / "b", "import", str(path))
    assert "imported 1 new skills (1 already known)" in edited.output
    assert cli(tmp_path / "a", "export", str(tmp_path / "one.json"), "--id", online[:9]).exit_code == 0
    assert [r["skill"]["skill_id"] for r in json.loads((tmp_path / "one.json").read_text())["skills"]] == [online]


def test_bad_files_and_unknown_ids_are_one_line_errors(tmp_path):
    library(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "ksearch-skills", "version": 1, "skills": [{"skill": {"intent": "x"}}]}))
    for args, message in (
        (["import", str(bad)], "is not a ksearch-skills file"),
        (["import", str(tmp_path / "missing.json")], "cannot read"),
    ):
        result = cli(tmp_path, *args)
        assert isinstance(result.exception, UserError) and message in str(result.exception)
    proc = subprocess.run(
        [sys.executable, "-m", "ksearch.cli", "--workspace", str(tmp_path), "skills", "show", "sk-ffffffffffff"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "no skill" in proc.stderr and "ksearch skills list" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_file_that_is_not_utf8_text_is_a_one_line_error(tmp_path):
    latin1 = tmp_path / "skills.json"
    latin1.write_bytes('{"format": "ksearch-skills", "note": "caf\u00e9"}'.encode("latin-1"))
    result = cli(tmp_path, "import", str(latin1))
    assert isinstance(result.exception, UserError)
    assert "is not a ksearch-skills file: it is not UTF-8 text" in str(result.exception)


def test_learning_refuses_the_interactive_model_in_one_line_before_any_work(tmp_path):
    expert = tmp_path / "expert.py"
    expert.write_text("def kernel(x):\n    return x\n")
    result = cli(tmp_path, "learn", str(expert), "--task", "softmax", "--model", "interactive", "--device", "cpu")
    assert isinstance(result.exception, UserError)
    assert "cannot take --model interactive" in str(result.exception) and "replay:FILE" in result.exception.hint
    assert "session" not in result.output  # refused before the expert was evaluated


def test_the_readme_demo_replies_are_the_tested_script(tmp_path):
    demo = Path(__file__).resolve().parents[2] / "examples" / "softmax-skills-demo.jsonl"
    assert learn_script(tmp_path / "s.jsonl").read_text() == demo.read_text()
