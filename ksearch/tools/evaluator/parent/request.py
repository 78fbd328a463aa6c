"""What the caller asks of the evaluator: one candidate on one device, with limits and a timing method."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ksearch import settings
from ksearch.contracts.candidate import Candidate
from ksearch.tools import timing as timing_mod
from ksearch.tools.gpu_specs import gpu_spec

HARNESS_VERSION = "ksearch-evaluator-16"
"""Part of the evaluation cache key: bump when a change could alter verdicts or timings."""
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")
CPU_TIMING = settings.CPU_TIMING
"""``KSEARCH_CPU_TIMING=1`` (tests only): timed evaluations on the CPU, with wall-clock 'events' on the host, so the
whole timing path (windows, the parent's ledger, audits) runs in CI. The numbers mean nothing as kernel times."""


class EvalRequest(BaseModel):
    """One candidate on one device. ``task`` defaults to the candidate's; ``timing`` to True except on CPU."""

    model_config = ConfigDict(extra="forbid")

    candidate: Candidate
    task: str = ""
    device: str = "cpu"
    """'cpu' (Triton interpreter, correctness only), 'cuda' or 'cuda:N'."""
    compile_timeout_s: float = Field(default=120.0, gt=0)
    """From a worker's start until it begins running configs: interpreter start-up, imports, module import."""
    run_timeout_s: float = Field(default=300.0, gt=0)
    """Per worker pass, from its first config to its end (Triton's JIT compiles at the first call)."""
    timing: bool = False
    timing_method: str | None = None
    """A method of ``ksearch.tools.timing`` the task supports; None for the task's default."""
    seed_salt: int | None = None
    """None (the default): a fresh secret salt per evaluation. Set only to reproduce one evaluation exactly."""
    yardstick_rounds: int = Field(default=0, ge=0, le=20)
    """A diagnostic: after timing, per benchmark config, this many rounds of a bare GPU MODE benchmark loop against
    the timing method in the candidate's process (``Evaluation.yardstick``). Needs timing with ``gpumode-benchmark``."""
    target_gpu: str | None = None
    """On the CPU: the GPU (a ``ksearch.tools.gpu_specs`` key, e.g. ``h100``) the kernel is written for. Its Triton
    kernels are compiled for that GPU ahead of time and a kernel over its limits is a compile error."""
    profile: bool = True
    """On a GPU, after timing: one profiled call per timed shape (``Evaluation.profile``; diagnostics only)."""
    harness_baseline: bool = False
    """The candidate is ksearch's own baseline (a task's reference, eager or ``torch.compile``d, or FlashInfer's
    production kernels), not untrusted code: the thread rule is off, since torch.compile keeps compile-worker threads
    alive, and the static rules of ``integrity.HARNESS_BASELINE_RULES`` (the reference's ops, a library's import) do
    not apply. Never set for LLM candidates."""

    @model_validator(mode="before")
    @classmethod
    def _default_timing(cls, data: Any) -> Any:
        if isinstance(data, dict) and "timing" not in data:
            data = {**data, "timing": data.get("device", "cpu") != "cpu"}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> EvalRequest:
        if not _DEVICE.match(self.device):
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', not {self.device!r}")
        if self.device == "cpu" and self.timing and not CPU_TIMING.is_on():
            raise ValueError("the CPU (Triton interpreter) cannot time kernels: use timing=False")
        if self.timing_method is not None and self.timing_method not in timing_mod.method_names():
            raise ValueError(
                f"unknown timing method {self.timing_method!r}; known methods: {', '.join(timing_mod.method_names())}"
            )
        if self.yardstick_rounds and not self.timing:
            raise ValueError("the yardstick compares timings: it needs a timed evaluation (a GPU)")
        if self.target_gpu is not None:
            if self.device != "cpu":
                raise ValueError("a target GPU is for evaluations on the CPU; on a GPU its own limits apply")
            self.target_gpu = gpu_spec(self.target_gpu).key
        if not self.task:
            self.task = self.candidate.task
        elif self.task != self.candidate.task:
            raise ValueError(f"request is for task {self.task!r} but the candidate is for {self.candidate.task!r}")
        return self
