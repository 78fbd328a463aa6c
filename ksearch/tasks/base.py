"""The task protocol: what a kernel must compute, on which inputs, how it is checked and how its speed is scored.

A task is pure definition plus behaviour. The evaluator's worker imports it in the candidate's process to build
inputs and the reference; the trusted parent uses it only to turn timings into a score.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict

from ksearch.contracts.evaluation import Mismatch, Timing

MIN_LATENCY_MS = 1e-6
"""Floor for a per-config median before the geometric mean, so one absurd time cannot drive the aggregate to 0."""


class TaskConfig(BaseModel):
    """One input configuration: a shape (``params``), a seed and a value distribution."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    params: dict[str, int | float | str | bool]
    seed: int
    distribution: str = "normal"


def device_kind(device: str) -> str:
    """'cpu' or 'cuda' for any device string ('cuda:1' -> 'cuda'), for choosing config sets."""
    return "cpu" if device == "cpu" else "cuda"


class Task(ABC):
    """A kernel-writing problem. Subclasses set the class attributes and implement the abstract methods."""

    name: str
    title: str
    entry_point: str = "kernel"
    """Name of the function a candidate module must define."""
    languages: tuple[str, ...] = ("triton",)
    atol: float = 1e-5
    rtol: float = 1e-5
    # -- hardened-evaluator hooks (all optional; the defaults suit a task whose solution returns one new tensor) --
    timing_methods: tuple[str, ...] = ("robust",)
    """Timing methods (``ksearch.tools.timing``) this task may be measured with."""
    default_timing_method: str = "robust"
    flush_l2: bool = True
    """Whether the ``robust`` method evicts the L2 cache (256 MB write) before each timed call."""
    output_is_tuple: bool = False
    """The entry point returns a tuple of tensors instead of one tensor."""
    allow_nonfinite: bool = False
    """Let NaN/inf outputs reach ``check`` (only for tasks whose reference legitimately produces them)."""
    roofline_compute_dtype: str = "bf16"
    """Which peak FLOP/s the physics floor divides by ('fp32', 'tf32', 'bf16', 'fp8'): the highest plausible one."""

    @abstractmethod
    def spec(self, language: str) -> str:
        """Prompt text: what to compute, the signature, dtypes and shapes, the tolerance, what is timed."""

    @abstractmethod
    def reference_source(self) -> str:
        """The reference implementation as code text, for prompts."""

    @abstractmethod
    def test_configs(self, device: str) -> list[TaskConfig]:
        """Correctness configs: more shapes, seeds and distributions than are benchmarked. 'cpu' gets small ones."""

    @abstractmethod
    def benchmark_configs(self, device: str) -> list[TaskConfig]:
        """Timed configs: real sizes on 'cuda', tiny ones on 'cpu' (the interpreter is slow)."""

    @abstractmethod
    def make_inputs(self, config: TaskConfig, device: str) -> list[Any]:
        """Fresh inputs, deterministic in ``config.seed`` (a private torch.Generator, never the global RNG)."""

    @abstractmethod
    def reference(self, *inputs: Any) -> torch.Tensor:
        """The expected output. Called on a pristine clone of the inputs, before the candidate runs."""

    @abstractmethod
    def flops_and_bytes(self, config: TaskConfig) -> tuple[float, float]:
        """Minimal floating-point operations and bytes moved, for a roofline plausibility floor."""

    def prepare(self, module: Any, config: TaskConfig, device: str) -> Callable[[list[Any]], Any]:
        """The callable the evaluator runs (and times) for ``config``: by default ``entry_point(*inputs)``.

        Tasks whose solutions are not a plain function override this, e.g. GPU MODE's ``custom_kernel(data)``
        (one tuple argument) or KernelBench's ``ModelNew(*init_inputs)`` built once per config with seeded weights.
        Called in the candidate's process, after the module is imported and before anything is timed.
        """
        fn = getattr(module, self.entry_point)
        return lambda inputs: fn(*inputs)

    def expected(self, config: TaskConfig, inputs: list[Any]) -> Any:
        """The reference output for ``inputs`` (a pristine clone). Override when the reference needs the config."""
        return self.reference(*inputs)

    def output_buffers(self, config: TaskConfig, inputs: list[Any]) -> list[torch.Tensor] | None:
        """Tensors among ``inputs`` that the candidate writes its result into (destination-passing style), or None.

        The evaluator fills them with NaN before every call and does not count writes to them as input mutation.
        """
        return None

    def output_strides(self, config: TaskConfig, expected: Any) -> Any:
        """The strides the output must have: a tuple per tensor (a list of them for tuple outputs), or None to accept
        any layout. By default the contiguous strides of the expected output's shape."""
        if isinstance(expected, (tuple, list)):
            return [_contiguous_strides(tuple(e.shape)) for e in expected]
        return _contiguous_strides(tuple(expected.shape))

    def starter_code(self, language: str) -> str | None:
        """Code to start the first attempt from, or None to start from the spec alone."""
        return None

    def check(self, config: TaskConfig, output: Any, expected: torch.Tensor) -> Mismatch | None:
        """None when ``output`` matches ``expected`` within atol + rtol * |expected|; else where it is worst."""
        where = config.name
        if type(output) is not torch.Tensor:
            return Mismatch(config=where, message=f"{where}: expected a torch.Tensor, got {type(output).__qualname__}")
        if output.shape != expected.shape:
            shapes = f"shape {tuple(output.shape)}, expected {tuple(expected.shape)}"
            return Mismatch(config=where, message=f"{where}: {shapes}")
        if output.dtype != expected.dtype:
            return Mismatch(config=where, message=f"{where}: dtype {output.dtype}, expected {expected.dtype}")
        if output.device != expected.device:
            return Mismatch(config=where, message=f"{where}: device {output.device}, expected {expected.device}")
        if output.numel() == 0:
            return None
        got = output.detach()
        finite = torch.isfinite(got)
        if not bool(finite.all()):
            count = int((~finite).sum())
            first = _index(torch.nonzero(~finite)[0])
            return Mismatch(
                config=where,
                worst_index=first,
                message=f"{where}: {count} non-finite output values (nan/inf), first at {first}: "
                f"{got[tuple(first)].item()}",
            )
        got64, exp64 = got.to(torch.float64), expected.detach().to(torch.float64)
        diff = (got64 - exp64).abs()
        magnitude = exp64.abs()
        excess = diff - (self.atol + self.rtol * magnitude)
        bad = excess > 0
        if not bool(bad.any()):
            return None
        significant = magnitude > self.atol
        max_rel = float((diff[significant] / magnitude[significant]).max()) if bool(significant.any()) else None
        worst = _index(torch.unravel_index(torch.argmax(excess), excess.shape))
        max_abs = float(diff.max())
        rel_text = f", max rel error {max_rel:.3g}" if max_rel is not None else ""
        return Mismatch(
            config=where,
            max_abs_error=max_abs,
            max_rel_error=max_rel,
            worst_index=worst,
            message=f"{where}: {int(bad.sum())} of {bad.numel()} values outside atol={self.atol:g} "
            f"rtol={self.rtol:g}; max abs error {max_abs:.3g}{rel_text}; worst at {worst}: "
            f"got {got64[tuple(worst)].item():.6g}, expected {exp64[tuple(worst)].item():.6g}",
        )

    def score(self, timings: list[Timing]) -> tuple[float, float]:
        """(aggregate latency in ms = geometric mean of the per-config medians, score = 1 / latency)."""
        if not timings:
            raise ValueError("no timings to score")
        logs = [math.log(max(t.median_ms, MIN_LATENCY_MS)) for t in timings]
        latency_ms = math.exp(sum(logs) / len(logs))
        return latency_ms, 1.0 / latency_ms


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _index(parts: Any) -> list[int]:
    """A tensor index (a 1-D tensor or a tuple of 0-d tensors) as plain ints, for JSON and messages."""
    return [int(p) for p in parts]
