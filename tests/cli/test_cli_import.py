"""Importing the CLI stays light: the commands import their flows (and so torch, LangGraph, the agent) themselves."""

from __future__ import annotations

import subprocess
import sys

HEAVY_MODULES = (
    "import ksearch.cli, sys; "
    "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'langgraph', 'openai') "
    "or m.startswith(('ksearch.agent', 'ksearch.tasks', 'langchain'))))"
)
"""Prints the heavy modules that ``import ksearch.cli`` loaded."""


def test_importing_the_cli_imports_no_heavy_module():
    """The CLI starts the evaluator's processes before heavy imports, and `ksearch --help` should be instant."""
    proc = subprocess.run([sys.executable, "-c", HEAVY_MODULES], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_runs_modules_import_no_provider_sdk():
    """A run whose model needs no SDK (a replay, the demo, interactive) does not pay for importing openai (0.4 s of
    every ``ksearch run``): the provider errors import the SDKs' exception types at the first failure they sort."""
    code = "import ksearch.flows.run, sys; print(sorted(m for m in sys.modules if m.split('.')[0] == 'openai'))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_flow_constants_written_out_in_the_cli_agree_with_the_flows():
    """The CLI writes out a few flow constants (help text, defaults) so as not to import those flows at start."""
    from ksearch.cli import report, skills
    from ksearch.flows import serve as serve_flow
    from ksearch.flows import skills as skills_flow

    assert (report.SERVE_DEFAULT_HOST, report.SERVE_DEFAULT_PORT) == (serve_flow.DEFAULT_HOST, serve_flow.DEFAULT_PORT)
    assert skills.STATUSES == skills_flow.STATUSES
    assert (skills.MAX_STEPS, skills.MAX_REJECTIONS) == (skills_flow.MAX_STEPS, skills_flow.MAX_REJECTIONS)


INSPECTING = """
import runpy, sys
sys.argv = ["ksearch", *sys.argv[1:]]
try:
    runpy.run_module("ksearch.cli", run_name="__main__")
except SystemExit as exc:
    assert not exc.code, exc.code
HEAVY = ('torch', 'triton', 'langgraph', 'openai', 'langchain_core')
heavy = sorted(m for m in sys.modules if m.split('.')[0] in HEAVY)
print("HEAVY", heavy, file=sys.stderr)
"""
"""Runs the CLI with the arguments given, then prints (on stderr) the heavy modules it loaded."""


def test_runs_and_show_import_neither_torch_nor_langgraph(tmp_path):
    """`ksearch runs` took 10.9 s on a loaded 2-core machine, 3.0 s of it torch (issue 64): listing a SQLite table
    and showing a run read the store only, a waiting run's pauses included (bench/cli_startup.py times them)."""
    from ksearch.agent.config import RunConfig
    from ksearch.flows import run as runner
    from tests.helpers.report_store import write_timed_run

    ws = tmp_path / "ws"
    timed = write_timed_run(ws)
    paused = runner.start_run(
        RunConfig(run_id="asks", task="softmax", model="interactive", device="cpu", max_rounds=2), workspace=ws
    )
    assert paused.status == "waiting"
    for args in (["runs"], ["runs", "--json"], ["show", timed.run_id], ["show", "asks"], ["show", "asks", "--json"]):
        proc = subprocess.run(
            [sys.executable, "-c", INSPECTING, "--workspace", str(ws), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert "HEAVY []" in proc.stderr, (args, proc.stderr[-2000:])
        if args[:2] == ["show", "asks"]:
            assert "plan:0:0" in proc.stdout  # the pause is listed, from the run's row
