"""Output into a pipe or a file is plain text: no line wrapped or cell cut at 80 columns, and `show --code` prints
the kernel alone, so `ksearch show --code > kernel.py` gives a module that imports (issue 35, item 6)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.flows.workspace import DB_NAME
from ksearch.store import Store

LONG_LINE = "    BLOCK: tl.constexpr = 1024  # " + "a comment that goes on well past eighty columns " * 3
CODE = f"import triton\nimport triton.language as tl\n\n\ndef kernel(x):\n{LONG_LINE}\n    return x\n"
NODE = "a_node_id_long_enough_to_make_the_rounds_table_wider_than_eighty_columns"


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    store = Store(ws / DB_NAME)
    try:
        store.create_run(
            {
                "id": "r",
                "task": "softmax",
                "model": "replay:x",
                "language": "triton",
                "device": "cpu",
                "status": "finished",
                "config": {},
            }
        )
        candidate = Candidate(task="softmax", language="triton", code=CODE, entry_point="kernel")
        cid = store.ensure_candidate(candidate)
        summary = "incorrect on cpu: large_6x257: 282 non-finite output values (nan/inf) in output 0, first at [0, 2]"
        eid = store.record_evaluation(cid, "k", Evaluation(verdict=Verdict.INCORRECT, device="cpu", log=summary))
        for attempt, verdict in ((1, "incorrect"), (2, "passed")):
            store.record_attempt(
                {
                    "run_id": "r",
                    "cycle_id": "c1",
                    "attempt": attempt,
                    "round_index": attempt,
                    "node_id": NODE,
                    "prompt_kind": "action_from_spec",
                    "candidate_id": cid,
                    "evaluation_id": eid,
                    "verdict": verdict,
                    "score": None,
                    "error": summary,
                }
            )
        store.update_run("r", best_candidate_id=cid, best_evaluation_id=eid)
    finally:
        store.close()
    return ws


def piped(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80"}  # what a terminal of 80 columns would say; a pipe ignores it
    return subprocess.run(
        [sys.executable, "-m", "ksearch.cli", "--workspace", str(ws), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_show_code_into_a_file_is_the_kernel_alone(tmp_path):
    shown = piped(workspace(tmp_path), "show", "r", "--code")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == CODE


def test_show_code_of_a_run_without_a_best_kernel_says_so(tmp_path):
    ws = workspace(tmp_path)
    store = Store(ws / DB_NAME)
    store.update_run("r", best_candidate_id=None, best_evaluation_id=None)
    store.close()
    shown = piped(ws, "show", "r", "--code")
    assert shown.returncode == 1 and shown.stdout == ""
    assert "run r has no best kernel yet" in shown.stderr


def test_piped_tables_and_lines_are_whole(tmp_path):
    shown = piped(workspace(tmp_path), "show", "r")
    assert shown.returncode == 0, shown.stderr
    assert "…" not in shown.stdout and "\x1b[" not in shown.stdout  # no cut cell, no colour codes
    rounds = [line for line in shown.stdout.splitlines() if NODE in line and "action_from_spec" in line]
    assert len(rounds) == 2 and "incorrect" in rounds[0] and "passed" in rounds[1]
    assert all(len(line) > 80 for line in rounds)  # one line each, as wide as its cells
    tasks = piped(tmp_path, "tasks")
    assert not any(line != line.rstrip() for line in tasks.stdout.splitlines())  # no padding to a width


def test_pending_into_a_pipe_draws_short_rules(tmp_path):
    """The pipe console's width is unbounded, so a rich rule there was 100,000 characters of '─' per section (seen
    saving issue 33's prompts); sections are now marked by a plain 100-character rule."""
    from ksearch.agent.config import RunConfig
    from ksearch.flows import run as runner

    ws = tmp_path / "ws"
    waiting = runner.start_run(RunConfig(run_id="w", task="softmax", model="interactive", device="cpu"), workspace=ws)
    assert waiting.status == "waiting"
    shown = piped(ws, "pending", "w")
    assert shown.returncode == 0, shown.stderr
    rules = [line for line in shown.stdout.splitlines() if line.startswith("──")]
    assert [line.split(" ")[1] for line in rules] == ["plan:0:0:", "expected"]
    assert all(len(line) <= 120 for line in rules)
