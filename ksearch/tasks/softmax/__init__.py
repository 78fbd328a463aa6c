"""Built-in task ``softmax``: row-wise softmax over a 2-D float32 tensor. Small enough to test the whole loop on CPU."""

from __future__ import annotations

import inspect
from importlib import resources
from string import Template
from typing import Any

import torch

from ksearch.tasks import sampling
from ksearch.tasks.base import Task, TaskConfig, device_kind
from ksearch.tasks.softmax import reference as _reference

LARGE_SCALE = 100.0
"""The 'large' distribution multiplies normal values by this, so a kernel that skips max-subtraction overflows."""


def _config(name: str, m: int, n: int, seed: int, distribution: str = "normal") -> TaskConfig:
    return TaskConfig(name=name, params={"M": m, "N": n}, seed=seed, distribution=distribution)


# Tiny shapes for the Triton interpreter (about 2 ms per program instance, one row per instance in simple kernels).
_CPU_TESTS = [
    _config("n1_4x1", 4, 1, seed=1),
    _config("pow2_16x128", 16, 128, seed=2),
    _config("odd_7x33", 7, 33, seed=3),
    _config("odd_5x1000", 5, 1000, seed=4),
    _config("large_6x257", 6, 257, seed=5, distribution="large"),
    _config("odd_9x200_seed6", 9, 200, seed=6),
    _config("odd_9x200_seed7", 9, 200, seed=7),
    _config("wide_2x5000", 2, 5000, seed=8),
]
_CPU_BENCHMARKS = [
    _config("bench_32x256", 32, 256, seed=101),
    _config("bench_8x1024", 8, 1024, seed=102),
]
_CUDA_BENCHMARKS = [
    _config("bench_4096x4096", 4096, 4096, seed=201),
    _config("bench_8192x1024", 8192, 1024, seed=202),
    _config("bench_1024x16384", 1024, 16384, seed=203),
    _config("bench_32768x512", 32768, 512, seed=204),
]
# Every benchmark shape again (other seeds), plus shapes and distributions that are never timed.
_CUDA_TESTS = [
    *_CPU_TESTS,
    _config("n1_65536x1", 65536, 1, seed=11),
    _config("odd_1000x3000", 1000, 3000, seed=12),
    _config("odd_333x12289", 333, 12289, seed=13),
    _config("max_n_64x16384", 64, 16384, seed=14),
    _config("large_4096x4096", 4096, 4096, seed=15, distribution="large"),
    _config("large_127x9999", 127, 9999, seed=16, distribution="large"),
    _config("test_4096x4096", 4096, 4096, seed=21),
    _config("test_8192x1024", 8192, 1024, seed=22),
    _config("test_1024x16384", 1024, 16384, seed=23),
    _config("test_32768x512", 32768, 512, seed=24),
]


class SoftmaxTask(Task):
    name = "softmax"
    title = "Row-wise softmax over a 2-D float32 tensor"
    entry_point = "kernel"
    languages = ("triton",)
    atol = 1e-5
    rtol = 1e-5
    timing_methods = ("robust", "gpumode", "gpumode-benchmark", "flashinfer")

    def spec(self, language: str) -> str:
        if language not in self.languages:
            raise ValueError(f"task {self.name!r} has no spec for language {language!r}; it supports {self.languages}")
        text = resources.files(__package__).joinpath("spec.txt").read_text(encoding="utf-8")
        shapes = ", ".join(f"{c.params['M']}x{c.params['N']}" for c in _CUDA_BENCHMARKS)
        return Template(text).substitute(
            language=language.capitalize(), entry_point=self.entry_point, tol=f"{self.atol:g}", benchmark_shapes=shapes
        )

    def reference_source(self) -> str:
        return inspect.getsource(_reference)

    def test_configs(self, device: str) -> list[TaskConfig]:
        return list(_CPU_TESTS if device_kind(device) == "cpu" else _CUDA_TESTS)

    def benchmark_configs(self, device: str) -> list[TaskConfig]:
        return list(_CPU_BENCHMARKS if device_kind(device) == "cpu" else _CUDA_BENCHMARKS)

    def make_inputs(self, config: TaskConfig, device: str) -> list[Any]:
        # Generated on the CPU, then moved.
        generator = torch.Generator(device="cpu").manual_seed(config.seed)
        m, n = int(config.params["M"]), int(config.params["N"])
        # On the CPU device the draw goes through float64 (the same bits whatever CPU capability a process detects);
        # GPU inputs keep the fast float32 draw they always had (the leaderboard mode draws fresh inputs per repeat).
        x = (
            sampling.randn(m, n, generator=generator)
            if device_kind(device) == "cpu"
            else torch.randn(m, n, generator=generator, dtype=torch.float32)
        )
        if config.distribution == "large":
            x *= LARGE_SCALE
        elif config.distribution != "normal":
            raise ValueError(f"unknown distribution {config.distribution!r} for task {self.name!r}")
        return [x.to(device)]

    def reference(self, *inputs: Any) -> torch.Tensor:
        (x,) = inputs
        return _reference.softmax_reference(x)

    def flops_and_bytes(self, config: TaskConfig) -> tuple[float, float]:
        elements = float(config.params["M"]) * float(config.params["N"])
        # max, subtract, exp, sum, divide per element; read x once and write y once.
        return 5.0 * elements, 2.0 * 4.0 * elements


__all__ = ["SoftmaxTask"]
