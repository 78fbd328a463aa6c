"""The report model read from a store, and the HTML rendered from it (no browser here: see test_report_browser.py)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.flows import report as report_flow
from ksearch.flows import report_render
from ksearch.flows.report_gather import gather_comparison, gather_run_report
from ksearch.store import Store
from tests.helpers.report_store import CONFIGS, T0, hostile_marker_in, write_timed_run

pytest.importorskip("plotly", reason="the report extra is not installed: pip install 'ksearch[report]'")
pytest.importorskip("jinja2", reason="the report extra is not installed: pip install 'ksearch[report]'")


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def write_cpu_run(workspace: Path, run_id: str = "softmax-cpu") -> None:
    """A two-round CPU run: nothing is timed; one kernel passes, one does not compile."""
    store = Store(workspace / "ksearch.db")
    try:
        store.create_run(
            {
                "id": run_id,
                "task": "softmax",
                "model": "replay:x",
                "language": "triton",
                "device": "cpu",
                "config": {"run_id": run_id, "max_rounds": 2, "device": "cpu"},
                "created_at": T0,
            }
        )
        ok = Candidate(task="softmax", language="triton", code="def kernel(x):\n    return x.softmax(-1)\n")
        bad = Candidate(task="softmax", language="triton", code="def kernel(x:\n")
        for cand, ev, n in (
            (ok, Evaluation(verdict=Verdict.PASSED, device="cpu", configs_passed=8, configs_total=8), 1),
            (bad, Evaluation(verdict=Verdict.COMPILE_ERROR, device="cpu", log="SyntaxError"), 2),
        ):
            store.ensure_candidate(cand)
            eid = store.record_evaluation(cand.id, "cpu-key", ev)
            store.record_attempt(
                {
                    "run_id": run_id,
                    "cycle_id": "c1",
                    "attempt": n,
                    "round_index": n,
                    "node_id": "a",
                    "prompt_kind": "action_from_spec",
                    "candidate_id": cand.id,
                    "evaluation_id": eid,
                    "verdict": ev.verdict.value,
                    "score": None,
                    "created_at": T0 + 30 * n,
                }
            )
            if ev.passed:
                store.update_run(run_id, best_candidate_id=cand.id, best_evaluation_id=eid, rounds_used=n)
        store.update_run(run_id, status="finished", rounds_used=2, done_reason="round budget spent (2/2)")
    finally:
        store.close()


@pytest.fixture
def timed(tmp_path):
    return write_timed_run(tmp_path / "ws")


def _gather(workspace: Path, run_id: str):
    store = Store(workspace / "ksearch.db")
    try:
        return gather_run_report(store, run_id)
    finally:
        store.close()


def test_a_timed_run_gives_its_latencies_best_curve_and_per_shape_table(timed):
    r = _gather(timed.workspace, timed.run_id)
    assert r.timed and r.timing_note == ""
    assert len(r.points) == timed.rounds and r.points[0].is_seed
    measured = [p for p in r.points if p.latency_ms is not None]
    assert [p.cycle_id for p in measured] == ["seed", "c1", "c3"]
    assert measured[2].latency_ms == pytest.approx(_geomean(timed.medians["a1.1"]))
    # the best so far after every round from the seed on, never worse than before
    assert [b.round_index for b in r.best_curve] == [0, 1, 2, 3, 4, 5]
    latencies = [b.latency_ms for b in r.best_curve]
    assert latencies == sorted(latencies, reverse=True)
    assert latencies[-1] == pytest.approx(_geomean(timed.medians["a1.1"]))
    assert r.best_node_id == "a1" and r.passed_rounds == 2 and r.first_pass_round == 1
    assert [p.elapsed_s for p in r.points][:2] == [pytest.approx(30.0), pytest.approx(180.0)]

    shapes = r.shapes
    assert shapes.timed and [row.config for row in shapes.rows] == list(CONFIGS)
    assert shapes.seed.available and shapes.reference.available
    for i, row in enumerate(shapes.rows):
        assert row.best.median_ms == timed.medians["a1.1"][i]
        assert row.seed.median_ms == timed.medians["seed"][i]
        assert row.reference.median_ms == timed.medians["reference"][i]
        assert row.speedup_vs_seed == pytest.approx(timed.medians["seed"][i] / timed.medians["a1.1"][i])
        assert row.speedup_vs_reference == pytest.approx(timed.medians["reference"][i] / timed.medians["a1.1"][i])

    usage = {u.role: u for u in r.usage}
    assert usage["coder"].calls == 5 and usage["planner"].calls == 2
    assert usage["planner"].input_tokens == 3200 and usage["planner"].retries == 1
    assert r.usage_total.calls == 7 and r.usage_total.cost_usd == pytest.approx(0.49)
    assert r.environment["timing_method"] == "gpumode" and r.settings["max_rounds"] == "5"


def test_the_tree_has_every_node_with_its_evidence_and_diff_from_its_parent(timed):
    r = _gather(timed.workspace, timed.run_id)
    nodes = {n.id: n for n in r.nodes}
    assert set(nodes) == set(timed.world_model.nodes)
    assert [n.id for n in r.nodes] == ["root", "a", "a1", "a2", "b"]  # depth first, children by id
    assert nodes["a1"].depth == 2 and nodes["root"].children == ["a", "b"]
    assert nodes["a"].diff.base_label == "the seed kernel (the root's solution)"
    assert nodes["a1"].diff.base_label == "the solution of its parent a"
    assert nodes["a1"].diff.base_candidate_id == nodes["a"].solution.candidate_id
    assert nodes["a1"].diff.added == 1 and nodes["a1"].diff.removed == 1
    assert any(line.kind == "add" and "a1.1 fp16 contraction" in line.text for line in nodes["a1"].diff.lines)
    assert nodes["b"].diff.code_label.startswith("its last attempt (round 5, runtime_error)")
    assert nodes["a2"].diff is None and nodes["a2"].rounds == []
    assert [p.round_index for p in nodes["b"].rounds] == [3, 5]
    assert nodes["root"].diff.base_label.startswith("nothing: this is the seed kernel")


def test_a_reference_never_measured_is_said_to_be_missing_never_invented(tmp_path):
    run = write_timed_run(tmp_path / "ws", with_reference=False)
    r = _gather(run.workspace, run.run_id)
    assert not r.shapes.reference.available
    assert "never timed in this workspace" in r.shapes.reference.note
    assert all(row.reference is None and row.speedup_vs_reference is None for row in r.shapes.rows)
    html = report_render.render_run(r, report_render.Assets())
    assert "never timed in this workspace" in html


def test_an_untimed_cpu_run_is_shown_by_verdict_and_says_it_was_not_timed(tmp_path):
    write_cpu_run(tmp_path / "ws")
    r = _gather(tmp_path / "ws", "softmax-cpu")
    assert not r.timed and r.best_curve == [] and r.timing_note.startswith("correctness only, not timed")
    assert not r.shapes.timed and "correctness only, not timed" in r.shapes.note
    assert "nothing to compare with" in r.shapes.reference.note and "no seed" in r.shapes.seed.note
    fig = report_render.candidates_figure(r, "round")
    kinds = [t.meta["kind"] for t in fig.data]
    assert kinds == ["verdict", "verdict"]  # no latency panel
    assert sum(len(t.x) for t in fig.data) == 2
    html = report_render.render_run(r, report_render.Assets())
    assert "correctness only, not timed" in html and 'id="chart-rounds"' in html and 'id="chart-time"' in html


def test_the_timed_figures_hold_one_point_per_candidate(timed):
    r = _gather(timed.workspace, timed.run_id)
    for axis in ("round", "time"):
        fig = report_render.candidates_figure(r, axis)
        by_kind: dict[str, int] = {}
        for trace in fig.data:
            by_kind[trace.meta["kind"]] = by_kind.get(trace.meta["kind"], 0) + len(trace.x)
        assert by_kind == {
            "latency": timed.timed_passes,
            "best": len(r.best_curve),
            "run-best": 1,
            "verdict": timed.rounds,
        }


def test_a_written_report_is_one_self_contained_file_that_escapes_model_text(timed, tmp_path):
    path = report_flow.write_report([timed.run_id[:8]], tmp_path / "out" / "r.html", timed.workspace)
    html = path.read_text()
    assert report_render.plotly_js() in html  # plotly.js is inlined
    ours = html.replace(report_render.plotly_js(), "")
    assert "<script src=" not in ours and "http" not in ours.replace("http-equiv", "")
    assert html.count('class="js-plotly-plot"') == 0  # plotly adds that class in the browser, not here
    assert 'id="chart-rounds"' in html and 'id="chart-time"' in html
    for node_id in timed.world_model.nodes:
        assert f'data-node-id="{node_id}"' in html
    assert not hostile_marker_in(html)
    assert "&lt;/script&gt;&lt;script&gt;window.__xss" in html  # shown as text


def test_a_comparison_overlays_the_runs_and_lists_the_settings_that_differ(timed, tmp_path):
    write_cpu_run(timed.workspace)
    store = Store(timed.workspace / "ksearch.db")
    try:
        cmp = gather_comparison(store, [timed.run_id, "softmax-cpu"])
    finally:
        store.close()
    assert [r.run_id for r in cmp.runs] == [timed.run_id, "softmax-cpu"]
    differing = {d.key: d.values for d in cmp.differing_settings}
    assert differing["device"] == ["cuda", "cpu"] and differing["task"] == ["trimul", "softmax"]
    assert "run_id" not in differing
    best = report_render.compare_best_figure(cmp)
    assert {t.meta["run"] for t in best.data} == {timed.run_id}  # only timed runs have a latency curve
    passes = report_render.compare_passes_figure(cmp)
    assert {t.meta["run"]: len(t.x) for t in passes.data} == {timed.run_id: 5, "softmax-cpu": 2}
    html = report_render.render_comparison(cmp, report_render.Assets())
    assert 'id="bests-table"' in html and "Not timed, so not on the latency chart: softmax-cpu" in html


def test_cli_report_writes_a_run_and_a_comparison(timed, tmp_path, monkeypatch):
    write_cpu_run(timed.workspace)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["--workspace", str(timed.workspace), "report", timed.run_id])
    assert result.exit_code == 0, result.output
    assert (tmp_path / f"report-{timed.run_id}.html").is_file() and "opens offline" in result.output
    result = runner.invoke(
        app, ["--workspace", str(timed.workspace), "report", timed.run_id, "softmax", "-o", "cmp.html"]
    )
    assert result.exit_code == 0, result.output
    assert 'id="chart-compare-passes"' in (tmp_path / "cmp.html").read_text()


def test_report_without_the_extra_says_how_to_install_it(tmp_path):
    code = (
        "import sys; sys.modules['plotly'] = None\n"
        "sys.argv = ['ksearch', '--workspace', sys.argv[1], 'report', 'x']\n"
        "from ksearch.cli import main; main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "reports need plotly" in proc.stderr and "pip install 'ksearch[report]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_run_that_has_not_finished_a_round_yet_still_renders(tmp_path):
    store = Store(tmp_path / "ws" / "ksearch.db")
    try:
        store.create_run(
            {
                "id": "fresh",
                "task": "softmax",
                "model": "replay:x",
                "language": "triton",
                "device": "cuda",
                "config": {"run_id": "fresh", "max_rounds": 3},
            }
        )
        r = gather_run_report(store, "fresh")
    finally:
        store.close()
    assert (
        r.points == []
        and [n.id for n in r.nodes] == ["root"]
        and r.timing_note == "not timed yet: no candidate has passed"
    )
    html = report_render.render_run(r, report_render.Assets())
    assert "no candidate has passed yet" in html and 'data-node-id="root"' in html


def test_the_report_and_show_give_the_bests_roofline_profile_and_the_run_cost(timed, tmp_path):
    from typer.testing import CliRunner

    from ksearch.cli import app

    r = _gather(timed.workspace, timed.run_id)
    assert [row.roofline.fraction for row in r.shapes.rows] == [0.25, 0.25, 0.25]
    assert [p.config for p in r.best_profile] == list(CONFIGS) and r.best_resources[0].registers == 168
    cost = r.cost
    assert cost.input_tokens == r.usage_total.input_tokens and cost.cost_usd is None  # the run was given no prices
    assert cost.gpu_evaluations == 6 and cost.gpu_minutes == pytest.approx(
        3 * 70 / 60
    )  # the seed and 5 rounds; 3 timed
    assert cost.wall_minutes == pytest.approx(13.0) and cost.wall_minutes_per_round == pytest.approx(13.0 / 5)
    html = report_render.render_run(r, report_render.Assets())
    assert "of roofline" in html and "25 %" in html and "Profile of the best kernel" in html
    assert "_contract_kernel: 1×" in html and "73728 B" in html and "3.50 GPU-minutes" in html
    shown = CliRunner().invoke(app, ["--workspace", str(timed.workspace), "show", timed.run_id])
    assert shown.exit_code == 0, shown.output
    assert (
        "run cost:" in shown.stdout and "GPU-minutes" in shown.stdout and "2.60 wall minutes per round" in shown.stdout
    )
    assert "25% of roofline" in shown.stdout and "Per timed shape:" in shown.stdout
