"""Reports opened in a real browser (Debian's headless Chromium driven by Playwright): the charts have their points,
the tree has every node, a diff opens, nothing is logged to the console, and the live view reloads by itself.

The runs are real: the README's demo (softmax, scripted replies, Triton interpreter) and a scripted TriMul search from
examples/trimul_triton.py; the timed run is synthetic (tests/helpers/report_store.py), since the CPU times nothing.
Set KSEARCH_UPDATE_DOCS_SCREENSHOT=1 to also write the demo's screenshot to docs/report.png.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from ksearch.agent.config import RunConfig
from ksearch.agent.world_model import WorldModel
from ksearch.contracts.evaluation import Verdict
from ksearch.flows import report as report_flow
from ksearch.flows import run as runner
from ksearch.flows import serve
from ksearch.store import Store
from tests.fakes import FakeExecutor, FakeOutcome
from tests.helpers.report_store import T0, write_timed_run
from tests.helpers.scripts import trimul_seeded_script, trimul_variants

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("KSEARCH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium")
"""Debian's package (``apt-get install chromium``); KSEARCH_CHROMIUM names another build."""
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _why_no_browser() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install -e '.[test]')"
    if not CHROMIUM.is_file():
        return f"no Chromium at {CHROMIUM} (Debian: apt-get install -y chromium; or set KSEARCH_CHROMIUM)"
    if importlib.util.find_spec("plotly") is None or importlib.util.find_spec("jinja2") is None:
        return "the report extra is not installed (pip install -e '.[report]')"
    return None


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_why_no_browser() is not None, reason=_why_no_browser() or ""),
]

PAGE_FACTS = """() => {
  const charts = {};
  document.querySelectorAll('.js-plotly-plot').forEach(g => {
    const points = {};
    let markers = 0;
    g.data.forEach(t => {
      const kind = (t.meta && t.meta.kind) || 'none';
      points[kind] = (points[kind] || 0) + t.x.length;
      if ((t.mode || '').includes('markers')) { markers += t.x.length; }
    });
    charts[g.id] = {points, markers, drawn: g.querySelectorAll('.scatterlayer .trace .points path').length};
  });
  return {
    charts,
    nodes: Array.from(document.querySelectorAll('#tree li[data-node-id]')).map(li => li.dataset.nodeId),
    page: JSON.parse(document.getElementById('ksearch-page').textContent),
    xss: window.__xss === undefined ? null : window.__xss,
  };
}"""


# ---- the browser ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1300, "height": 1500},
        )
        yield context
        context.close()


class Opened:
    """A page and everything it logged."""

    def __init__(self, context: Any, url: str, *, charts: bool = True) -> None:
        self.page = context.new_page()
        self.problems: list[str] = []
        self.page.on(
            "console",
            lambda m: self.problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None,
        )
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.problems.append(f"request failed: {r.url}"))
        self.page.goto(url)
        if charts:
            self.wait_for_charts()

    def wait_for_charts(self) -> None:
        self.page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 2")

    def facts(self) -> dict[str, Any]:
        return self.page.evaluate(PAGE_FACTS)

    def close(self) -> None:
        self.page.close()


def open_page(context: Any, url: str, *, charts: bool = True) -> Opened:
    return Opened(context, url, charts=charts)


def check_run_page(opened: Opened, *, rounds: int, node_ids: set[str], timed_passes: int = 0, shot: Path) -> dict:
    """The checks every run page must pass, from the page itself; returns the page's facts."""
    facts = opened.facts()
    for chart in ("chart-rounds", "chart-time"):
        c = facts["charts"][chart]
        assert c["points"]["verdict"] == rounds, (chart, c)
        assert c["points"].get("latency", 0) == timed_passes, (chart, c)
        assert c["drawn"] == c["markers"], (chart, c)  # every marker point was drawn as an SVG path
    assert set(facts["nodes"]) == node_ids and len(facts["nodes"]) == len(node_ids)
    assert facts["xss"] is None
    _open_a_diff(opened)
    opened.page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert opened.problems == []
    return facts


def _open_a_diff(opened: Opened) -> None:
    """Open a node card and its code diff by clicking, as a reader would; the diff's lines must then be visible."""
    page = opened.page
    node_id = page.evaluate(
        "() => { const d = Array.from(document.querySelectorAll('details.diff')).find(x => "
        "x.querySelector('.line.add'));"
        " return d ? d.dataset.nodeId : null; }"
    )
    assert node_id, "no diff with added lines on the page"
    card = page.locator(f"#node-{node_id}")
    if not card.evaluate("d => d.open"):
        card.locator("> summary").click()
    diff = page.locator(f"#diff-{node_id}")
    assert not diff.evaluate("d => d.open")
    assert not diff.locator(".line.add").first.is_visible()
    diff.locator("> summary").click()
    assert diff.evaluate("d => d.open")
    assert diff.locator(".line.add").first.is_visible()
    assert diff.locator(".line").count() >= 3


def final_node_ids(workspace: Path, run_id: str) -> set[str]:
    store = Store(workspace / "ksearch.db")
    try:
        return set(WorldModel.model_validate_json(store.list_snapshots(run_id)[-1]["world_model"]).nodes)
    finally:
        store.close()


def rounds_of(workspace: Path, run_id: str) -> int:
    store = Store(workspace / "ksearch.db")
    try:
        return len(store.list_attempts(run_id))
    finally:
        store.close()


# ---- the runs -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs_workspace(tmp_path_factory) -> Path:
    """One workspace for the demo and the TriMul run, so that they can be compared."""
    return tmp_path_factory.mktemp("runs-ws")


@pytest.fixture(scope="module")
def demo_run(runs_workspace) -> tuple[Path, str]:
    """The README's demo: ``ksearch run softmax --model replay:examples/softmax-demo.jsonl --device cpu
    --max-rounds 6 --stagnation-window 2``."""
    ws = runs_workspace
    cfg = RunConfig(
        run_id="softmax-demo",
        task="softmax",
        model="replay:examples/softmax-demo.jsonl",
        device="cpu",
        max_rounds=6,
        stagnation_window=2,
    )
    with contextlib.chdir(REPO):  # the model name as the README's command records it
        outcome = runner.start_run(cfg, workspace=ws, executor=FakeExecutor())  # the report is tested, not verdicts
    assert outcome.status == "finished" and outcome.rounds_used == 6
    return ws, "softmax-demo"


@pytest.fixture(scope="module")
def trimul_run(runs_workspace) -> tuple[Path, str]:
    """A scripted TriMul search on the CPU from the seed examples/trimul_triton.py: 4 rounds, 2 of them pass."""
    ws = runs_workspace
    seed = REPO / "examples" / "trimul_triton.py"
    script = trimul_seeded_script(ws / "script.jsonl", seed.read_text())
    cfg = RunConfig(
        run_id="trimul-scripted",
        task="trimul",
        model=f"replay:{script}",
        device="cpu",
        max_rounds=4,
        stagnation_window=2,
        seed_from=str(seed),
    )
    variants = trimul_variants(seed.read_text())
    # The report is tested, not the evaluator: the verdicts the sandboxed evaluator gave these variants on 2026-12-07
    # (the seed's own is held by tests/tasks/test_trimul.py), in the order asserted below.
    fake = FakeExecutor(
        table={
            variants["wrong_bias"]: FakeOutcome(Verdict.INCORRECT, 0),
            variants["fewer_warps"]: Verdict.PASSED,
            variants["smaller_epilogue_block"]: Verdict.PASSED,
            seed.read_text(): Verdict.PASSED,
        }
    )
    outcome = runner.start_run(cfg, workspace=ws, executor=fake)
    assert outcome.status == "finished" and outcome.rounds_used == 4
    store = Store(ws / "ksearch.db")
    try:
        verdicts = [a["verdict"] for a in store.list_attempts("trimul-scripted")]
    finally:
        store.close()
    assert verdicts == ["passed", "passed", "compile_error", "incorrect", "passed"]  # the seed, then 4 rounds
    return ws, "trimul-scripted"


# ---- the tests ------------------------------------------------------------------------------------------------


def test_the_demo_run_report_in_chromium(browser, demo_run, tmp_path):
    ws, run_id = demo_run
    path = report_flow.write_report([run_id], tmp_path / "demo.html", ws)
    opened = open_page(browser, path.as_uri())
    facts = check_run_page(
        opened, rounds=rounds_of(ws, run_id), node_ids=final_node_ids(ws, run_id), shot=tmp_path / "demo.png"
    )
    assert facts["page"] == {"kind": "run", "run": run_id, "rounds": 6, "nodes": facts["nodes"]}
    assert "correctness only, not timed" in opened.page.locator("#timing-note").inner_text()
    if os.environ.get("KSEARCH_UPDATE_DOCS_SCREENSHOT"):
        opened.page.evaluate("window.scrollTo(0, 0)")
        opened.page.mouse.move(0, 0)  # no hover toolbar in the picture: let plotly's mode bar fade out first
        opened.page.wait_for_timeout(1500)
        opened.page.screenshot(
            path=str(REPO / "docs" / "report.png"), clip={"x": 0, "y": 0, "width": 1300, "height": 1500}
        )
    opened.close()


def test_a_scripted_trimul_run_report_in_chromium(browser, trimul_run, tmp_path):
    ws, run_id = trimul_run
    path = report_flow.write_report([run_id], tmp_path / "trimul.html", ws)
    opened = open_page(browser, path.as_uri())
    check_run_page(
        opened, rounds=rounds_of(ws, run_id), node_ids=final_node_ids(ws, run_id), shot=tmp_path / "trimul.png"
    )
    seed_row = opened.page.locator("#best li", has_text="seed:").inner_text()
    assert "evaluated but not timed" in seed_row
    opened.close()


def test_a_timed_run_report_in_chromium(browser, tmp_path):
    run = write_timed_run(tmp_path / "ws")
    path = report_flow.write_report([run.run_id], tmp_path / "timed.html", run.workspace)
    opened = open_page(browser, path.as_uri())
    facts = check_run_page(
        opened,
        rounds=run.rounds,
        node_ids=set(run.world_model.nodes),
        timed_passes=run.timed_passes,
        shot=tmp_path / "timed.png",
    )
    assert facts["charts"]["chart-rounds"]["points"]["best"] == run.rounds
    rows = opened.page.locator("#shape-table tr").all_inner_texts()
    assert len(rows) == 1 + 3 and "bench_b2_n768" in rows[3] and "1.6×" in rows[3]  # seed 8 ms / best 5 ms
    opened.close()


def test_a_comparison_of_the_demo_and_trimul_runs_in_chromium(browser, demo_run, trimul_run, tmp_path):
    ws = demo_run[0]
    assert trimul_run[0] == ws
    path = report_flow.write_report([demo_run[1], trimul_run[1]], tmp_path / "cmp.html", ws)
    opened = open_page(browser, path.as_uri())
    facts = opened.facts()
    passes = facts["charts"]["chart-compare-passes"]
    assert passes["points"]["passes"] == 2 * (6 + 4)  # every round of both runs, by round and by wall time
    assert passes["drawn"] == passes["markers"]
    assert "chart-compare-best" not in facts["charts"]  # neither run is timed
    assert opened.page.locator("#bests-table tr[data-run-id]").count() == 2
    opened.page.screenshot(path=str(tmp_path / "cmp.png"), full_page=True)
    assert opened.problems == []
    opened.close()


def test_the_live_view_reloads_itself_when_the_run_writes(browser, tmp_path):
    run = write_timed_run(tmp_path / "ws")
    srv = serve.make_server(run.workspace, port=0)
    serve.serve_in_thread(srv)
    try:
        index = open_page(browser, srv.url, charts=False)
        index.page.locator(f'a[href="/runs/{run.run_id}"]').click()
        index.wait_for_charts()
        page = index.page
        assert page.evaluate(PAGE_FACTS)["charts"]["chart-rounds"]["points"]["verdict"] == run.rounds
        page.locator("#node-a2 > summary").click()  # a reader opened a node; the reload must keep it open
        store = Store(run.workspace / "ksearch.db")
        try:
            store.record_attempt(
                {
                    "run_id": run.run_id,
                    "cycle_id": "c4",
                    "attempt": 1,
                    "round_index": 6,
                    "node_id": "a2",
                    "prompt_kind": "action_on_base",
                    "candidate_id": None,
                    "evaluation_id": None,
                    "verdict": "no_code",
                    "score": None,
                    "error": "the reply held no code",
                    "created_at": T0 + 60 * 14,
                }
            )
        finally:
            store.close()
        started = time.monotonic()
        page.wait_for_function(
            f"() => {{ const g = document.getElementById('chart-rounds');"
            " return g && g.data && g.data.filter(t => t.meta.kind === 'verdict').reduce((n, t) => n + t.x.length, "
            f"0) === {run.rounds + 1}; }}",
            timeout=30_000,
        )
        assert time.monotonic() - started < 30
        index.wait_for_charts()
        assert page.locator("#node-a2").evaluate("d => d.open")
        assert "the reply held no code" in page.locator("#node-a2").inner_text()
        page.screenshot(path=str(tmp_path / "live.png"))
        assert index.problems == []
        index.close()
    finally:
        srv.shutdown()
        srv.server_close()
