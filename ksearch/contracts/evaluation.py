"""Typed results of evaluating one candidate: the verdict, per-config numbers and the environment it ran in."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ksearch.contracts.counters import CounterReport


class Verdict(StrEnum):
    """What happened to a candidate. Only ``passed`` candidates can become the best."""

    PASSED = "passed"
    """Correct on every test config (and timed on every benchmark config where the device can time)."""
    COMPILE_ERROR = "compile_error"
    """The code did not import, build or JIT-compile, or lacks the entry point."""
    RUNTIME_ERROR = "runtime_error"
    """An exception was raised while running the kernel."""
    INCORRECT = "incorrect"
    """Ran, but the output differs from the reference beyond tolerance (or has the wrong shape/dtype/device)."""
    TIMEOUT = "timeout"
    """Exceeded the compile or run time limit; the process group was killed."""
    REJECTED = "rejected"
    """Broke an integrity rule (the rule and its evidence are in ``rejection``)."""
    CRASHED = "crashed"
    """The worker process died (segfault, illegal address, OOM, os._exit) without reporting."""


class Mismatch(BaseModel):
    """Where a candidate's output is furthest from the reference."""

    model_config = ConfigDict(extra="forbid")

    config: str
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    worst_index: list[int] = Field(default_factory=list)
    message: str = ""
    check: str = ""
    """The named check the output failed (a task's work check, e.g. KernelBench's ``output_is_input``), or empty
    for a plain tolerance failure."""


class Timing(BaseModel):
    """Latency of one benchmark config, all in milliseconds."""

    model_config = ConfigDict(extra="forbid")

    config: str
    median_ms: float
    mean_ms: float
    stdev_ms: float
    samples: int
    method: str = "robust"
    headline: str = "median"
    """The statistic the method's upstream reports ('median' or 'mean'); the task's score uses it."""
    windows_left_out: int = 0
    """Timed windows judged but left out of these statistics: those an audit of the checker followed, and the one
    right after each audit's gap (``ledger.scored_samples``)."""

    @property
    def headline_ms(self) -> float:
        """The statistic the score uses for this config (the method's upstream statistic)."""
        return self.mean_ms if self.headline == "mean" else self.median_ms

    def describe(self) -> str:
        """One line for prompts and terminals: config, the headline statistic (the one the score uses) first, the
        other one, spread and sample count."""
        other = f"median {self.median_ms:.4f}" if self.headline == "mean" else f"mean {self.mean_ms:.4f}"
        left_out = (
            f" (+{self.windows_left_out} right after an output check, not counted)" if self.windows_left_out else ""
        )
        return (
            f"{self.config}: {self.headline} {self.headline_ms:.4f} ms ({other}), stdev {self.stdev_ms:.4f} ms, "
            f"n={self.samples}{left_out}"
        )


class Rejection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rule: str
    evidence: str


class YardstickReading(BaseModel):
    """One benchmark config timed two ways in the candidate's own process, rounds alternating (``--yardstick``): a
    bare GPU MODE benchmark loop (``ksearch.tools.timing.yardstick``) and ksearch's timing method. A diagnostic for
    auditing the harness, never a score: the machine's state (a host that launches slower for a few seconds, say)
    hits both sides alike, so their ratio isolates what ksearch's procedure itself changes."""

    model_config = ConfigDict(extra="forbid")

    config: str
    bare_ms: list[float]
    """Mean of each round's bare loop."""
    ksearch_ms: list[float]
    """Mean of each round's run of the timing method (its headline statistic is the mean for GPU MODE methods)."""

    @property
    def bare_mean_ms(self) -> float:
        return sum(self.bare_ms) / len(self.bare_ms)

    @property
    def ksearch_mean_ms(self) -> float:
        return sum(self.ksearch_ms) / len(self.ksearch_ms)

    @property
    def ratio(self) -> float:
        """ksearch / bare, from the means over rounds (1.0 reads alike)."""
        return self.ksearch_mean_ms / self.bare_mean_ms


class KernelResources(BaseModel):
    """What one compiled Triton kernel (one specialisation) asks of the GPU: the figures its launch must fit."""

    model_config = ConfigDict(extra="forbid")

    name: str
    shared_bytes: int
    """Shared memory per block, bytes (Triton's ``metadata.shared``)."""
    registers: int | None = None
    """32-bit registers per thread (the cubin's, or the driver's where the kernel was loaded)."""
    spilled_bytes: int | None = None
    """Local memory per thread, bytes: register spills and the stack (0 for most kernels)."""
    num_warps: int
    num_stages: int
    tuned: bool = False
    """Compiled as one config of an ``@triton.autotune`` kernel: the autotuner skips a config that does not fit."""

    def describe(self) -> str:
        regs = f"{self.registers} registers/thread" if self.registers is not None else "registers unknown"
        spill = f", {self.spilled_bytes} B spilled/thread" if self.spilled_bytes else ""
        tuned = " (autotune config)" if self.tuned else ""
        return (
            f"{self.name}{tuned}: {self.shared_bytes} B shared memory, {regs}{spill}, num_warps={self.num_warps}, "
            f"num_stages={self.num_stages}"
        )


class RooflinePoint(BaseModel):
    """Where one timed shape sits against the GPU's roofline: the time its minimal bytes and flops need at peak."""

    model_config = ConfigDict(extra="forbid")

    config: str
    measured_ms: float
    """The timing's headline statistic (the one the score uses)."""
    floor_ms: float
    """max(memory_ms, compute_ms): no kernel can be faster on this GPU."""
    memory_ms: float
    """The task's minimal bytes moved at peak bandwidth."""
    compute_ms: float
    """The task's flops at the dense peak of ``dtype``."""
    bound: str
    """'memory' or 'compute': which floor is higher."""
    fraction: float
    """floor_ms / measured_ms: 1.0 is at the roofline."""
    dtype: str
    gpu: str

    def describe(self) -> str:
        return (
            f"{self.config}: {self.measured_ms:.4g} ms against a floor of {self.floor_ms:.4g} ms, {self.bound}-bound "
            f"(memory {self.memory_ms:.4g} ms, {self.dtype} compute {self.compute_ms:.4g} ms), "
            f"{self.fraction:.0%} of roofline"
        )


class ProfiledKernel(BaseModel):
    """One kernel (by name) in the profile of one call."""

    model_config = ConfigDict(extra="forbid")

    name: str
    launches: int
    time_ms: float
    """Device time of all its launches in the call."""
    share: float
    """time_ms / the call's wall time."""


class ShapeProfile(BaseModel):
    """A profile of ONE call of the candidate on one timed shape, taken after timing (never a timed sample)."""

    model_config = ConfigDict(extra="forbid")

    config: str
    call_ms: float
    """Wall time of the profiled call, synchronised at both ends (profiler overhead included)."""
    kernel_ms: float
    """Device time covered by at least one kernel."""
    host_gap_ms: float
    """call_ms - kernel_ms: launch overhead, host work and idle GPU time."""
    launches: int
    kernels: list[ProfiledKernel] = Field(default_factory=list)
    """The kernels that took the most time, longest first (at most ``PROFILE_KERNELS``)."""
    other_kernels: int = 0
    """Further distinct kernels not listed."""

    def describe(self) -> str:
        head = (
            f"{self.config}: one call {self.call_ms:.4g} ms, kernels busy {self.kernel_ms:.4g} ms in "
            f"{self.launches} launches, host gap {self.host_gap_ms:.4g} ms"
        )
        rows = [f"    {k.name[:80]}: {k.launches}x, {k.time_ms:.4g} ms ({k.share:.0%})" for k in self.kernels]
        if self.other_kernels:
            rows.append(f"    ... {self.other_kernels} more kernels")
        return "\n".join([head, *rows])


class TunedChoice(BaseModel):
    """The config an ``@triton.autotune`` kernel kept at one timed shape: the best of its grid by Triton's benchmark,
    run before the shape's timed calls. Read in the candidate's process: a diagnostic, never a verdict."""

    model_config = ConfigDict(extra="forbid")

    config: str
    """The benchmark config (timed shape)."""
    kernel: str
    choice: str
    """The kept config's parameters: ``BLOCK_M=64, num_warps=4, num_stages=1``."""
    configs: int
    """How many configs the autotuner chose among."""

    def describe(self) -> str:
        return f"{self.kernel}: {self.choice} (of {self.configs} configs)"


class Evaluation(BaseModel):
    """One evaluation of one candidate on one device with one harness version."""

    model_config = ConfigDict(extra="forbid")

    verdict: Verdict
    device: str
    """'cpu' (Triton interpreter: correctness only) or the GPU's name."""
    timed: bool = False
    """False on the CPU interpreter: no latency, no score."""
    score: float | None = None
    """Task score, higher is better (e.g. 1 / geometric-mean latency in ms); None unless passed and timed."""
    latency_ms: float | None = None
    """The task's aggregate latency (e.g. geometric mean over benchmark configs)."""
    timings: list[Timing] = Field(default_factory=list)
    configs_passed: int = 0
    configs_total: int = 0
    mismatch: Mismatch | None = None
    rejection: Rejection | None = None
    log: str = ""
    """Trimmed to what an LLM needs to fix the kernel."""
    duration_s: float = 0.0
    environment: dict[str, str] = Field(default_factory=dict)
    yardstick: list[YardstickReading] = Field(default_factory=list)
    """Only when asked for (``ksearch eval --yardstick N``): each timed config against a bare upstream loop."""
    resources: list[KernelResources] = Field(default_factory=list)
    """Each Triton kernel the candidate compiled, with what it asks of the GPU (diagnostics; on the CPU with a target
    GPU, a kernel over the target's limits makes the verdict a compile error)."""
    roofline: list[RooflinePoint] = Field(default_factory=list)
    """Per timed shape, its position against the GPU's roofline (diagnostics, never a score)."""
    profile: list[ShapeProfile] = Field(default_factory=list)
    """Per timed shape, the kernels of one call, profiled after timing (diagnostics, never a score)."""
    counters: CounterReport | None = None
    """Nsight Compute's hardware counters of a few shapes, read after the verdict by a trusted process, or why there
    are none (diagnostics, never a score); None when nobody asked. The store keeps them beside the evaluation."""
    tuning: list[TunedChoice] = Field(default_factory=list)
    """Per timed shape, the config each ``@triton.autotune`` kernel kept there (a launch-parameter sweep's result)."""

    @model_validator(mode="after")
    def _status_matches_fields(self) -> Evaluation:
        if self.verdict != Verdict.PASSED and (self.score is not None or self.timings):
            raise ValueError("only a passed evaluation may carry a score or timings")
        if self.score is not None and not self.timed:
            raise ValueError("a score needs a timed evaluation")
        if self.verdict == Verdict.REJECTED and self.rejection is None:
            raise ValueError("a rejected evaluation must say which rule it broke")
        return self

    @property
    def passed(self) -> bool:
        return self.verdict == Verdict.PASSED

    def summary(self) -> str:
        """One line for tables and prompts."""
        if self.passed:
            if self.timed and self.latency_ms is not None:
                return (
                    f"passed {self.configs_passed}/{self.configs_total} configs, {self.latency_ms:.4f} ms on "
                    f"{self.device}"
                )
            return (
                f"passed {self.configs_passed}/{self.configs_total} configs on {self.device} (correctness only, not "
                "timed)"
            )
        detail = ""
        if self.mismatch is not None:
            detail = self.mismatch.message
        elif self.rejection is not None:
            detail = f"rule {self.rejection.rule}"
        elif self.log.strip():
            detail = self.log.strip().splitlines()[0][:160]
        return f"{self.verdict.value} on {self.device}" + (f": {detail}" if detail else "")


class ConfigComparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: str
    incumbent_median_ms: float
    challenger_median_ms: float
    ratio: float
    """incumbent / challenger (geometric mean over rounds): above 1 means the challenger is faster."""
    ci_low: float
    ci_high: float


class Comparison(BaseModel):
    """A paired, interleaved timing of two correct candidates on the same GPU."""

    model_config = ConfigDict(extra="forbid")

    per_config: list[ConfigComparison]
    speedup: float
    """Geometric mean over configs of incumbent / challenger."""
    ci_low: float
    ci_high: float
    improved: bool
    """The whole 95 % confidence interval of the speedup is above 1."""
    rounds: int = 0
    device: str = ""
    method: str = "paired robust blocks, A B / B A interleaved, t-interval over per-round log speedups"
