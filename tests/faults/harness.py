"""The test side of the fault suite: agent processes, the workspace's log events, and what the store must show.

``Agent`` starts ``ksearch`` (its real ``main()``) in a process of its own from a fork server that imported ksearch
once (see ``agent_process.py``); the tests kill it, signal it and read its output. The checks read the store and the
log after the fact: every LLM call and evaluation recorded exactly once, nothing paid for again after it was
recorded, no evaluation worker left behind.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.faults.agent_process import Fault, agent_main
from tests.faults.llm_server import LoopbackLLM
from tests.helpers.processes import started_by

_FORK_SERVER = multiprocessing.get_context("forkserver")
_FORK_SERVER.set_forkserver_preload(["tests.faults.agent_process"])


@dataclass
class Agent:
    """One ``ksearch`` process."""

    argv: list[str]
    output: Path
    process: Any = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout: float = 300) -> int:
        """The exit code (negative: killed by that signal); fails the test if it does not end in time."""
        self.process.join(timeout)
        assert self.process.exitcode is not None, f"ksearch {' '.join(self.argv)} still running after {timeout} s"
        return self.process.exitcode

    def send(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def text(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""

    @property
    def running(self) -> bool:
        return self.process.is_alive()


def start_agent(
    argv: list[str], *, cwd: Path, output: Path, fault: Fault | None = None, env: dict[str, str] | None = None
) -> Agent:
    """``ksearch ARGV`` in a new process; stdout and stderr go to ``output``."""
    agent = Agent(list(argv), output)
    agent.process = _FORK_SERVER.Process(
        target=agent_main, args=(list(argv), str(cwd), str(output), {"PYTHONUNBUFFERED": "1", **(env or {})}, fault)
    )
    agent.process.start()
    return agent


def ksearch(
    ws: Path,
    *args: str,
    cwd: Path | None = None,
    fault: Fault | None = None,
    timeout: float = 300,
    name: str = "out",
    env: dict[str, str] | None = None,
) -> tuple[int, str]:
    """Run ``ksearch --workspace WS ARGS`` to its end: (exit code, stdout and stderr)."""
    output = (cwd or ws.parent) / f"{name}-{time.monotonic_ns()}.txt"
    agent = start_agent(["--workspace", str(ws), *args], cwd=cwd or ws.parent, output=output, fault=fault, env=env)
    code = agent.wait(timeout)
    return code, agent.text()


# ---- the workspace's log ---------------------------------------------------------------------------------------------
def log_events(ws: Path, name: str | None = None) -> list[dict[str, Any]]:
    """The structlog events of WORKSPACE/logs/ksearch.log (every process appends to it), optionally one kind."""
    path = ws / "logs" / "ksearch.log"
    events = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if name is None or event.get("event") == name:
                events.append(event)
    return events


def event_time(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


# ---- the store -------------------------------------------------------------------------------------------------------
def rows(ws: Path, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
    """Read the workspace database directly (not through ksearch), read-only."""
    conn = sqlite3.connect(f"file:{ws / 'ksearch.db'}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def run_row(ws: Path, run_id: str) -> dict[str, Any]:
    found = rows(ws, "select * from runs where id = ?", (run_id,))
    assert found, f"no run {run_id} in {ws}"
    return found[0]


@dataclass
class Accounting:
    """What a run paid for, seen from the store, the log and the LLM server."""

    llm_rows: int
    requests_per_prompt: Counter = field(default_factory=Counter)
    evaluations: int = 0
    evaluations_started: Counter = field(default_factory=Counter)
    """Evaluation workers started per candidate (``profile.evaluate`` events)."""


def check_nothing_paid_twice(ws: Path, run_id: str, server: LoopbackLLM | None = None) -> Accounting:
    """The store's invariants after any fault, finished run or not:

    - one llm_calls row per (run, call key), and one evaluation per (candidate, evaluation key);
    - no request reached the LLM server after the reply to the same prompt had been recorded (a resumed run never
      pays again for a recorded call), and no evaluation worker started after that candidate's evaluation had been
      recorded (a resumed run never re-evaluates);
    - every attempt's evaluation is in the store.
    """
    calls = rows(ws, "select call_key, prompt, created_at from llm_calls where run_id = ?", (run_id,))
    keys = [c["call_key"] for c in calls]
    assert len(keys) == len(set(keys)), f"an LLM call recorded twice: {sorted(k for k in keys if keys.count(k) > 1)}"
    accounting = Accounting(llm_rows=len(calls))
    if server is not None:
        recorded_at = {c["prompt"]: c["created_at"] for c in calls}
        for request in server.requests:
            accounting.requests_per_prompt[request.prompt] += 1
            when = recorded_at.get(request.prompt)
            assert when is None or request.arrived < when, (
                f"request {request.index} ({request.key}) was sent after its reply had been recorded: paid twice"
            )

    evaluations = rows(ws, "select id, candidate_id, eval_key, created_at from evaluations")
    pairs = [(e["candidate_id"], e["eval_key"]) for e in evaluations]
    assert len(pairs) == len(set(pairs)), "an evaluation recorded twice"
    accounting.evaluations = len(evaluations)
    stored_at = {e["candidate_id"]: e["created_at"] for e in evaluations}
    for event in log_events(ws, "profile.evaluate"):
        if event.get("run_id") != run_id:
            continue
        candidate = event["candidate_id"]
        accounting.evaluations_started[candidate] += 1
        stored = stored_at.get(candidate)
        assert stored is None or event_time(event) < stored, (
            f"candidate {candidate} evaluated again after it was stored"
        )
    eval_ids = {e["id"] for e in evaluations}
    for attempt in rows(
        ws, "select evaluation_id from attempts where run_id = ? and evaluation_id is not null", (run_id,)
    ):
        assert attempt["evaluation_id"] in eval_ids, "an attempt refers to an evaluation the store does not have"
    return accounting


def workers_of(pid: int) -> list[int]:
    """Live evaluation workers started by agent ``pid`` (they carry its pid in their environment)."""
    return started_by(pid)


def assert_no_orphans(pid: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while workers_of(pid):
        assert time.monotonic() < deadline, f"evaluation workers of the dead agent {pid} are still running"
        time.sleep(0.1)


def assert_one_line_error(output: str, *needles: str) -> None:
    """What a user sees for an expected failure: no traceback, the needles in the message."""
    assert "Traceback" not in output, output[-3000:]
    flat = " ".join(output.split())  # errors print unwrapped (soft_wrap); other lines may wrap
    for needle in needles:
        assert needle in flat, f"{needle!r} not in the output:\n{output[-3000:]}"


SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


def run_args(run_id: str, server: LoopbackLLM, *extra: str, rounds: int = 1) -> list[str]:
    """``ksearch run`` of the softmax task on the CPU against the loopback server, ``rounds`` rounds."""
    return [
        "run",
        "softmax",
        "--model",
        "openai:fault-test",
        "--base-url",
        server.base_url,
        "--device",
        "cpu",
        "--max-rounds",
        str(rounds),
        "--run-id",
        run_id,
        *extra,
    ]


def llm_rows(ws: Path, run_id: str) -> dict[str, dict[str, Any]]:
    """The run's recorded LLM calls by call key (each key at most once: ``check_nothing_paid_twice`` checks it)."""
    return {c["call_key"]: c for c in rows(ws, "select * from llm_calls where run_id = ?", (run_id,))}


def is_driven(ws: Path, run_id: str) -> bool:
    """Whether a live process is recorded as the run's driver (``runs.driver``, a dead one counts as none)."""
    from ksearch.flows.driving import driver_alive

    driver = run_row(ws, run_id).get("driver")
    return bool(driver) and driver_alive(driver)
