"""The ``eval`` flow starts the evaluation's processes before this process imports torch, so that a cold
``ksearch eval`` waits for one interpreter and CUDA start-up, not for the parent's and then the children's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tasks" / "data"

SPY = r"""
import json, sys
from ksearch.tools.evaluator import processes

spawned = []
real_spawn = processes.spawn


def spy(module, *args, **kwargs):
    spawned.append({"module": module, "torch_loaded": "torch" in sys.modules})
    return real_spawn(module, *args, **kwargs)


processes.spawn = spy
from ksearch.flows.evaluate import evaluate_file

evaluation = evaluate_file("softmax", sys.argv[1], device="cpu")
print(json.dumps({"verdict": evaluation.verdict.value, "spawned": spawned}))
"""


def _spawns(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, str(DATA / "softmax_triton_ok.py")], capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_checker_and_worker_start_before_the_parent_imports_torch() -> None:
    report = _spawns(SPY)
    assert report["verdict"] == "passed"
    modules = [s["module"] for s in report["spawned"]]
    assert modules == ["ksearch.tools.evaluator.checker", "ksearch.tools.evaluator.worker"]
    assert not any(s["torch_loaded"] for s in report["spawned"]), report


def test_the_evaluator_package_imports_without_torch() -> None:
    code = ("import sys, ksearch.flows.evaluate, ksearch.tools.evaluator; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton')))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
