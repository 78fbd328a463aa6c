"""Correctness inputs that keep ``get_inputs()``'s domain but not its statistics, and the sensitivity check.

The five fixed variants (``variants``) leave ``get_inputs()``'s domain, so a kernel can tell them from ``torch.rand``
inputs by sampling a few values, compute honestly there, and use a shortcut that is right only for U(0, 1) (a
cross-entropy that replaces each row's logsumexp by its expectation under U(0, 1), reading only the target logits)
on KernelBench's own trials and on the timed call. Three more configs close that:

``rescaled``
    every floating-point activation of ``get_inputs()`` mapped into its own range: ``lo + (hi - lo) * c * t ** k``
    with ``t = (x - lo) / (hi - lo)``, ``lo``/``hi`` the tensor's own minimum and maximum, exact zeros kept (masks,
    triangular structure), and ``k`` (0.35-0.8 or 1.25-3) and ``c`` (0.5-0.9) secret: drawn from the config's salted
    seed. Same domain, other mean, spread and shape, so an expectation baked in for U(0, 1) is wrong, and sampling a
    few values cannot estimate ``k`` and ``c`` to the tolerance.
``perturbed``
    the ``rescaled`` inputs again (same seed) with one contiguous block of 1/64 of the largest activation, at a
    secret offset, moved 1 % towards the tensor's minimum (so it stays in range; zeros kept). Judged as any config,
    and also for *sensitivity*: the output's change from ``rescaled`` (random projections of both, ``Sensitivity``)
    must follow the reference's, so a kernel that skips part of its input fails even where that part moves the
    output by less than the tolerance (a mean over many rows moves by about 1e-4).
``timed``
    the benchmark config's distribution: ``get_inputs()`` or ``rescaled``, chosen from the salted seed, so the timed
    call is not always the one distribution a shortcut could be tuned for.

Worker and checker make the same values from the same seed (float64 on the CPU, as ``variants``).
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

from ksearch.tasks import sampling
from ksearch.tasks.kernelbench.variants import is_activation, slices

RESCALED = "rescaled"
PERTURBED = "perturbed"
TIMED = "timed"
GET_INPUTS = "get_inputs"
DISTRIBUTIONS: dict[str, str] = {
    RESCALED: "get_inputs()'s values mapped into their own range by lo + (hi - lo) * c * ((x - lo) / (hi - lo)) ** k "
    "with a secret k and c (zeros kept)",
    PERTURBED: f"the {RESCALED} inputs with a block of 1/64 of the largest input moved 1% towards its minimum, at a "
    "secret place; the output's change must follow the reference's",
}
"""Config distribution -> what its floating-point activations are (prompts and messages)."""
EXPONENTS = ((0.35, 0.8), (1.25, 3.0))
SCALES = (0.5, 0.9)
BLOCK_FRACTION = 64
SHRINK = 0.01
PROJECTIONS = 4
PROJECTION_CHUNK = 1 << 20
TRACKING = 0.25
"""The output's change may differ from the reference's by this share of the reference's change (plus ``NOISE``)."""
NOISE = 2e-6
"""... plus this share of the projected reference itself: the difference of an honest float32 kernel's rounding on
two nearly equal inputs (a sum over a million elements in blocks rounds to about 1e-6 of it), with room."""
JUDGED_CHANGE = 1e-5
"""The tracking is judged only where the perturbation moved the projected reference by this share of it or more."""
REMEMBERED = 8


def rescale(inputs: list[Any], seed: int) -> list[Any]:
    """``inputs`` with every floating-point activation mapped by the secret ``k`` and ``c`` of ``seed``, in place and
    slice by slice (``variants.slices``): the tensors must be the caller's own (``KernelBenchTask.make_inputs``
    copies any that ``get_inputs()`` could still hold)."""
    if _on_meta(inputs):
        return inputs  # shapes and dtypes only (the activation probe): they are unchanged
    k, c = secret_shape(seed)
    done: set[int] = set()
    for x in inputs:
        if id(x) not in done and is_activation(x):
            _rescale_in_place(x, k, c)
            done.add(id(x))  # a tensor listed twice is mapped once
    return inputs


def perturb(inputs: list[Any], seed: int) -> list[Any]:
    """``inputs`` (already rescaled, the caller's own) with one block of their largest activation, at a secret
    offset, moved by ``SHRINK`` of its distance to the tensor's minimum (so it stays in the range; zeros stay zeros
    when the minimum is 0), in place (a non-contiguous tensor is replaced by a contiguous copy): a change that moves
    a mean over many rows by about the tolerance, where a kernel that skips the block is still within it."""
    if _on_meta(inputs):
        return inputs
    activations = [i for i, x in enumerate(inputs) if is_activation(x)]
    if not activations:
        return inputs
    position = max(activations, key=lambda i: inputs[i].numel())
    x = inputs[position].contiguous()
    flat = x.view(-1)
    n = flat.numel()
    length = max(1, n // BLOCK_FRACTION)
    start = int(_unit(seed, "offset") * (n - length))
    work = _work_dtype(x.device)
    low = flat.min().to(work)
    block = flat[start : start + length].to(work)
    moved = block.sub(low).mul_(1.0 - SHRINK).add_(low)
    flat[start : start + length] = torch.where(block == 0, block, moved).to(x.dtype)
    result = list(inputs)
    result[position] = x
    return result


def timed_distribution(seed: int) -> str:
    """The distribution the timed config draws for ``seed``: ``get_inputs`` or ``rescaled``, half the time each."""
    return RESCALED if _unit(seed, "timed") < 0.5 else GET_INPUTS


def secret_shape(seed: int) -> tuple[float, float]:
    """(k, c) for ``seed``: k log-uniform in one of ``EXPONENTS``' ranges, c uniform in ``SCALES``."""
    low, high = EXPONENTS[0] if _unit(seed, "side") < 0.5 else EXPONENTS[1]
    k = math.exp(math.log(low) + _unit(seed, "k") * (math.log(high) - math.log(low)))
    c = SCALES[0] + _unit(seed, "c") * (SCALES[1] - SCALES[0])
    return k, c


def _rescale_in_place(x: torch.Tensor, k: float, c: float) -> None:
    work = _work_dtype(x.device)
    low, high = x.min().to(work), x.max().to(work)
    for part in slices(x):
        values = part.to(work, copy=True)
        zeros = values == 0
        values = sampling.power(values.sub_(low).div_(high - low), k).mul_((high - low) * c).add_(low)
        values.masked_fill_(zeros, 0.0)
        part.copy_(values)


def _on_meta(inputs: list[Any]) -> bool:
    return any(isinstance(x, torch.Tensor) and x.device.type == "meta" for x in inputs)


def _work_dtype(device: torch.device) -> torch.dtype:
    return torch.float64 if device.type == "cpu" else torch.float32


def _unit(seed: int, label: str) -> float:
    """A number in [0, 1) derived from ``seed`` and ``label`` (one-way: the seed is the evaluation's secret)."""
    return _derived(seed, label) / float(1 << 53)


def _derived(seed: int, label: str) -> int:
    digest = hashlib.blake2b(f"kernelbench-distribution|{label}|{seed}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 11


# -- sensitivity -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Projected:
    """Random projections of an output and of its reference (``PROJECTIONS`` each, float64)."""

    output: torch.Tensor
    reference: torch.Tensor


class Sensitivity:
    """The ``rescaled`` config's projections, kept until its ``perturbed`` twin (same seed) is judged; then the
    change of the output's projections must follow the change of the reference's. Projection vectors come from a
    seed drawn in the judging process (the checker), which the candidate never sees."""

    def __init__(self, projection_seed: int) -> None:
        self.projection_seed = projection_seed
        self._base: OrderedDict[int, Projected] = OrderedDict()

    def remember(self, seed: int, output: torch.Tensor, expected: torch.Tensor) -> None:
        self._base[seed] = project(output, expected, self.projection_seed)
        while len(self._base) > REMEMBERED:
            self._base.popitem(last=False)

    def judge(self, seed: int, output: torch.Tensor, expected: torch.Tensor) -> str | None:
        """Why the output's change does not follow the reference's ('' or None when it does, or cannot be judged)."""
        base = self._base.pop(seed, None)
        if base is None or output.shape != expected.shape:
            return None
        now = project(output, expected, self.projection_seed)
        wanted = now.reference - base.reference
        got = now.output - base.output
        scale = float(now.reference.norm())
        change = float(wanted.norm())
        if change < JUDGED_CHANGE * scale:
            return None
        off = float((got - wanted).norm())
        if off <= TRACKING * change + NOISE * scale:
            return None
        return (
            f"perturbing a block of 1/{BLOCK_FRACTION} of the largest input moved the reference's projections by "
            f"{change:.3g} and the output's by {float(got.norm()):.3g} ({off:.3g} apart; at most "
            f"{TRACKING * change + NOISE * scale:.3g} allowed): the output does not follow that part of the input"
        )


def project(output: torch.Tensor, expected: torch.Tensor, seed: int) -> Projected:
    """``PROJECTIONS`` random Gaussian projections of ``output`` and ``expected`` (the same vectors), in chunks."""
    generator = torch.Generator(device=expected.device).manual_seed(seed)
    flat_out, flat_ref = output.detach().reshape(-1), expected.detach().reshape(-1)
    got = torch.zeros(PROJECTIONS, dtype=torch.float64, device=expected.device)
    want = torch.zeros_like(got)
    for start in range(0, flat_ref.numel(), PROJECTION_CHUNK):
        ref = _finite(flat_ref[start : start + PROJECTION_CHUNK])
        out = _finite(flat_out[start : start + PROJECTION_CHUNK].to(expected.device))
        vectors = torch.randn(
            PROJECTIONS, ref.numel(), generator=generator, device=expected.device, dtype=torch.float64
        )
        got += vectors @ out
        want += vectors @ ref
    return Projected(output=got.cpu(), reference=want.cpu())


def _finite(values: torch.Tensor) -> torch.Tensor:
    wide = values.to(torch.float64)
    return torch.nan_to_num(wide, nan=0.0, posinf=0.0, neginf=0.0)


__all__ = [
    "DISTRIBUTIONS",
    "GET_INPUTS",
    "PERTURBED",
    "RESCALED",
    "TIMED",
    "Sensitivity",
    "perturb",
    "rescale",
    "secret_shape",
    "timed_distribution",
]
