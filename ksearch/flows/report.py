"""The ``report`` flow: a run (or several) read from the workspace store (``report_gather``) into a typed model
(``report_model``) and rendered (``report_render``) as one self-contained HTML file that opens offline: plotly.js is
inlined.

``ksearch report RUN`` writes a run's report, ``ksearch report RUN1 RUN2 ...`` a comparison; ``serve`` renders the
same pages on every request. Nothing is evaluated or measured here: the report shows what the store holds.
"""

from __future__ import annotations

from pathlib import Path

from ksearch.contracts.identifiers import file_stem
from ksearch.errors import UserError
from ksearch.flows import report_render
from ksearch.flows.report_gather import gather_comparison, gather_run_report
from ksearch.flows.report_model import ComparisonReport, RunReport
from ksearch.flows.workspace import open_store

__all__ = ["run_report", "comparison_report", "render_pages", "default_output", "write_report"]


def run_report(run_id: str, workspace: Path | None = None) -> RunReport:
    """The report model of one run (a unique id prefix is enough)."""
    store = open_store(workspace, read_only=True)
    try:
        return gather_run_report(store, run_id)
    finally:
        store.close()


def comparison_report(run_ids: list[str], workspace: Path | None = None) -> ComparisonReport:
    store = open_store(workspace, read_only=True)
    try:
        return gather_comparison(store, run_ids)
    finally:
        store.close()


def render_pages(
    run_ids: list[str], workspace: Path | None = None, assets: report_render.Assets | None = None
) -> tuple[str, list[str]]:
    """(HTML, the full run ids): one run's report, or a comparison of several."""
    report_render.require_libraries()
    if not run_ids:
        raise UserError("name at least one run", hint="list runs with: ksearch runs")
    assets = assets or report_render.Assets.inline()
    if len(run_ids) == 1:
        report = run_report(run_ids[0], workspace)
        return report_render.render_run(report, assets), [report.run_id]
    comparison = comparison_report(run_ids, workspace)
    return report_render.render_comparison(comparison, assets), [r.run_id for r in comparison.runs]


def default_output(run_ids: list[str]) -> Path:
    """``report-RUN.html``, or ``compare-RUN-and-N-more.html`` for several runs (in the current directory), with the
    id made file-name safe (a stored id may come from someone else's workspace)."""
    if len(run_ids) == 1:
        return Path(f"report-{file_stem(run_ids[0])}.html")
    return Path(f"compare-{file_stem(run_ids[0])}-and-{len(run_ids) - 1}-more.html")


def write_report(
    run_ids: list[str], output: Path | None = None, workspace: Path | None = None, *, force: bool = False
) -> Path:
    """Write the report (or comparison) of ``run_ids`` to ``output`` (default: ``default_output``); returns the path.
    An existing file is overwritten only with ``force``."""
    html, full_ids = render_pages(run_ids, workspace)
    path = Path(output) if output is not None else default_output(full_ids)
    if path.is_dir():
        path = path / default_output(full_ids)
    if path.exists() and not force:
        raise UserError(f"{path} exists", hint="pass --force to overwrite it, or -o another file")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path
