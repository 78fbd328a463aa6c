"""``ksearch export``: a run's best candidate as a plain module or a GPU MODE submission, and back through evaluate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch.agent.config import RunConfig
from ksearch.cli import app
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.errors import UserError
from ksearch.flows import run as runner
from ksearch.flows.export import FORMATS, Exported, ExportFormat, export_run, load_best, register_format, render
from ksearch.tools.evaluator import EvalRequest, evaluate
from tests.helpers.scripts import fenced, init_plan, write_script

ROOT = Path(__file__).resolve().parents[1]
SUBMISSION = ROOT / "examples" / "trimul_submission.py"


def _store_with_best(ws: Path, task: str, code: str, entry_point: str, run_id: str = "r1", evaluation=None):
    store = runner.open_store(ws)
    cid = store.ensure_candidate(Candidate(task=task, language="triton", code=code, entry_point=entry_point))
    store.create_run(
        {"id": run_id, "task": task, "model": "replay:x", "language": "triton", "device": "cpu", "config": {}}
    )
    fields = {"best_candidate_id": cid}
    if evaluation is not None:
        fields["best_evaluation_id"] = store.record_evaluation(cid, "k", evaluation)
    store.update_run(run_id, **fields)
    return store, cid


def test_module_format_is_byte_identical_and_gpumode_adds_a_header(tmp_path):
    code = SUBMISSION.read_text()
    passed = Evaluation(verdict=Verdict.PASSED, device="cpu", configs_passed=4, configs_total=4)
    store, cid = _store_with_best(tmp_path / "ws", "trimul", code, "custom_kernel", evaluation=passed)
    try:
        module = export_run(store, "r1", "module", tmp_path / "m.py")
        assert (tmp_path / "m.py").read_text() == code and module.warnings == []
        sub = export_run(store, "r1", "gpumode", tmp_path / "out" / "submission.py")
        text = (tmp_path / "out" / "submission.py").read_text()
        assert text.endswith(code) and sub.path == tmp_path / "out" / "submission.py"
        header = text[: len(text) - len(code)]
        assert all(line.startswith("#") for line in header.strip().splitlines())
        assert "run r1" in header and "ksearch" in header and cid in header and "passed 4/4 configs" in header
        assert "stream" not in text.lower() and sub.warnings == []
        with pytest.raises(UserError, match="exists"):
            export_run(store, "r1", "gpumode", tmp_path / "out" / "submission.py")
        export_run(store, "r1", "gpumode", tmp_path / "out" / "submission.py", overwrite=True)
        assert export_run(store, "r1", "gpumode", Path("-")).path is None
    finally:
        store.close()


def test_gpumode_warns_about_the_word_stream_and_refuses_other_interfaces(tmp_path):
    code = SUBMISSION.read_text() + "\n# uses a side Stream for nothing\n"
    store, _ = _store_with_best(tmp_path / "ws", "trimul", code, "custom_kernel")
    try:
        exported = render(load_best(store, "r1"), "gpumode")
        assert len(exported.warnings) == 1 and "'stream'" in exported.warnings[0] and "line" in exported.warnings[0]
        with pytest.raises(UserError, match="unknown export format"):
            render(load_best(store, "r1"), "tarball")
    finally:
        store.close()
    store, _ = _store_with_best(tmp_path / "ws2", "softmax", "def kernel(x):\n    return x\n", "kernel")
    try:
        with pytest.raises(UserError, match="custom_kernel"):
            render(load_best(store, "r1"), "gpumode")
        assert render(load_best(store, "r1"), "module").text == "def kernel(x):\n    return x\n"
    finally:
        store.close()


def test_a_run_without_a_best_cannot_be_exported(tmp_path):
    store = runner.open_store(tmp_path / "ws")
    try:
        store.create_run(
            {"id": "empty", "task": "softmax", "model": "m", "language": "triton", "device": "cpu", "config": {}}
        )
        with pytest.raises(UserError, match="no best candidate"):
            export_run(store, "empty", "module", tmp_path / "x.py")
    finally:
        store.close()


def test_formats_registry_takes_new_formats():
    class Upper(ExportFormat):
        name = "upper-test"
        description = "test only"

        def render(self, source):
            return Exported(text=source.candidate.code.upper(), format=self.name, filename="x.py")

    register_format(Upper())
    try:
        assert "upper-test" in FORMATS and {"module", "gpumode"} <= set(FORMATS)
    finally:
        FORMATS.pop("upper-test")


@pytest.mark.slow
def test_round_trip_a_trimul_run_exported_as_a_submission_passes_evaluation(tmp_path):
    """A scripted trimul search on the CPU whose best is the example submission; export it, evaluate the file."""
    script = write_script(
        tmp_path / "s.jsonl",
        [("plan:0:0", init_plan([("a", 0.9), ("b", 0.5)])), ("write:c1:1", fenced(SUBMISSION.read_text()))],
    )
    ws = tmp_path / "ws"
    cfg = RunConfig(run_id="tri", task="trimul", model=f"replay:{script}", device="cpu", max_rounds=1)
    outcome = runner.start_run(cfg, workspace=ws)
    assert outcome.best is not None

    result = CliRunner().invoke(
        app, ["--workspace", str(ws), "export", "tri", "--format", "gpumode", "--output", str(tmp_path / "sub.py")]
    )
    assert result.exit_code == 0, result.output
    exported = (tmp_path / "sub.py").read_text()
    assert exported.startswith("# GPU MODE submission for trimul") and "run tri" in exported
    evaluation = evaluate(
        EvalRequest(
            candidate=Candidate(task="trimul", language="triton", code=exported, entry_point="custom_kernel"),
            device="cpu",
        )
    )
    assert evaluation.verdict == Verdict.PASSED, evaluation.log

    printed = CliRunner().invoke(app, ["--workspace", str(ws), "export", "tri", "--output", "-"])
    assert printed.exit_code == 0 and SUBMISSION.read_text() in printed.output
    bad = CliRunner().invoke(app, ["--workspace", str(ws), "export", "tri", "--format", "nope", "-o", "-"])
    assert bad.exit_code != 0
    json.dumps(exported)  # plain text
