"""`--model interactive` end to end on the CPU: a person answers every call with `respond`, from several processes,
and the run takes exactly the path of the scripted demo; parallel prompts; a kill while a prompt waits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ksearch.agent.config import RunConfig
from ksearch.flows import interactive
from ksearch.flows import run as runner
from tests.helpers.scripts import DEMO, demo_replies, fenced, init_plan, row_kernel

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def cli(ws: Path, *args: str, fake: bool = False) -> list[str]:
    """``ksearch`` in a child process (run it with ``cwd=REPO``); ``fake``: its runs evaluate with the fake executor
    (``tests/helpers/fake_cli.py``)."""
    return [sys.executable, "-m", "tests.helpers.fake_cli" if fake else "ksearch.cli", "--workspace", str(ws), *args]


def config(run_id: str, model: str, **overrides) -> RunConfig:
    settings = {"max_rounds": 6, "stagnation_window": 2, **overrides}
    return RunConfig(run_id=run_id, task="softmax", model=model, device="cpu", **settings)


def rounds(ws: Path, run_id: str) -> list[tuple]:
    store = runner.open_store(ws)
    try:
        return [(a["cycle_id"], a["attempt"], a["verdict"], a["candidate_id"]) for a in store.list_attempts(run_id)]
    finally:
        store.close()


def open_prompts(ws: Path, run_id: str) -> list[str]:
    return [w.prompt.key for w in interactive.pending(run_id, workspace=ws).prompts if not w.answered]


@pytest.mark.usefixtures("fake_executor")  # this process and its `ksearch` children evaluate with the fake
def test_demo_answered_one_call_at_a_time_takes_the_scripted_path(tmp_path):
    ws = tmp_path / "ws"
    replies = demo_replies()
    scripted = runner.start_run(config("scripted", f"replay:{DEMO}"), workspace=ws)  # its kernels are cached now

    started = subprocess.run(
        cli(
            ws,
            "run",
            "softmax",
            "--model",
            "interactive",
            "--device",
            "cpu",
            "--max-rounds",
            "6",
            "--stagnation-window",
            "2",
            "--run-id",
            "live",
            fake=True,
        ),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    assert "waiting" in started.stdout and "ksearch respond live --file reply.md" in started.stdout.replace("\n", " ")
    shown = subprocess.run(cli(ws, "pending", "live", "--json"), capture_output=True, text=True, timeout=120)
    [prompt] = json.loads(shown.stdout)["prompts"]
    assert prompt["prompt"]["key"] == "plan:0:0" and prompt["prompt"]["role"] == "planner"
    assert "WORLD MODEL (planner)" in prompt["prompt"]["prompt"]
    assert prompt["prompt"]["reply_format"]["kind"] == "json" and prompt["prompt"]["reply_format"]["json_schema"]

    # A reply that is no edit script is repaired exactly like a model's: the run asks again, with the problems.
    bad = interactive.respond("live", "Let me think about tiling first.", workspace=ws)
    assert bad.outcome is not None and bad.outcome.status == "waiting"
    assert open_prompts(ws, "live") == ["plan:0:0#repair1"]
    repair = interactive.pending("live", workspace=ws).prompts[0].prompt
    assert "Let me think about tiling first." in repair.prompt and "no JSON object" in repair.prompt

    answered = 0
    while interactive.pending("live", workspace=ws).status != "finished":
        [key] = open_prompts(ws, "live")
        reply = replies[key.removesuffix("#repair1")]
        if answered < 3:  # the first replies from separate processes, through the CLI (the file or stdin)
            reply_file = tmp_path / "reply.md"
            reply_file.write_text(reply)
            args = ["respond", "live", "--file", str(reply_file)] if answered % 2 == 0 else ["respond", "live"]
            proc = subprocess.run(
                cli(ws, *args, fake=True),
                input=None if answered % 2 == 0 else reply,
                capture_output=True,
                text=True,
                timeout=300,
                cwd=REPO,
            )
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert f"recorded the reply to {key}" in proc.stdout
        else:
            interactive.respond("live", reply, workspace=ws)
        answered += 1
    assert answered == 8

    assert [r[:3] for r in rounds(ws, "live")] == [r[:3] for r in rounds(ws, "scripted")]
    assert rounds(ws, "live") == rounds(ws, "scripted")  # the same kernels, round by round
    store = runner.open_store(ws)
    try:
        live, reference = store.get_run("live"), store.get_run("scripted")
        assert live["status"] == "finished" and live["done_reason"] == scripted.done_reason
        assert live["best_candidate_id"] == reference["best_candidate_id"]
        calls = store.list_llm_calls("live")
        assert [c["call_key"] for c in calls][:2] == ["plan:0:0", "plan:0:0#repair1"]
        assert all(c["model"] == "interactive" and c["input_tokens"] == 0 for c in calls)
        assert calls[0]["error"] and calls[1]["error"] is None  # the bad reply's problems are on its record
    finally:
        store.close()

    # An interactive run replays like any other: its recorded replies drive the same path.
    replayed = runner.start_run(runner.replay_config("live", workspace=ws), workspace=ws)
    assert replayed.status == "finished"
    assert rounds(ws, replayed.run_id) == rounds(ws, "live")


def _events(log: Path, name: str) -> list[dict]:
    if not log.exists():
        return []
    return [e for e in map(json.loads, log.read_text().splitlines()) if e.get("event") == name]


def test_parallel_prompts_answered_one_by_one_with_a_kill_in_between(tmp_path):
    ws = tmp_path / "ws"
    log = ws / "logs" / "ksearch.log"
    first = runner.start_run(config("par", "interactive", max_rounds=2, parallel_cycles=2), workspace=ws)
    assert [w.prompt.key for w in first.pending] == ["plan:0:0"]
    both = interactive.respond("par", init_plan([("a", 0.9), ("b", 0.8)]), workspace=ws).outcome
    assert both is not None and [w.prompt.key for w in both.pending] == ["write:c1:1", "write:c2:1"]
    with pytest.raises(Exception, match="waits for 2 replies"):
        interactive.respond("par", fenced(row_kernel(1)), workspace=ws)

    # Answer c1 in another process with a slow kernel; kill that process while it evaluates, c2 still waiting.
    slow = tmp_path / "slow.py"
    slow.write_text(fenced(row_kernel(1, sleep=4.0)))
    proc = subprocess.Popen(
        cli(ws, "respond", "par", "--key", "write:c1:1", "--file", str(slow)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    deadline = time.monotonic() + 240
    while not _events(log, "profile.evaluate"):
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert open_prompts(ws, "par") == ["write:c2:1"]  # read from the checkpoint while the other process runs
    busy = interactive.respond("par", fenced(row_kernel(2)), key="write:c2:1", workspace=ws)
    assert busy.busy and "being driven by process" in busy.busy and busy.outcome is None  # recorded, not driven
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    # After the kill: the pause and the recorded answer are both in the workspace; `resume` (or any respond) drives
    # the run on, re-running only c1's interrupted evaluation.
    shown = subprocess.run(cli(ws, "pending", "par", "--json"), capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    # the checkpoint still holds both pauses of the step the kill cut short, each with its recorded answer
    prompts = json.loads(shown.stdout)["prompts"]
    assert [(p["prompt"]["key"], p["answered"]) for p in prompts] == [("write:c1:1", True), ("write:c2:1", True)]
    resumed = subprocess.run(cli(ws, "resume", "par"), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    store = runner.open_store(ws)
    try:
        run = store.get_run("par")
        assert run["status"] == "finished" and run["rounds_used"] == 2 and run["driver"] is None
        assert sorted(r[:3] for r in rounds(ws, "par")) == [("c1", 1, "passed"), ("c2", 1, "passed")]
        keys = [c["call_key"] for c in store.list_llm_calls("par")]
        assert sorted(keys) == ["plan:0:0", "write:c1:1", "write:c2:1"]
        assert (
            len({e["candidate_id"] for e in store.db["evaluations"].rows})
            == len(list(store.db["evaluations"].rows))
            == 2
        )
    finally:
        store.close()
