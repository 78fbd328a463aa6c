"""The best kernel's hardware counters in `ksearch show` and the HTML report, and a plain sentence where there are
none."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.contracts.counters import CounterReport, CounterStatus
from ksearch.flows import report_render
from ksearch.flows.report_gather import gather_run_report
from ksearch.store import Store
from ksearch.store.counters import record_counters
from ksearch.tools.counters.ncu_csv import parse_raw_page, range_of, shape_counters
from tests.helpers.report_store import write_timed_run

pytest.importorskip("plotly", reason="the report extra is not installed: pip install 'ksearch[report]'")
pytest.importorskip("jinja2", reason="the report extra is not installed: pip install 'ksearch[report]'")

NCU = Path(__file__).parents[1] / "tools" / "ncu"


def _collected() -> CounterReport:
    launches = parse_raw_page((NCU / "raw_page.csv").read_text())
    shape_of = {x.id: range_of(x.name) for x in parse_raw_page((NCU / "raw_page_by_range.csv").read_text())}
    return CounterReport(
        status=CounterStatus.COLLECTED,
        shapes=shape_counters(launches, shape_of, ["b5", "b2"], {"b5": 402653184.0}),
        tool="ncu 2025.3.0.0",
        device="NVIDIA H100 80GB HBM3",
        wall_s=14.2,
        layers="userns,mountns,ipcns,caps,landlock (network rules open for ncu)",
    )


def _with_counters(workspace: Path, run_id: str, report: CounterReport):
    store = Store(workspace / "ksearch.db")
    try:
        best = store.get_run(run_id)["best_evaluation_id"]
        record_counters(store, best, run_id, report)
        return gather_run_report(store, run_id)
    finally:
        store.close()


def test_the_report_and_show_carry_the_bests_counters(tmp_path: Path) -> None:
    timed = write_timed_run(tmp_path / "ws")
    r = _with_counters(timed.workspace, timed.run_id, _collected())
    assert r.best_counters is not None and r.best_counters.shapes[0].config == "b5"
    html = report_render.render_run(r, report_render.Assets())
    assert 'id="best-counters"' in html and "ncu 2025.3.0.0 on NVIDIA H100 80GB HBM3" in html
    assert "_ln_proj_rows" in html and "registers" in html and "long scoreboard 8.14" in html
    assert "4.7× the minimum" in html and "Took 14.2 s" in html
    shown = CliRunner().invoke(app, ["--workspace", str(timed.workspace), "show", timed.run_id])
    assert shown.exit_code == 0, shown.output
    assert "Hardware counters (ncu 2025.3.0.0" in shown.stdout and "_ln_proj_rows x2" in shown.stdout


def test_counters_that_could_not_be_read_say_why(tmp_path: Path) -> None:
    timed = write_timed_run(tmp_path / "ws")
    detail = "ERR_NVGPUCTRPERM: allow them with NVreg_RestrictProfilingToAdminUsers=0"
    report = CounterReport(status=CounterStatus.NO_PERMISSION, detail=detail)
    r = _with_counters(timed.workspace, timed.run_id, report)
    html = report_render.render_run(r, report_render.Assets())
    assert 'id="counters-missing"' in html and "Not collected (no_permission)" in html and detail in html
    shown = CliRunner().invoke(app, ["--workspace", str(timed.workspace), "show", timed.run_id])
    assert "Hardware counters: not collected (no_permission: " in shown.stdout
    assert detail in shown.stdout.replace("\n", " ")  # the whole reason for people (a prompt has the status only)
