"""``ksearch serve`` answers only requests addressed to it, and bounds the work of each (issue 37)."""

from __future__ import annotations

import http.client
import time

import pytest

from ksearch.flows import serve
from tests.helpers.report_store import write_timed_run

pytest.importorskip("plotly", reason="the report extra is not installed: pip install 'ksearch[report]'")


@pytest.fixture
def server(tmp_path):
    run = write_timed_run(tmp_path / "ws")
    srv = serve.make_server(run.workspace, port=0)
    serve.serve_in_thread(srv)
    yield srv, run
    srv.shutdown()
    srv.server_close()


def get(srv: serve.ReportServer, path: str, host: str | None) -> tuple[int, str]:
    conn = http.client.HTTPConnection(*srv.server_address[:2], timeout=30)
    try:
        conn.putrequest("GET", path, skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_a_rebinding_host_is_refused_and_loopback_names_are_served(server):
    srv, run = server
    port = srv.server_address[1]
    for host in ("attacker.example", f"attacker.example:{port}", "127.0.0.1.nip.io", None):
        status, body = get(srv, "/", host)
        assert status == 400 and run.run_id not in body, host
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
        assert get(srv, "/", host)[0] == 200, host


def test_a_request_naming_thousands_of_runs_is_refused_at_once(server):
    srv, run = server
    path = "/compare?" + "&".join(f"run={run.run_id[:8]}" for _ in range(3000))  # 3000 repeats of a prefix
    started = time.monotonic()
    status, body = get(srv, path, "localhost")
    assert status == 400 and "at most" in body
    assert time.monotonic() - started < 2.0
    assert serve.run_ids_of({"run": [run.run_id] * 50}) == [run.run_id]  # repeats count once


def test_host_rule() -> None:
    assert serve.host_allowed("localhost:8765", "127.0.0.1")
    assert serve.host_allowed("myhost:8765", "myhost") and serve.host_allowed("10.0.0.5:8765", "0.0.0.0")
    assert not serve.host_allowed("evil.com", "127.0.0.1") and not serve.host_allowed("", "127.0.0.1")
