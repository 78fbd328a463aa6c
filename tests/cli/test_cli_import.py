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


def test_the_flow_constants_written_out_in_the_cli_agree_with_the_flows():
    """The CLI writes out a few flow constants (help text, defaults) so as not to import those flows at start."""
    from ksearch.cli import report, skills
    from ksearch.flows import serve as serve_flow
    from ksearch.flows import skills as skills_flow

    assert (report.SERVE_DEFAULT_HOST, report.SERVE_DEFAULT_PORT) == (serve_flow.DEFAULT_HOST, serve_flow.DEFAULT_PORT)
    assert skills.STATUSES == skills_flow.STATUSES
    assert (skills.MAX_STEPS, skills.MAX_REJECTIONS) == (skills_flow.MAX_STEPS, skills_flow.MAX_REJECTIONS)
