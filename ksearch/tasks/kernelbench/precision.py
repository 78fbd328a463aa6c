"""The KernelBench reference in float64, and how far the problem's own float32 arithmetic lands from it.

KernelBench compares a kernel with the reference computed in the problem's dtype. For an op that sums K products
(a matmul, a convolution, a long reduction) that reference carries rounding of its own, about ``eps * sqrt(K)`` of
the summands' scale, so near zero it can be off by more than KernelBench's absolute tolerance: level 1's square
matmul on the ``large`` variant (U(-8, 8)) at N = 512 has elements where PyTorch's float32 result misses the float64
answer by ~1e-3 while the tolerance there is 1e-4, and even the exact answer rounded to float32 failed against it.

So the expected output is the reference computed in float64 (the same weights and inputs, promoted exactly) and
rounded to the problem's dtype: the answer exact to that dtype. How far PyTorch's own float32 result is from it
(``Rounding``) sets the part of the allowance that grows with the op's reduction length: ``judging.scaled_mismatch``
widens the absolute floor to ``ROUNDING_MARGIN`` times its root mean square, and never below what the float32
reference itself needs to pass, so an honest kernel with float32 accumulation passes wherever PyTorch's does, while
TF32 (8192 times float32's rounding) or fp16 arithmetic still fails. Where the problem's reference cannot run in
float64 (an op without a float64 kernel, a cast inside ``forward``), or the float64 copy would not fit the device
(``DEVICE_SHARE``), the expected output is the problem's own and the allowance KernelBench's scaled one.

Pure functions of tensors; the task keeps each expected output's ``Rounding`` beside it (``RoundingTable``).
"""

from __future__ import annotations

import copy
import math
import weakref
from dataclasses import dataclass
from typing import Any

import torch

CHUNK = 1 << 24
ROUNDING_MARGIN = 32.0
"""The absolute floor is at least this many times the root mean square of the float32 reference's own rounding
(a kernel's worst element sits ~5 such deviations out over a million elements; the rest is room for a different
summation order). TF32 rounds 8192 times coarser than float32, fp16 8192 times too: both stay outside."""
DEVICE_SHARE = 0.25
"""The float64 reference is computed only when its inputs and output (and the float32 ones kept beside them) take
at most this share of the device memory free at the time; otherwise the problem's own dtype is used."""


@dataclass(frozen=True)
class Rounding:
    """How far the problem's own result (in its dtype) is from the float64 reference, for one output tensor."""

    rms: float
    """Root mean square of ``reference_in_dtype - float64_reference`` over the finite elements."""
    needed_floor: float
    """The absolute floor the problem's own result needs to pass ``|own - exact| <= tol * |exact| + floor``."""


class RoundingTable:
    """Expected output tensor -> its ``Rounding``, held as long as the tensor lives (the checker caches references).
    Keyed by identity: a tensor's ``==`` compares values."""

    def __init__(self) -> None:
        self._table: dict[int, tuple[weakref.ref[torch.Tensor], Rounding]] = {}

    def put(self, expected: torch.Tensor, rounding: Rounding) -> None:
        key = id(expected)
        self._table[key] = (weakref.ref(expected, lambda _gone: self._table.pop(key, None)), rounding)

    def get(self, expected: Any) -> Rounding | None:
        entry = self._table.get(id(expected))
        return entry[1] if entry is not None and entry[0]() is expected else None


def float64_reference(model: torch.nn.Module, inputs: list[Any]) -> Any:
    """``model`` on ``inputs`` with every floating-point parameter, buffer and input promoted to float64 (exactly),
    or None where that cannot run, does not fit (``DEVICE_SHARE``) or does not compute in float64."""
    floats = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    if not floats or any(x.dtype == torch.float64 for x in floats):
        return None
    if not _fits(model, floats):
        return None
    try:
        promoted = copy.deepcopy(model).to(torch.float64)
        wide = [x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        with torch.no_grad():
            result = promoted(*wide)
    except (RuntimeError, TypeError, NotImplementedError):
        return None  # an op without a float64 kernel, or a model that insists on its dtype
    tensors = result if isinstance(result, (tuple, list)) else [result]
    if not any(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in tensors):
        return None
    return result


def exact_in_dtype(own: Any, wide: Any, tol_of: Any) -> tuple[Any, list[tuple[torch.Tensor, Rounding]]]:
    """The expected output: ``wide`` (float64) rounded to the dtypes of ``own`` (the problem's result), where their
    structure matches; with each rounded tensor's ``Rounding`` (``tol_of(dtype)`` gives the base tolerance)."""
    if isinstance(own, (tuple, list)):
        if not isinstance(wide, (tuple, list)) or len(wide) != len(own):
            return own, []
        parts, roundings = [], []
        for o, w in zip(own, wide, strict=True):
            part, found = exact_in_dtype(o, w, tol_of)
            parts.append(part)
            roundings.extend(found)
        return type(own)(parts) if isinstance(own, tuple) else parts, roundings
    if not _comparable(own, wide):
        return own, []
    exact = wide.to(own.dtype)
    return exact, [(exact, rounding_of(own, wide, tol_of(own.dtype)))]


def rounding_of(own: torch.Tensor, wide: torch.Tensor, tol: float) -> Rounding:
    """``Rounding`` of the problem's result ``own`` against the float64 ``wide``, in chunks."""
    flat_own, flat_wide = own.detach().reshape(-1), wide.detach().reshape(-1)
    total, count, needed = 0.0, 0, 0.0
    for start in range(0, flat_own.numel(), CHUNK):
        o = flat_own[start : start + CHUNK].to(torch.float64)
        w = flat_wide[start : start + CHUNK]
        finite = torch.isfinite(o) & torch.isfinite(w)
        diff = (o - w)[finite]
        total += float(diff.square().sum())
        count += diff.numel()
        if diff.numel():
            needed = max(needed, float((diff.abs() - tol * w[finite].abs()).max()))
    return Rounding(rms=math.sqrt(total / count) if count else 0.0, needed_floor=max(needed, 0.0))


def _comparable(own: Any, wide: Any) -> bool:
    return (
        isinstance(own, torch.Tensor)
        and isinstance(wide, torch.Tensor)
        and own.is_floating_point()
        and own.dtype != torch.float64
        and wide.dtype == torch.float64
        and own.shape == wide.shape
    )


def _fits(model: torch.nn.Module, floats: list[torch.Tensor]) -> bool:
    device = floats[0].device
    if device.type != "cuda":
        return True  # the CPU checks problems reduced to a few MiB (``sizes``)
    need = 3 * sum(x.numel() for x in floats) * 8  # float64 inputs, and an output of about their size twice over
    need += sum(p.numel() for p in model.parameters()) * 8
    free, _total = torch.cuda.mem_get_info(device)
    return need <= DEVICE_SHARE * free


__all__ = ["ROUNDING_MARGIN", "Rounding", "RoundingTable", "exact_in_dtype", "float64_reference", "rounding_of"]
