"""Correctness inputs beyond ``get_inputs()``: the same shapes and dtypes, other value distributions.

KernelBench's ``get_inputs()`` draws most activations with ``torch.rand``, all in [0, 1). On that domain ReLU,
LeakyReLU, ELU and HardTanh are the identity, and statistics follow from the element count (a Frobenius norm is
about ``sqrt(numel / 3)``), so a kernel that does no work, or estimates instead of computing, passes KernelBench's
own trials. Besides those 5 trials every problem is therefore checked on one input set per variant below, each
drawn from its config's (salted) seed on the evaluation's device, identically in the worker and in the checker:

========  ===================================================================================================
variant   what every floating-point activation becomes
========  ===================================================================================================
signed    N(0, 1): negative values, so identity-on-the-domain shortcuts fail
large     U(-8, 8): scaled up, bounded so that honest exp-based formulas (tanh, softplus, GELU's tanh form) do
          not overflow float32
small     N(0, 1) * 1e-3: scaled down, so an absolute tolerance cannot wave small outputs through
positive  exp(N(0, 1)): positive but spanning about 0.02 to 50, for ops defined on positive inputs only (log,
          sqrt, KLDiv's probabilities)
sparse    N(0, 1) with 25 % exact zeros and 0.5 % distinct extremes of magnitude 6 to 8 at random places, so a
          kernel that samples part of its input (a partial reduction) misses them
========  ===================================================================================================

Kept exactly as ``get_inputs()`` drew them: integer and boolean tensors (class indices, masks), floating tensors
holding at most two distinct values (``+-1`` targets, ``0/1`` masks: labels, not activations) and anything that is
not a tensor. Weights are not inputs: they come from ``get_init_inputs()`` and the model's seeded initialisation,
unchanged. Per family of KernelBench problems this means: activations, softmax, norms, reductions, scans,
matmuls and convolutions get every variant of their activation inputs; losses get them for their predictions (and
float targets), with class-index and ``+-1`` targets kept; a problem whose reference is not finite on a variant (a
log of negative numbers, a norm of an all-zero row, a cumulative product that overflows) is not judged on that
variant: the op does not allow it (``KernelBenchTask.check``).
"""

from __future__ import annotations

from typing import Any

import torch

from ksearch.tasks import sampling

VARIANTS: dict[str, str] = {
    "signed": "N(0, 1)",
    "large": "U(-8, 8)",
    "small": "N(0, 1) * 1e-3",
    "positive": "exp(N(0, 1))",
    "sparse": "N(0, 1) with 25% zeros and 0.5% extremes of magnitude 6-8",
}
"""Variant name -> what a floating-point activation is drawn from (also the config's ``distribution``)."""
VARIANT_SEED_BASE = 7700
"""Public seeds of the variant configs (the evaluator salts every seed)."""
LARGE_BOUND = 8.0
SMALL_SCALE = 1e-3
SPARSE_ZEROS = 0.25
SPARSE_EXTREMES = 0.005
EXTREME_LOW, EXTREME_HIGH = 6.0, 8.0


def redraw(inputs: list[Any], variant: str, seed: int, device: str) -> list[Any]:
    """``inputs`` (already on ``device``) with every floating-point activation redrawn from ``variant``."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown input variant {variant!r}; known: {', '.join(VARIANTS)}")
    generator = torch.Generator(device=device).manual_seed(seed)
    redrawn: list[Any] = []
    for value in inputs:
        if is_activation(value):
            value = draw(variant, tuple(value.shape), value.dtype, value.device, generator)
        redrawn.append(value)
    return redrawn


def is_activation(value: Any) -> bool:
    """A floating-point tensor with more than two distinct values (the rest are labels, masks or scalars)."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.numel() <= 2:
        return False
    low, high = value.min(), value.max()
    return not bool(((value == low) | (value == high)).all())


def draw(
    variant: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str, generator: torch.Generator
) -> torch.Tensor:
    """One tensor of ``variant``. On the CPU the values are drawn in float64, whose kernels do not depend on the CPU's
    vector capability (``ksearch.tasks.sampling``), so every process draws the same bits; on a GPU in float32."""
    work = torch.float64 if torch.device(device).type == "cpu" else torch.float32

    def normal() -> torch.Tensor:
        return torch.randn(shape, generator=generator, device=device, dtype=work)

    def uniform() -> torch.Tensor:
        return torch.rand(shape, generator=generator, device=device, dtype=work)

    if variant == "signed":
        values = normal()
    elif variant == "large":
        values = uniform().mul_(2 * LARGE_BOUND).sub_(LARGE_BOUND)
    elif variant == "small":
        values = normal().mul_(SMALL_SCALE)
    elif variant == "positive":
        values = sampling.exp(normal())
    else:  # sparse
        values, u = normal(), uniform()
        values[u < SPARSE_ZEROS] = 0.0
        extreme = u > 1.0 - SPARSE_EXTREMES
        spread = (u - (1.0 - SPARSE_EXTREMES)) / SPARSE_EXTREMES  # distinct per element, so no ties at the max
        magnitude = spread.mul_(EXTREME_HIGH - EXTREME_LOW).add_(EXTREME_LOW)
        values = torch.where(extreme, torch.where(values < 0, -magnitude, magnitude), values)
    return values.to(dtype)


__all__ = ["VARIANTS", "VARIANT_SEED_BASE", "draw", "is_activation", "redraw"]
