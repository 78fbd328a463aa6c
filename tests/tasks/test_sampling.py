"""Seeded inputs are the same bits in processes that detect different CPU capabilities (the worker and the checker
compare digests of what each regenerated: a difference reads as tampering, as it did in a CI run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from ksearch.tasks import sampling

KERNELBENCH = Path(__file__).resolve().parent / "kernelbench" / "KernelBench" / "level1" / "94_MSELoss.py"
"""A KernelBench problem: its rescaled and perturbed configs compute in float64 on the CPU too."""
DIGESTS = """
import json
import sys
from ksearch.tasks.registry import resolve_task
from ksearch.tools.evaluator.shared.seeds import input_digest
out = {}
for name in sys.argv[1:]:
    task = resolve_task(name)
    configs = task.test_configs("cpu") + task.benchmark_configs("cpu")
    out[name] = [input_digest(task.make_inputs(c, "cpu")) for c in configs]
print(json.dumps(out))
"""


def _digests(capability: str) -> dict:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    names = ["trimul", "softmax", f"kernelbench:{KERNELBENCH}"]
    proc = subprocess.run([sys.executable, "-c", DIGESTS, *names], capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout)


def test_task_inputs_do_not_depend_on_the_cpu_capability() -> None:
    detected = torch.backends.cpu.get_cpu_capability().lower()  # what this machine runs by default
    assert _digests("default") == _digests(detected)


def test_the_cpu_draws_are_the_distributions_asked_for() -> None:
    g = torch.Generator().manual_seed(3)
    normal = sampling.randn(200_000, generator=g)
    assert normal.dtype == torch.float32 and abs(float(normal.mean())) < 0.01 and abs(float(normal.std()) - 1) < 0.01
    cauchy = sampling.cauchy(200_000, scale=2.0, generator=g)
    quartiles = torch.quantile(cauchy.double(), torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    assert cauchy.dtype == torch.float32
    assert (
        abs(float(quartiles[1])) < 0.05
        and abs(float(quartiles[2]) - 2.0) < 0.06
        and abs(float(quartiles[0]) + 2.0) < 0.06
    )
