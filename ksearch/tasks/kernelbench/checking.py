"""How a KernelBench output is judged against its expectation, and what the judging process remembers between
configs to name a failure: the inputs each reference saw, the outputs judged so far in the evaluation, the
``rescaled`` config's projections (``distributions.Sensitivity``) and each expected output's rounding
(``precision``)."""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from ksearch.contracts.evaluation import Mismatch
from ksearch.tasks._loading import tolerance_for
from ksearch.tasks.base import TaskConfig, all_finite
from ksearch.tasks.kernelbench.distributions import DISTRIBUTIONS, PERTURBED, RESCALED, Sensitivity
from ksearch.tasks.kernelbench.judging import (
    INPUT_DISTRIBUTION,
    INSENSITIVE_OUTPUT,
    OUTPUT_IS_INPUT,
    SENSITIVITY,
    Fingerprint,
    scaled_mismatch,
)
from ksearch.tasks.kernelbench.precision import RoundingTable
from ksearch.tasks.kernelbench.variants import VARIANTS

REMEMBERED_INPUTS = 64
FormMismatch = Callable[[str, Any, torch.Tensor], "Mismatch | None"]


class OutputJudge:
    """KernelBench's per-dtype tolerance, scaled to the output and widened for the op's own rounding
    (``judging.scaled_mismatch``); tuple/list outputs element by element; a variant on which the reference is not
    finite is not judged; sensitivity on the ``perturbed`` config; failures of a work check named."""

    def __init__(self, first_config: str, form_mismatch: FormMismatch) -> None:
        self.first_config = first_config
        """A new evaluation starts with this config: the outputs remembered from the last one are dropped."""
        self.form_mismatch = form_mismatch
        self.roundings = RoundingTable()
        """Each float64-based expected output's ``precision.Rounding`` (set by ``expected``, read here)."""
        self.sensitivity = Sensitivity(secrets.randbits(62))
        self._input_prints: OrderedDict[tuple[str, int], list[Fingerprint]] = OrderedDict()
        self._output_prints: list[tuple[str, Fingerprint, Fingerprint]] = []

    def check(self, config: TaskConfig, output: Any, expected: Any) -> Mismatch | None:
        if isinstance(expected, (tuple, list)):
            if not isinstance(output, (tuple, list)) or len(output) != len(expected):
                got = (
                    f"{type(output).__qualname__} of {len(output)}"
                    if isinstance(output, (tuple, list))
                    else type(output).__qualname__
                )
                return Mismatch(
                    config=config.name,
                    message=f"{config.name}: expected a sequence of {len(expected)} outputs, got {got}",
                )
            for index, (out, exp) in enumerate(zip(output, expected, strict=True)):
                mismatch = self._check_one(config, out, exp, tracked=False)
                if mismatch is not None:
                    return mismatch.model_copy(update={"message": f"output {index}: {mismatch.message}"})
            return None
        return self._check_one(config, output, expected, tracked=True)

    def _check_one(self, config: TaskConfig, output: Any, expected: Any, *, tracked: bool) -> Mismatch | None:
        """One output against its expectation; ``tracked``: a single-tensor output, judged for sensitivity too."""
        if not isinstance(expected, torch.Tensor):
            if output == expected:
                return None
            return Mismatch(config=config.name, message=f"{config.name}: got {output!r}, expected {expected!r}")
        if (expected.is_floating_point() or expected.is_complex()) and not all_finite(expected):
            if config.distribution in VARIANTS:
                return None  # the op does not allow this distribution (variants' docstring)
            return Mismatch(
                config=config.name,
                message=f"{config.name}: the reference's output is not finite on "
                "get_inputs(), so no finite output matches it (as in KernelBench's allclose)",
            )
        mismatch = self.form_mismatch(config.name, output, expected)
        if mismatch is None and output.numel():
            tol = tolerance_for(expected.dtype)
            mismatch = scaled_mismatch(
                config.name, output.detach(), expected.detach(), tol, self.roundings.get(expected)
            )
        if mismatch is None and tracked and output.numel():
            mismatch = self._track(config, output, expected)
        printed = Fingerprint.of(output) if isinstance(output, torch.Tensor) and output.numel() else None
        named = self._name_failure(config, printed, expected, mismatch) if mismatch is not None else None
        if printed is not None:
            self._remember_output(config, printed, Fingerprint.of(expected))
        return named

    def _track(self, config: TaskConfig, output: torch.Tensor, expected: torch.Tensor) -> Mismatch | None:
        """Sensitivity (``distributions``): remember the ``rescaled`` output, judge the ``perturbed`` one's change."""
        if config.distribution == RESCALED:
            self.sensitivity.remember(config.seed, output.detach(), expected.detach())
        elif config.distribution == PERTURBED:
            reason = self.sensitivity.judge(config.seed, output.detach(), expected.detach())
            if reason:
                return Mismatch(config=config.name, message=f"{config.name}: {reason}", check=SENSITIVITY)
        return None

    def remember_inputs(self, config: TaskConfig, inputs: list[Any]) -> None:
        """Fingerprints of the inputs the reference saw (the checker judges against them next): bounded."""
        self._input_prints[(config.name, config.seed)] = [
            Fingerprint.of(x) for x in inputs if isinstance(x, torch.Tensor) and x.numel()
        ]
        while len(self._input_prints) > REMEMBERED_INPUTS:
            self._input_prints.popitem(last=False)

    def _remember_output(self, config: TaskConfig, output: Fingerprint, expected: Fingerprint) -> None:
        if config.name == self.first_config:
            self._output_prints.clear()
        self._output_prints.append((config.name, output, expected))

    def _name_failure(
        self, config: TaskConfig, output: Fingerprint | None, expected: torch.Tensor, mismatch: Mismatch
    ) -> Mismatch:
        """The mismatch with the work check it shows failed, where one applies (``judging``'s docstring)."""
        check, detail = mismatch.check, ""
        if output is not None:
            inputs = self._input_prints.get((config.name, config.seed), [])
            same_input = next((i for i, fp in enumerate(inputs) if fp.same(output)), None)
            wanted = Fingerprint.of(expected)
            earlier = next(
                (
                    name
                    for name, out, exp in self._output_prints
                    if name != config.name and out.same(output) and not exp.same(wanted)
                ),
                None,
            )
            if same_input is not None:
                check, detail = OUTPUT_IS_INPUT, f"the output equals input {same_input}: no work was done on it"
            elif earlier is not None:
                check, detail = (
                    INSENSITIVE_OUTPUT,
                    (
                        f"the output equals the output on {earlier}, whose reference "
                        "differs: it does not depend on the inputs"
                    ),
                )
        drawn = VARIANTS.get(config.distribution) or DISTRIBUTIONS.get(config.distribution)
        if not check and drawn:
            check = INPUT_DISTRIBUTION
            detail = (
                f"inputs drawn from {drawn} instead of get_inputs(): the kernel must compute the op for any values "
                "of the inputs' shapes and dtypes"
            )
        if not check:
            return mismatch
        message = mismatch.message + (f" [{check}: {detail}]" if detail else "")
        return mismatch.model_copy(update={"check": check, "message": message})


__all__ = ["OutputJudge"]
