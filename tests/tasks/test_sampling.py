"""Seeded inputs are the same bits in processes that detect different CPU capabilities (the worker and the checker
compare digests of what each regenerated: a difference reads as tampering, as it did in a CI run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
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


@pytest.mark.slow
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


POSITIVE = """
import torch
from ksearch.tasks.kernelbench.distributions import rescale
from ksearch.tasks.kernelbench.variants import draw
from ksearch.tools.evaluator.shared.seeds import input_digest
g = torch.Generator().manual_seed(1298898185)
positive = draw("positive", (1024, 1024), torch.float32, "cpu", g)
print(input_digest([positive]), input_digest(rescale([positive], 11)))
"""


def test_exp_and_power_draws_do_not_depend_on_the_cpu_capability() -> None:
    """The seed of a CI failure (2026-12-07): ATen's ``exp_`` under the default capability gives this draw other bits
    than under AVX2/AVX512, and a sandboxed worker computed its first ``exp_`` so about one run in ten."""
    detected = torch.backends.cpu.get_cpu_capability().lower()
    digests = {
        capability: subprocess.run(
            [sys.executable, "-c", POSITIVE],
            capture_output=True,
            text=True,
            env={**os.environ, "ATEN_CPU_CAPABILITY": capability},
            check=True,
        ).stdout
        for capability in ("default", detected)
    }
    assert digests["default"] == digests[detected], digests


def test_exp_and_power_are_torchs_to_the_last_bits_or_so() -> None:
    values = torch.linspace(-20, 20, 10_001, dtype=torch.float64)
    assert torch.allclose(sampling.exp(values), values.exp(), rtol=1e-15, atol=0)
    unit = torch.linspace(0, 1, 10_001, dtype=torch.float64)
    assert torch.allclose(sampling.power(unit, 2.7), unit.pow(2.7), rtol=1e-15, atol=0)
    assert sampling.exp(values.float()).dtype == torch.float32
