"""What the KernelBench baselines run: the problem's own ``Model`` packaged as a candidate module.

KernelBench scores a solution by its speedup over the PyTorch reference (eager, or ``torch.compile``). The reference
is packaged here as a candidate module (the problem file's source plus ``ModelNew = Model``, or a ``ModelNew`` whose
forward is ``torch.compile``d), so that it can be timed by the same evaluator, on the same configs, seeds and timing
procedure as the candidates. Measuring and caching it is the job of ``ksearch.flows.baselines``: a task never calls
the evaluator.
"""

from __future__ import annotations

from ksearch.contracts.candidate import Candidate
from ksearch.tasks.kernelbench import KernelBenchTask
from ksearch.tasks.keyless import DescribedTask

BASELINE_MODES: tuple[str, ...] = ("eager", "compile")
BASELINE_VERSION = "kb-baseline-1"
"""Part of the baseline cache key: bump when the packaging of the reference changes."""

_EAGER = """

# --- added by ksearch: the reference itself, timed as the eager PyTorch baseline ---
ModelNew = Model
"""
_COMPILE = """

# --- added by ksearch: the reference under torch.compile (default mode), timed as the compiled baseline ---
import torch as _ksearch_torch


class ModelNew(Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ksearch_compiled_forward = _ksearch_torch.compile(super().forward)

    def forward(self, *inputs):
        return self._ksearch_compiled_forward(*inputs)
"""


def baseline_code(task: KernelBenchTask | DescribedTask, mode: str = "eager") -> str:
    if mode not in BASELINE_MODES:
        raise ValueError(f"baseline mode must be one of {', '.join(BASELINE_MODES)}, not {mode!r}")
    return task.source.rstrip() + "\n" + (_EAGER if mode == "eager" else _COMPILE)


def baseline_candidate(task: KernelBenchTask | DescribedTask, mode: str = "eager") -> Candidate:
    """The reference packaged as a candidate module for ``evaluate()``."""
    return Candidate(task=task.name, language="triton", code=baseline_code(task, mode), entry_point=task.entry_point)


__all__ = ["BASELINE_MODES", "BASELINE_VERSION", "baseline_candidate", "baseline_code"]
