"""HTML for the report models of ``flows.report``: plotly figures and jinja2 templates (``ksearch/report/templates``).

A written report inlines plotly.js, so the file opens offline and can be attached to a pull request; ``serve`` links
one copy of it instead. Every text that came from a model or a kernel is escaped (jinja2's autoescape; plotly's JSON
escapes ``<``, ``>`` and ``/``; hover texts are escaped here before plotly reads them as its own small markup).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from ksearch.errors import MissingExtraError
from ksearch.flows.report_model import CandidatePoint, ComparisonReport, RunReport

INSTALL_HINT = "install the report extra: pip install 'ksearch[report]' (jinja2 and plotly)"

VERDICT_COLOURS = {
    "passed": "#2ca02c",
    "incorrect": "#ff7f0e",
    "compile_error": "#d62728",
    "runtime_error": "#9467bd",
    "timeout": "#8c564b",
    "rejected": "#e377c2",
    "crashed": "#7f7f7f",
    "no_code": "#bcbd22",
}
VERDICT_ORDER = list(VERDICT_COLOURS)
RUN_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["sendDataToCloud"]}


def require_libraries() -> None:
    """Raise a one-line error naming the extra to install when jinja2 or plotly is missing."""
    missing = []
    for name in ("jinja2", "plotly"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise MissingExtraError(f"reports need {' and '.join(missing)}, which is not installed", hint=INSTALL_HINT)


@dataclass(frozen=True)
class Assets:
    """Where the page gets plotly.js: inlined (a written file) or from a URL (``serve``); and, for live pages, where
    it polls for changes."""

    plotly_inline: str | None = None
    plotly_url: str | None = None
    version_url: str | None = None
    version: str | None = None

    @classmethod
    def inline(cls) -> Assets:
        return cls(plotly_inline=plotly_js())


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """The minified plotly.js bundled with the plotly package (no network)."""
    require_libraries()
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


# ---- figures ----------------------------------------------------------------------------------------------------


def _x(point: Any, axis: str) -> float:
    return point.round_index if axis == "round" else round(point.elapsed_s / 60.0, 4)


def _axis_title(axis: str) -> str:
    return "round" if axis == "round" else "wall time since the run started (min)"


def _hover(p: CandidatePoint) -> str:
    what = "seed" if p.is_seed else f"round {p.round_index} · cycle {p.cycle_id}.{p.attempt} · {p.prompt_kind}"
    lines = [what, f"node {p.node_id}", p.summary[:200]]
    if p.latency_ms is not None:
        lines.append(f"latency {p.latency_ms:.4g} ms, score {p.score:.4g}")
    if p.candidate_id:
        lines.append(f"candidate …{p.candidate_id[-12:]}" + (" (the run's best)" if p.is_run_best else ""))
    return "<br>".join(html.escape(line) for line in lines)


def candidates_figure(report: RunReport, axis: str) -> Any:
    """Every round as a point coloured by verdict; for a timed run, above it the latency of each passed candidate
    and the best measured so far."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    timed = report.timed
    fig = make_subplots(
        rows=2 if timed else 1,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        row_heights=[0.7, 0.3] if timed else None,
    )
    strip_row = 2 if timed else 1
    if timed:
        measured = [p for p in report.points if p.latency_ms is not None]
        fig.add_trace(
            go.Scatter(
                x=[_x(p, axis) for p in measured],
                y=[p.latency_ms for p in measured],
                mode="markers",
                name="passed candidate (latency)",
                marker={"color": VERDICT_COLOURS["passed"], "size": 9},
                text=[_hover(p) for p in measured],
                hovertemplate="%{text}<extra></extra>",
                meta={"kind": "latency"},
            ),
            row=1,
            col=1,
        )
        curve = report.best_curve
        fig.add_trace(
            go.Scatter(
                x=[_x(b, axis) for b in curve],
                y=[b.latency_ms for b in curve],
                mode="lines",
                line_shape="hv",
                name="best measured so far",
                line={"color": "#1f77b4", "width": 2},
                meta={"kind": "best"},
                text=[
                    html.escape(f"best so far: {b.latency_ms:.4g} ms (score {b.score:.4g}), node {b.node_id}")
                    for b in curve
                ],
                hovertemplate="%{text}<extra></extra>",
            ),
            row=1,
            col=1,
        )
        best = [p for p in measured if p.is_run_best][:1]
        if best:
            fig.add_trace(
                go.Scatter(
                    x=[_x(best[0], axis)],
                    y=[best[0].latency_ms],
                    mode="markers",
                    name="the run's best",
                    marker={"symbol": "star", "size": 16, "color": "gold", "line": {"color": "black", "width": 1}},
                    text=[_hover(best[0])],
                    hovertemplate="%{text}<extra></extra>",
                    meta={"kind": "run-best"},
                ),
                row=1,
                col=1,
            )
        fig.update_yaxes(title_text="latency (ms)", type="log", row=1, col=1)
    verdicts = sorted(
        {p.verdict for p in report.points}, key=lambda v: (VERDICT_ORDER.index(v) if v in VERDICT_ORDER else 99, v)
    )
    for verdict in verdicts:
        pts = [p for p in report.points if p.verdict == verdict]
        fig.add_trace(
            go.Scatter(
                x=[_x(p, axis) for p in pts],
                y=[verdict] * len(pts),
                mode="markers",
                name=verdict,
                marker={
                    "color": VERDICT_COLOURS.get(verdict, "#333333"),
                    "size": 11,
                    "symbol": ["diamond" if p.is_seed else "circle" for p in pts],
                },
                text=[_hover(p) for p in pts],
                hovertemplate="%{text}<extra></extra>",
                meta={"kind": "verdict"},
            ),
            row=strip_row,
            col=1,
        )
    fig.update_yaxes(
        title_text="verdict",
        type="category",
        categoryorder="array",
        categoryarray=list(reversed(verdicts)),
        row=strip_row,
        col=1,
    )
    fig.update_xaxes(title_text=_axis_title(axis), row=strip_row, col=1)
    if axis == "round" and report.points and max(p.round_index for p in report.points) <= 20:
        fig.update_xaxes(dtick=1)
    title = "latency and verdict of every candidate" if timed else "verdict of every candidate (not timed)"
    fig.update_layout(
        title={"text": title + (" · by round" if axis == "round" else " · by wall time")},
        height=520 if timed else 300,
        margin={"l": 70, "r": 20, "t": 50, "b": 50},
        legend={"orientation": "h", "y": -0.25 if timed else -0.5},
        template="plotly_white",
    )
    return fig


def compare_best_figure(comparison: ComparisonReport) -> Any | None:
    """The best measured latency so far of every timed run, by round and by wall time; None when none is timed."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    timed = [r for r in comparison.runs if r.best_curve]
    if not timed:
        return None
    fig = make_subplots(
        rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04, subplot_titles=("by round", "by wall time")
    )
    for i, report in enumerate(comparison.runs):
        if not report.best_curve:
            continue
        colour = RUN_COLOURS[i % len(RUN_COLOURS)]
        for col, axis in ((1, "round"), (2, "time")):
            fig.add_trace(
                go.Scatter(
                    x=[_x(b, axis) for b in report.best_curve],
                    y=[b.latency_ms for b in report.best_curve],
                    mode="lines+markers",
                    line_shape="hv",
                    name=report.run_id,
                    legendgroup=report.run_id,
                    showlegend=col == 1,
                    line={"color": colour},
                    meta={"kind": "best", "run": report.run_id},
                    text=[
                        html.escape(f"{report.run_id}: best {b.latency_ms:.4g} ms after round {b.round_index}")
                        for b in report.best_curve
                    ],
                    hovertemplate="%{text}<extra></extra>",
                ),
                row=1,
                col=col,
            )
    fig.update_yaxes(type="log")  # both panels: axes that match must share their type
    fig.update_yaxes(title_text="best latency so far (ms)", row=1, col=1)
    fig.update_xaxes(title_text=_axis_title("round"), row=1, col=1)
    fig.update_xaxes(title_text=_axis_title("time"), row=1, col=2)
    fig.update_layout(
        title={"text": "best measured latency so far"},
        height=420,
        template="plotly_white",
        margin={"l": 70, "r": 20, "t": 70, "b": 50},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def compare_passes_figure(comparison: ComparisonReport) -> Any:
    """How many rounds of each run had passed so far: one point per round, timed or not."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04, subplot_titles=("by round", "by wall time")
    )
    for i, report in enumerate(comparison.runs):
        rounds = [p for p in report.points if not p.is_seed]
        counts, n = [], 0
        for p in rounds:
            n += p.verdict == "passed"
            counts.append(n)
        colour = RUN_COLOURS[i % len(RUN_COLOURS)]
        for col, axis in ((1, "round"), (2, "time")):
            fig.add_trace(
                go.Scatter(
                    x=[_x(p, axis) for p in rounds],
                    y=counts,
                    mode="lines+markers",
                    line_shape="hv",
                    name=report.run_id,
                    legendgroup=report.run_id,
                    showlegend=col == 1,
                    line={"color": colour},
                    marker={"color": [VERDICT_COLOURS.get(p.verdict, "#333333") for p in rounds], "size": 8},
                    meta={"kind": "passes", "run": report.run_id},
                    text=[_hover(p) for p in rounds],
                    hovertemplate="%{text}<extra></extra>",
                ),
                row=1,
                col=col,
            )
    fig.update_yaxes(title_text="passed rounds so far", row=1, col=1)
    fig.update_xaxes(title_text=_axis_title("round"), row=1, col=1)
    fig.update_xaxes(title_text=_axis_title("time"), row=1, col=2)
    fig.update_layout(
        title={"text": "passing candidates found so far (marker colour: the round's verdict)"},
        height=420,
        template="plotly_white",
        margin={"l": 70, "r": 20, "t": 70, "b": 50},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def figure_html(fig: Any, div_id: str) -> str:
    """A figure as a div and the script that draws it; plotly.js itself is loaded once by the page."""
    import plotly.io as pio

    return pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOTLY_CONFIG)


# ---- pages ------------------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _environment() -> Any:
    require_libraries()
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("ksearch", "report/templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"], default_for_string=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ms"] = lambda v: "–" if v is None else f"{v:.4g} ms"
    env.filters["num"] = lambda v, fmt=".4g": "–" if v is None else format(v, fmt)
    env.filters["when"] = lambda t: datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    env.filters["short"] = lambda cid: "–" if not cid else "…" + cid[-12:]
    env.filters["duration"] = _duration
    env.globals["verdict_colours"] = VERDICT_COLOURS
    return env


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, s = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {s:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _json_for_script(data: Any) -> str:
    """JSON that cannot close the <script> element it sits in."""
    return json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _markup(text: str) -> Any:
    import markupsafe

    return markupsafe.Markup(text)


def render_run(report: RunReport, assets: Assets, *, links: dict[str, str] | None = None) -> str:
    """One run's page: charts, the best kernel per shape, the world-model tree with diffs, LLM usage, settings."""
    charts = {
        "rounds": _markup(figure_html(candidates_figure(report, "round"), "chart-rounds")),
        "time": _markup(figure_html(candidates_figure(report, "time"), "chart-time")),
    }
    page_data = {
        "kind": "run",
        "run": report.run_id,
        "rounds": len(report.points),
        "nodes": [n.id for n in report.nodes],
    }
    return (
        _environment()
        .get_template("run.html.j2")
        .render(
            r=report,
            charts=charts,
            assets=assets,
            links=links or {},
            page_data=_json_for_script(page_data),
            nodes_by_id={n.id: n for n in report.nodes},
            title=f"ksearch report: {report.run_id}",
        )
    )


def render_comparison(comparison: ComparisonReport, assets: Assets, *, links: dict[str, str] | None = None) -> str:
    """Several runs: best-so-far curves overlaid, a table of bests, the settings that differ."""
    best = compare_best_figure(comparison)
    charts = {
        "best": _markup(figure_html(best, "chart-compare-best")) if best is not None else None,
        "passes": _markup(figure_html(compare_passes_figure(comparison), "chart-compare-passes")),
    }
    page_data = {
        "kind": "comparison",
        "runs": [r.run_id for r in comparison.runs],
        "rounds": {r.run_id: len([p for p in r.points if not p.is_seed]) for r in comparison.runs},
    }
    return (
        _environment()
        .get_template("compare.html.j2")
        .render(
            c=comparison,
            charts=charts,
            assets=assets,
            links=links or {},
            page_data=_json_for_script(page_data),
            title=f"ksearch comparison of {len(comparison.runs)} runs",
        )
    )


def render_index(runs: list[dict[str, Any]], assets: Assets, workspace: str) -> str:
    """``serve``'s front page: the workspace's runs, newest first, with links and a comparison form."""
    return (
        _environment()
        .get_template("index.html.j2")
        .render(
            runs=runs,
            assets=assets,
            links={},
            workspace=workspace,
            page_data=_json_for_script({"kind": "index"}),
            title="ksearch runs",
        )
    )


def render_error(message: str, status: int) -> str:
    return (
        _environment()
        .get_template("error.html.j2")
        .render(message=message, status=status, assets=Assets(), links={}, page_data="{}", title=f"ksearch: {status}")
    )
