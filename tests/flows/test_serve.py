"""``ksearch serve``: a localhost server that renders the workspace's pages from the store on every request."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from ksearch.errors import UserError
from ksearch.flows import serve
from ksearch.store import Store
from tests.helpers.report_store import T0, write_timed_run

pytest.importorskip("plotly", reason="the report extra is not installed: pip install 'ksearch[report]'")


def fetch(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


@pytest.fixture
def server(tmp_path):
    run = write_timed_run(tmp_path / "ws")
    write_timed_run(tmp_path / "ws", "trimul-other", with_reference=False)
    srv = serve.make_server(run.workspace, port=0)
    serve.serve_in_thread(srv)
    yield srv, run
    srv.shutdown()
    srv.server_close()


def test_serves_the_index_run_pages_comparisons_and_plotly_on_loopback(server):
    srv, run = server
    assert srv.server_address[0] == "127.0.0.1" and srv.url.startswith("http://127.0.0.1:")
    status, ctype, index = fetch(srv.url)
    assert status == 200 and ctype.startswith("text/html")
    assert f'href="/runs/{run.run_id}"' in index and 'href="/runs/trimul-other"' in index

    status, _, page = fetch(srv.url + f"runs/{run.run_id}")
    assert status == 200 and 'id="chart-rounds"' in page and 'data-node-id="a1"' in page
    assert '<script src="/static/plotly.min.js"></script>' in page  # linked once, not inlined per page
    assert f"/api/version?run={run.run_id}" in page

    status, ctype, js = fetch(srv.url + "static/plotly.min.js")
    assert status == 200 and ctype.startswith("text/javascript") and len(js) > 1_000_000

    status, _, page = fetch(srv.url + f"compare?run={run.run_id}&run=trimul-other")
    assert status == 200 and 'id="chart-compare-best"' in page and 'href="/runs/trimul-other"' in page


def test_unknown_runs_and_paths_are_clear_errors(server):
    srv, _ = server
    status, _, page = fetch(srv.url + "runs/no-such-run")
    assert status == 404 and "no run" in page
    assert fetch(srv.url + "nothing/here")[0] == 404
    status, _, page = fetch(srv.url + "compare?run=trimul-timed")
    assert status == 400 and "at least two runs" in page
    status, ctype, body = fetch(srv.url + "api/version?run=nope")
    assert status == 404 and ctype.startswith("application/json") and "error" in json.loads(body)


def test_the_version_changes_when_the_run_writes_and_the_page_shows_the_new_round(server):
    srv, run = server
    url = srv.url + f"api/version?run={run.run_id}"
    before = json.loads(fetch(url)[2])["version"]
    assert json.loads(fetch(url)[2])["version"] == before  # stable while nothing happens
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
    assert json.loads(fetch(url)[2])["version"] != before
    page = fetch(srv.url + f"runs/{run.run_id}")[2]
    assert "the reply held no code" in page
    assert json.loads(fetch(srv.url + "api/version")[2])["version"]  # the index has a version too


def test_a_missing_workspace_or_a_taken_port_is_a_user_error(tmp_path, server):
    with pytest.raises(UserError, match="no workspace database"):
        serve.make_server(tmp_path / "empty", port=0)
    srv, run = server
    with pytest.raises(UserError, match="cannot listen"):
        serve.make_server(run.workspace, port=srv.server_address[1])
