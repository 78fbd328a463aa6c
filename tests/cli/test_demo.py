"""The README's demo command, exactly as written there, on the scripted replies shipped in the package."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def readme_demo_command() -> list[str]:
    readme = (REPO / "README.md").read_text()
    match = re.search(r"^(ksearch demo[^\n]*)$", readme, re.M)
    assert match, "the README shows the demo command"
    return shlex.split(match.group(1))


def test_readme_demo_runs_offline_and_prints_the_best_kernel(tmp_path):
    args = readme_demo_command()
    proc = subprocess.run(
        [sys.executable, "-m", "ksearch.cli", "--workspace", str(tmp_path / "ws"), *args[1:]],
        cwd=tmp_path,  # any folder: the replies ship with the package
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "incorrect on cpu" in out  # the scripted first kernel forgets the max-subtraction
    assert "compile_error on cpu" in out
    assert "best kernel (node row_per_program): passed 8/8 configs on cpu (correctness only" in out.replace("\n", " ")
    assert "finished: round budget spent (6/6)" in out.replace("\n", " ")


def test_demo_file_is_labelled_as_scripted():
    head = " ".join((REPO / "ksearch" / "examples" / "softmax-demo.jsonl").read_text().splitlines()[:3])
    assert "SCRIPTED DEMO" in head and "NOT a real model" in head
