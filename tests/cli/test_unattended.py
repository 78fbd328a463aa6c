"""ksearch without a terminal and against a failing model server (issue 64): each retried LLM call is a line with
its cause and endpoint, on the console and in the workspace log, and the final error names both; a wait that lasts
is said with what is waited for and since when; `-v` lines go to the stderr of the moment (above a spinner, never
into its line)."""

from __future__ import annotations

import io
import json
import logging
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import structlog
from rich.console import Console

from ksearch.cli.progress import Progress
from ksearch.logs import configure_logging

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released): a dead model server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_retries_against_a_dead_base_url_are_said_with_cause_and_endpoint(tmp_path):
    ws = tmp_path / "ws"
    url = f"http://127.0.0.1:{free_port()}/v1"
    done = subprocess.run(
        [sys.executable, "-m", "ksearch.cli", "--workspace", str(ws), "run", "softmax", "--model", "openai:any",
         "--base-url", url, "--device", "cpu", "--llm-max-attempts", "3", "--run-id", "dead"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    retries = [line for line in done.stdout.splitlines() if "LLM call plan:0:0" in line]
    assert len(retries) == 2, done.stdout  # tries 1 and 2 failed and were retried; the 3rd ends the run
    for n, line in enumerate(retries, start=1):
        assert f"to openai:any at {url} failed (try {n} of 3)" in line and "Connection refused" in line, line
    error = done.stderr.replace("\n", " ")
    assert f"openai:any at {url} failed 3 times for plan:0:0" in error and "Connection refused" in error

    events = [json.loads(line) for line in (ws / "logs" / "ksearch.log").read_text().splitlines()]
    logged = [e for e in events if e["event"] == "llm.retry"]
    assert [e["try"] for e in logged] == [1, 2]
    assert all(e["endpoint"] == url and "Connection refused" in e["error"] and e["run_id"] == "dead" for e in logged)


def test_a_long_wait_is_said_with_what_and_since_when_without_a_terminal():
    sink = io.StringIO()
    console = Console(file=sink, force_terminal=False, width=300)
    with Progress(5, console=console, first_notice_s=0.3, repeat_s=0.6) as progress:
        progress("llm_request", {"role": "planner", "call_key": "plan:0:0", "model": "openai:slow",
                                 "endpoint": "http://gpu-box:8000/v1", "try": 1, "max_attempts": 5})  # fmt: skip
        time.sleep(2.2)
        progress("round", {"round_number": 1, "cycle_id": "c1", "attempt": 1, "verdict": "passed", "summary": "ok"})
        time.sleep(1.2)  # the round ended: nothing is waited for any more
    lines = sink.getvalue().splitlines()
    waits = [line for line in lines if "waiting for" in line]
    assert len(waits) >= 2, lines  # said after 0.3 s, then every 0.6 s
    pattern = (
        r"^\d\d:\d\d:\d\d waiting for openai:slow at http://gpu-box:8000/v1: the planner's reply to plan:0:0 "
        r"since (\d\d:\d\d:\d\d) \((\d+)s\)$"
    )
    matches = [re.match(pattern, line) for line in waits]
    assert all(matches), waits
    assert len({m.group(1) for m in matches}) == 1  # one wait, one start time
    assert lines.index(waits[-1]) < next(i for i, line in enumerate(lines) if line.startswith("round"))


def test_verbose_lines_go_to_the_stderr_of_the_moment_as_plain_text_in_a_terminal(tmp_path, monkeypatch):
    configure_logging(tmp_path / "ksearch.log", verbose=True)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    proxy = Terminal()  # what rich puts in sys.stderr while its spinner is drawn
    monkeypatch.setattr(sys, "stderr", proxy)
    structlog.get_logger("test").info("llm.retry", call_key="plan:0:0", endpoint="http://x/v1")
    logging.shutdown()
    line = proxy.getvalue().strip()
    assert re.match(r"^\d\d:\d\d:\d\d info llm\.retry call_key=plan:0:0 endpoint=http://x/v1$", line), line
    assert json.loads((tmp_path / "ksearch.log").read_text())["event"] == "llm.retry"  # the log keeps JSON
