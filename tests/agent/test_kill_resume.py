"""A run SIGKILLed in the middle of an evaluation resumes with `ksearch resume` and loses or repeats nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ksearch.flows import run as runner
from tests.helpers.processes import started_by
from tests.helpers.scripts import two_cycle_script

pytestmark = pytest.mark.slow


def _events(log: Path, name: str) -> list[dict]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("event") == name:
            out.append(event)
    return out


def _workers_of(parent_pid: int) -> list[int]:
    return started_by(parent_pid)


def _assert_no_orphan_workers(parent_pid: int) -> None:
    deadline = time.monotonic() + 10
    while _workers_of(parent_pid):
        assert time.monotonic() < deadline, "the evaluation worker outlived the killed agent"
        time.sleep(0.1)


def _cli(ws: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "ksearch.cli", "--workspace", str(ws), *args]


def test_sigkill_during_evaluation_then_resume(tmp_path):
    # the third kernel alone sleeps: the run is killed during its evaluation (the others' sleep was 12.5 s of waiting)
    script = two_cycle_script(tmp_path / "script.jsonl", sleep=2.5, sleep_in="write:c1:3")
    ws = tmp_path / "ws"
    log = ws / "logs" / "ksearch.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        _cli(
            ws,
            "run",
            "softmax",
            "--model",
            f"replay:{script}",
            "--device",
            "cpu",
            "--max-rounds",
            "6",
            "--stagnation-window",
            "2",
            "--run-id",
            "killed",
        ),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    # Wait until the third evaluation has started (two are finished and stored), then kill mid-evaluation.
    deadline = time.monotonic() + 240
    while len(_events(log, "profile.evaluate")) < 3:
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline, "the run never reached its third evaluation"
        time.sleep(0.1)
    time.sleep(1.0)  # inside the candidate's 2.5 s sleep: the worker is running
    assert _workers_of(proc.pid), "an evaluation worker is running at the moment of the kill"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    _assert_no_orphan_workers(proc.pid)

    store = runner.open_store(ws)
    try:
        before = {r["candidate_id"]: (r["id"], r["created_at"]) for r in store.db["evaluations"].rows}
        assert len(before) == 2, "exactly the two finished evaluations were stored before the kill"
        assert store.get_run("killed")["status"] == "running"  # as a crash leaves it
    finally:
        store.close()
    killed_at_line = len(log.read_text().splitlines())

    resumed = subprocess.run(_cli(ws, "resume", "killed"), env=env, capture_output=True, text=True, timeout=400)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "best kernel" in resumed.stdout

    store = runner.open_store(ws)
    try:
        run = store.get_run("killed")
        assert run["status"] == "finished" and run["rounds_used"] == 6
        attempts = store.list_attempts("killed")
        assert [(a["cycle_id"], a["attempt"]) for a in attempts] == [
            ("c1", 1),
            ("c1", 2),
            ("c1", 3),
            ("c1", 4),
            ("c2", 1),
            ("c2", 2),
        ]
        evaluations = list(store.db["evaluations"].rows)
        # every candidate is evaluated exactly once, and the pre-kill evaluations are the same rows, untouched
        assert len({e["candidate_id"] for e in evaluations}) == len(evaluations) == 6
        for candidate_id, (eid, created) in before.items():
            row = next(e for e in evaluations if e["candidate_id"] == candidate_id)
            assert (row["id"], row["created_at"]) == (eid, created)
        # and nothing evaluated before the kill was evaluated again after it
        after_lines = log.read_text().splitlines()[killed_at_line:]
        re_evaluated = [
            json.loads(line)["candidate_id"]
            for line in after_lines
            if '"profile.evaluate"' in line and json.loads(line)["candidate_id"] in before
        ]
        assert re_evaluated == []
        # no LLM call was paid twice: one row per call key
        keys = [c["call_key"] for c in store.list_llm_calls("killed")]
        assert len(keys) == len(set(keys))
    finally:
        store.close()
