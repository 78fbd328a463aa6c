"""The ``eval`` flow starts the evaluation's processes before this process imports torch, so that a cold
``ksearch eval`` waits for one interpreter and CUDA start-up, not for the parent's and then the children's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "tasks" / "data"

SPY = r"""
import json, sys
from ksearch.tools.evaluator.parent import processes

spawned = []
real_spawn = processes.spawn


def spy(module, *args, **kwargs):
    spawned.append({"module": module, "device": kwargs["device"], "torch_loaded": "torch" in sys.modules})
    return real_spawn(module, *args, **kwargs)


processes.spawn = spy
from ksearch.flows import evaluate as flow

if sys.argv[2] != "-":
    flow.likely_device = lambda: sys.argv[2]
evaluation = flow.evaluate_file("softmax", sys.argv[1], device=sys.argv[3])
print(json.dumps({"verdict": evaluation.verdict.value, "spawned": spawned}))
"""


CHECKER, WORKER = "ksearch.tools.evaluator.checker.main", "ksearch.tools.evaluator.worker.main"


def _spawns(device: str, guess: str = "-") -> dict:
    done = subprocess.run(
        [sys.executable, "-c", SPY, str(DATA / "softmax_triton_ok.py"), guess, device],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_checker_and_worker_start_before_the_parent_imports_torch() -> None:
    for device in ("cpu", "auto"):  # auto: on the likely device, while the probe runs
        report = _spawns(device)
        assert report["verdict"] == "passed"
        assert [(s["module"], s["device"]) for s in report["spawned"]] == [(CHECKER, "cpu"), (WORKER, "cpu")]
        assert not any(s["torch_loaded"] for s in report["spawned"]), report


@pytest.mark.slow
def test_a_wrong_guess_of_the_device_starts_the_processes_again_on_the_probed_one() -> None:
    """Where a GPU's device file exists but torch cannot use it (a CPU build of torch, say), the probe says cpu: the
    processes started on cuda are stopped and the evaluation runs on the CPU."""
    report = _spawns("auto", guess="cuda")
    assert report["verdict"] == "passed"
    assert [(s["module"], s["device"]) for s in report["spawned"]] == [
        (CHECKER, "cuda"),
        (WORKER, "cuda"),
        (WORKER, "cuda"),
        (WORKER, "cuda"),
        (CHECKER, "cpu"),
        (WORKER, "cpu"),
    ]  # on cuda, the Triton kernel's compile scout and the profiling process too


def test_the_evaluator_package_imports_without_torch() -> None:
    code = (
        "import sys, ksearch.flows.evaluate, ksearch.tools.evaluator; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
