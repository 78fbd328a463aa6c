"""Fused GELU gate: out = GELU(x) * y, elementwise, float32 (exact erf GELU, as torch.nn.functional.gelu).

An example of a user-defined operator for ksearch: run a search on it with

    ksearch run examples/my_op.py --model openai:gpt-5.2 --device cuda
    ksearch run examples/my_op.py --model replay:FILE.jsonl --device cpu   # offline, correctness only

and check one kernel file against it with ``ksearch eval examples/my_op.py my_kernel.py``.
The protocol (which names this file defines and what they mean) is in ksearch/tasks/userop/PROTOCOL.md.
"""

import torch

TITLE = "Fused GELU(x) * y over two float32 tensors of the same shape"
ENTRY_POINT = "kernel"  # the candidate module defines kernel(x, y) -> Tensor
ATOL = 1e-5
RTOL = 1e-5

# Correctness configurations: odd sizes catch missing masks; "scale" widens the value range.
CONFIGS = [
    {"rows": 1, "cols": 1},
    {"rows": 7, "cols": 33},
    {"rows": 64, "cols": 1000, "scale": 4.0},
    {"rows": 3, "cols": 4097},
    {"rows": 2048, "cols": 2048},
    {"rows": 8192, "cols": 4096},
]
# Timed on a GPU (the geometric mean of their medians is the run's latency).
BENCHMARK_CONFIGS = [
    {"rows": 4096, "cols": 4096},
    {"rows": 16384, "cols": 8192},
]
# Used instead of both lists on --device cpu, where Triton's interpreter is slow.
CPU_CONFIGS = [
    {"rows": 1, "cols": 1},
    {"rows": 7, "cols": 33},
    {"rows": 16, "cols": 300, "scale": 4.0},
]


def make_inputs(config: dict, seed: int, device: str) -> list:
    """Two tensors of shape (rows, cols), deterministic in ``seed``, made on the CPU then moved to ``device``."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    shape = (int(config["rows"]), int(config["cols"]))
    scale = float(config.get("scale", 1.0))
    x = torch.randn(shape, generator=generator) * scale
    y = torch.randn(shape, generator=generator)
    return [x.to(device), y.to(device)]


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Computed in float64 and rounded once, so the reference itself adds no float32 error."""
    return (torch.nn.functional.gelu(x.double()) * y.double()).to(torch.float32)


def flops_and_bytes(config: dict) -> tuple[float, float]:
    n = float(config["rows"]) * float(config["cols"])
    return 10.0 * n, 3 * 4.0 * n  # about 10 flops per element; read x and y, write out
