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
SLICES = 16
"""Pieces a draw (and every elementwise pass over a large input here and in ``distributions``) works in: its
temporaries take a sixteenth of the input's memory, where whole-tensor arithmetic took up to six inputs' worth (a
sparse draw of level 1's 6.4 GB ReLU input ran an 80 GB GPU out of memory beside the checker, 2026-12-07)."""
MIN_SLICE = 1 << 16


def redraw(inputs: list[Any], variant: str, seed: int, device: str) -> list[Any]:
    """``inputs`` (already on ``device``) with every floating-point activation redrawn from ``variant``: replaced in
    the list itself, each released before its replacement is drawn, so a redraw needs one input's memory (and
    ``SLICES``-th parts of it) beyond the list, not two."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown input variant {variant!r}; known: {', '.join(VARIANTS)}")
    generator = torch.Generator(device=device).manual_seed(seed)
    for position in range(len(inputs)):  # by index: enumerate's cached pair would keep the old tensor alive
        value = inputs[position]
        if not is_activation(value):
            continue
        shape, dtype, where = tuple(value.shape), value.dtype, value.device
        del value
        inputs[position] = None
        inputs[position] = draw(variant, shape, dtype, where, generator)
    return inputs


def slices(tensor: torch.Tensor) -> list[torch.Tensor]:
    """Views of ``tensor`` that together cover it, about ``SLICES`` of them (at least ``MIN_SLICE`` elements each):
    of its flat view when it is contiguous, else along its first dimension. Elementwise work done slice by slice
    needs a ``SLICES``-th of the tensor's memory for its temporaries instead of several times the tensor."""
    if tensor.dim() == 0:
        return [tensor]
    if tensor.is_contiguous():
        flat = tensor.view(-1)
        return list(flat.split(max(MIN_SLICE, -(-flat.numel() // SLICES))))
    return list(tensor.split(max(1, -(-tensor.shape[0] // SLICES))))


def is_activation(value: Any) -> bool:
    """A floating-point tensor with more than two distinct values (the rest are labels, masks or scalars)."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.numel() <= 2:
        return False
    low, high = value.min(), value.max()
    return any(not bool(((part == low) | (part == high)).all()) for part in slices(value))


def draw(
    variant: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str, generator: torch.Generator
) -> torch.Tensor:
    """One tensor of ``variant``, drawn slice by slice (``slices``) into a tensor of ``dtype``: the temporaries of a
    draw take a ``SLICES``-th of its memory. On the CPU the values are drawn in float64, whose kernels do not depend
    on the CPU's vector capability (``ksearch.tasks.sampling``), so every process draws the same bits; on a GPU in
    float32. The slices depend on the shape only, so the worker and the checker draw the same values."""
    work = torch.float64 if torch.device(device).type == "cpu" else torch.float32
    out = torch.empty(shape, dtype=dtype, device=device)
    for part in slices(out):
        part.copy_(_values(variant, part.numel(), work, device, generator).view(part.shape))
    return out


def _values(
    variant: str, count: int, work: torch.dtype, device: torch.device | str, generator: torch.Generator
) -> torch.Tensor:
    """``count`` values of ``variant`` in the dtype ``work``."""

    def normal() -> torch.Tensor:
        return torch.randn(count, generator=generator, device=device, dtype=work)

    def uniform() -> torch.Tensor:
        return torch.rand(count, generator=generator, device=device, dtype=work)

    if variant == "signed":
        return normal()
    if variant == "large":
        return uniform().mul_(2 * LARGE_BOUND).sub_(LARGE_BOUND)
    if variant == "small":
        return normal().mul_(SMALL_SCALE)
    if variant == "positive":
        return sampling.exp(normal())
    values, u = normal(), uniform()  # sparse
    values[u < SPARSE_ZEROS] = 0.0
    extreme = u > 1.0 - SPARSE_EXTREMES
    spread = (u - (1.0 - SPARSE_EXTREMES)) / SPARSE_EXTREMES  # distinct per element, so no ties at the max
    magnitude = spread.mul_(EXTREME_HIGH - EXTREME_LOW).add_(EXTREME_LOW)
    return torch.where(extreme, torch.where(values < 0, -magnitude, magnitude), values)


__all__ = ["SLICES", "VARIANTS", "VARIANT_SEED_BASE", "draw", "is_activation", "redraw", "slices"]
