"""How a KernelBench output is judged: KernelBench's tolerance, made to scale with the output, and named failures.

Tolerance. KernelBench compares with ``torch.allclose(out, ref, atol=tol, rtol=tol)`` (tol = 1e-4 for float32,
1e-2 for float16/bfloat16). Its absolute term is a fixed floor, so an output whose values are all far below it
(a softmax over 393216 columns, about 2.5e-6 each) passes whatever it holds: a constant 1/N passes. Here an element
passes when ``|out - ref| <= tol * |ref| + tol * min(1, scale)``, ``scale`` being the root mean square of the
reference output. For outputs of magnitude 1 or more this is KernelBench's own test; for smaller outputs the
absolute floor shrinks with them, so the check is the same whatever the output's units, and an honest float32
kernel (errors about 1e-6 of the output's scale) passes as before. Integer and boolean outputs compare exactly.

Named failures (``Mismatch.check``), so a sweep can count what each check caught:

- ``output_is_input``: the output equals one of the inputs (identity: ReLU returning its input);
- ``insensitive_output``: the output equals the candidate's output on another config whose reference differs (the
  result does not depend on the input);
- ``input_distribution``: failed on one of the extra input distributions (``variants``), not on ``get_inputs()``;
- ``scaled_tolerance``: within KernelBench's own ``allclose``, but not within the tolerance scaled to the output.

``check_of`` reads which of these (or of the static rules, or ``output_aliases_input``) failed an evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ksearch.contracts.evaluation import Evaluation, Mismatch, Verdict
from ksearch.contracts.work import WORK_RULES
from ksearch.tasks.base import tolerance_mismatch
from ksearch.tasks.kernelbench.precision import ROUNDING_MARGIN, Rounding
from ksearch.tasks.kernelbench.streams import CONSTRUCTION_DRAWS

CHECK_CHUNK = 1 << 24
SAMPLE = 4096
"""Elements of an input or output remembered to recognise it again (evenly spaced over the tensor)."""
SCALED_TOLERANCE = "scaled_tolerance"
INPUT_DISTRIBUTION = "input_distribution"
OUTPUT_IS_INPUT = "output_is_input"
INSENSITIVE_OUTPUT = "insensitive_output"
OUTPUT_ALIASES_INPUT = "output_aliases_input"
REFERENCE_PRECISION = "reference_precision"
SENSITIVITY = "sensitivity"
STATIC_RULES = ("reference_op", "no_custom_kernel", "reference_fallback")
"""The integrity rules that keep KernelBench results computed by the candidate (``integrity.reference_ops``)."""
RUN_TIME_RULES = (CONSTRUCTION_DRAWS, *WORK_RULES)
"""Rules judged while the candidate runs: its construction's random draws (``streams``), and where its work
happens (the evaluator's trace and ghost replay, ``ksearch.contracts.work``)."""
CHECKS = (
    *STATIC_RULES,
    *RUN_TIME_RULES,
    OUTPUT_ALIASES_INPUT,
    OUTPUT_IS_INPUT,
    INSENSITIVE_OUTPUT,
    INPUT_DISTRIBUTION,
    SENSITIVITY,
    SCALED_TOLERANCE,
    REFERENCE_PRECISION,
)
"""Every check issues 36 and 60 added to KernelBench tasks, in the order a sweep reports them."""


def check_of(evaluation: Evaluation) -> str | None:
    """The KernelBench check (``CHECKS``) that failed ``evaluation``, if one did."""
    if evaluation.rejection is not None and evaluation.rejection.rule in (*STATIC_RULES, *RUN_TIME_RULES):
        return evaluation.rejection.rule
    if evaluation.mismatch is not None and evaluation.mismatch.check in CHECKS:
        return evaluation.mismatch.check
    if evaluation.verdict == Verdict.RUNTIME_ERROR and f"{OUTPUT_ALIASES_INPUT}:" in evaluation.log:
        return OUTPUT_ALIASES_INPUT
    return None


def output_scale(expected: torch.Tensor) -> float:
    """Root mean square of the finite values of ``expected`` (0.0 when there are none), in chunks."""
    flat = expected.detach().reshape(-1)
    total, count = 0.0, 0
    for start in range(0, flat.numel(), CHECK_CHUNK):
        chunk = flat[start : start + CHECK_CHUNK].to(torch.float64)
        finite = chunk[torch.isfinite(chunk)]
        total += float(finite.square().sum())
        count += finite.numel()
    return math.sqrt(total / count) if count else 0.0


def scaled_mismatch(
    where: str, got: torch.Tensor, expected: torch.Tensor, tol: float, rounding: Rounding | None = None
) -> Mismatch | None:
    """``tolerance_mismatch`` with the absolute floor scaled to the output and, where ``expected`` is the float64
    reference rounded to the output's dtype (``precision``), widened to ``ROUNDING_MARGIN`` times the rounding of
    the problem's own result and never below what that result needs itself. The mismatch says when KernelBench's
    plain ``allclose`` would have passed it (``check=scaled_tolerance``) and when the problem's own float32 result
    misses the base tolerance on these inputs too (``check=reference_precision``)."""
    if not expected.is_floating_point() and not expected.is_complex():
        return tolerance_mismatch(where, got, expected, 0.0, 0.0)
    scale = output_scale(expected)
    base = max(tol * min(1.0, scale), 1e-30)
    floor = base
    if rounding is not None:
        floor = max(base, ROUNDING_MARGIN * rounding.rms, 2.0 * rounding.needed_floor)
    mismatch = tolerance_mismatch(where, got, expected, floor, tol)
    if mismatch is None:
        return None
    if rounding is not None and floor > base:
        reference_misses = rounding.needed_floor > base
        note = (
            f" (the absolute tolerance is raised from {base:.3g} to {floor:.3g} for the op's own float32 rounding: "
            f"PyTorch's float32 result differs from the float64 reference by {rounding.rms:.3g} rms"
            + (
                f" and misses the base tolerance by up to {rounding.needed_floor:.3g} itself"
                if reference_misses
                else ""
            )
            + "; the kernel's error is beyond that)"
        )
        update: dict[str, object] = {"message": mismatch.message + note}
        if reference_misses:
            update["check"] = REFERENCE_PRECISION
        return mismatch.model_copy(update=update)
    if floor >= tol:
        return mismatch
    if tolerance_mismatch(where, got, expected, tol, tol) is None:
        note = (
            f" (KernelBench's absolute atol={tol:g} would pass it: the output's scale is {scale:.3g}, so the "
            f"absolute tolerance here is {floor:.3g})"
        )
        return mismatch.model_copy(update={"message": mismatch.message + note, "check": SCALED_TOLERANCE})
    return mismatch


@dataclass(frozen=True)
class Fingerprint:
    """A tensor's shape, dtype and evenly spaced sample of its values: enough to recognise it again."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    sample: torch.Tensor

    @classmethod
    def of(cls, tensor: torch.Tensor) -> Fingerprint:
        flat = tensor.detach().reshape(-1)
        step = max(1, flat.numel() // SAMPLE)
        return cls(tuple(tensor.shape), tensor.dtype, flat[::step][:SAMPLE].to("cpu", copy=True))

    def same(self, other: Fingerprint) -> bool:
        return self.shape == other.shape and self.dtype == other.dtype and torch.equal(self.sample, other.sample)


__all__ = [
    "CHECKS",
    "INPUT_DISTRIBUTION",
    "INSENSITIVE_OUTPUT",
    "OUTPUT_ALIASES_INPUT",
    "OUTPUT_IS_INPUT",
    "SCALED_TOLERANCE",
    "Fingerprint",
    "check_of",
    "output_scale",
    "scaled_mismatch",
]
