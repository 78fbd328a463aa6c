"""The small things issue 64 lists: "1 rounds"; a replay that runs out said as a budget; a fork's inherited rounds
printed as if new; eval's verdict twice and its syntax errors in `candidate.py`; `-w` after the command; scratch
folders left by a killed process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch.agent.config import RunConfig
from ksearch.cli import app
from ksearch.flows import run as runner
from ksearch.tools.scratch import scratch_dir, sweep_stale
from tests.helpers.scripts import DEMO, fenced, init_plan, row_kernel, write_script

REPO = Path(__file__).resolve().parents[2]
cli = CliRunner()


@pytest.mark.slow
@pytest.mark.usefixtures("fake_executor")  # the command's output, not the evaluator
def test_one_round_is_singular_and_a_replay_that_runs_out_is_no_budget(tmp_path):
    script = write_script(
        tmp_path / "one.jsonl", [("plan:0:0", init_plan([("a", 0.9)])), ("write:c1:1", fenced(row_kernel(1)))]
    )
    result = cli.invoke(
        app,
        ["--workspace", str(tmp_path / "ws"), "run", "softmax", "--model", f"replay:{script}", "--device", "cpu",
         "--max-rounds", "3", "--run-id", "short"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = result.output.replace("\n", " ")
    assert "1 rounds" not in text and "; 1 round" in text, text
    assert "finished: replay ended: the recording has no reply for call" in text, text
    assert "budget" not in text.split("finished:")[1], text  # no budget was set, none was spent


@pytest.mark.slow  # the real evaluator: the fork command's end-to-end test
def test_a_forks_inherited_rounds_are_marked_as_the_parents(tmp_path):
    ws = tmp_path / "ws"
    parent = RunConfig(
        run_id="p", task="softmax", model=f"replay:{DEMO}", device="cpu", max_rounds=6, stagnation_window=2
    )
    runner.start_run(parent, workspace=ws)
    result = cli.invoke(app, ["--workspace", str(ws), "fork", "p", "--at", "3", "--max-rounds", "4", "--run-id", "f"])
    assert result.exit_code == 0, result.output
    rounds = {
        int(line.split()[1].split("/")[0]): line for line in result.output.splitlines() if line.startswith("round")
    }
    assert sorted(rounds) == [1, 2, 3, 4], result.output
    assert all("(inherited from p)" in rounds[n] for n in (1, 2, 3)), result.output
    assert "inherited" not in rounds[4]


@pytest.mark.slow
def test_eval_says_the_verdict_once_and_names_the_users_file(tmp_path):
    broken = tmp_path / "my_kernel.py"
    broken.write_text("import torch\n\n\ndef kernel(x)\n    return x\n")
    result = cli.invoke(app, ["--workspace", str(tmp_path / "ws"), "eval", "softmax", str(broken), "--device", "cpu"])
    assert result.exit_code == 3, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("compile_error on cpu") and not lines[0].startswith("compile_error: "), lines
    assert f'File "{broken}", line 4' in result.output and "candidate.py" not in result.output, result.output
    assert sum(line == "compile_error in phase 'load'" for line in lines) == 0, lines  # the summary quotes it


def test_a_global_option_after_the_command_says_where_it_goes(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "ksearch.cli", "runs", "-w", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "No such option: -w" in done.stderr
    assert f"goes before the command, as in: ksearch -w {tmp_path} runs --json" in done.stderr, done.stderr


def test_scratch_folders_of_a_killed_process_are_removed_by_the_next_one(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from ksearch.tools.scratch import scratch_dir; "
         "print(scratch_dir('eval'), flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert child.stdout is not None
    left = Path(child.stdout.readline().strip())
    (left / "kernel.py").write_text("x = 1\n")
    os.kill(child.pid, signal.SIGKILL)  # no cleanup code runs
    child.wait(timeout=30)
    time.sleep(0.1)
    assert left.is_dir() and left.parent == tmp_path

    mine = scratch_dir("eval")  # a new session's folder: the dead one's is swept first, this live one's kept
    assert not left.exists()
    assert mine.is_dir() and f"-{os.getpid()}-" in mine.name
    assert sweep_stale(tmp_path) == [] and mine.is_dir()


@pytest.mark.slow
def test_an_evaluation_session_works_in_a_folder_named_after_its_process(tmp_path, monkeypatch):
    from ksearch.tools.evaluator import EvaluatorSession

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    session = EvaluatorSession("cpu", prestart=False)
    try:
        assert session.root.parent == tmp_path and session.root.name.startswith(f"ksearch-eval-{os.getpid()}-")
    finally:
        session.close()
    assert not session.root.exists()
