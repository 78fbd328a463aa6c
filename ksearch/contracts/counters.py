"""Hardware counters of a candidate's kernels, read by Nsight Compute (``ncu``) outside the candidate's process.

A diagnostic for the model: per profiled kernel, speed-of-light compute and memory throughput, achieved against
theoretical occupancy and what limits it, DRAM and L2 throughput, tensor-pipe activity, the top warp-stall reasons,
registers and shared memory; per profiled shape, the DRAM bytes its kernels moved against the task's minimum. It
never decides a verdict, a score or a promotion, and a report whose ``status`` is not ``collected`` says why.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

LATENCY_BOUND_PCT = 60.0
"""Below this share of peak on both compute and memory, a kernel is latency-bound (Nsight Compute's own guidance:
neither unit is busy, so the warps wait)."""


class CounterStatus(StrEnum):
    """Whether counters were read, and if not, why (each has a plain sentence in ``CounterReport.detail``)."""

    COLLECTED = "collected"
    NO_NCU = "no_ncu"
    """No Nsight Compute here (``ncu`` not on PATH, ``KSEARCH_NCU`` unset)."""
    NO_PERMISSION = "no_permission"
    """The driver refused the performance counters (``ERR_NVGPUCTRPERM``)."""
    NO_GPU = "no_gpu"
    """The device is the CPU (Triton's interpreter): there are no counters to read."""
    TIMEOUT = "timeout"
    """ncu and the candidate ran past the time limit and were killed."""
    FAILED = "failed"
    """ncu ran but gave no usable report (its own error, or the candidate's calls failed under it)."""
    OFF = "off"
    """Turned off for this run (``--no-counters``)."""
    SKIPPED = "skipped"
    """Not collected, to keep the run's counters under their share of its GPU time (``counters.budget.SHARE``)."""


class Stall(BaseModel):
    """One warp-stall reason of a kernel: warps waiting on it per issued instruction (Nsight Compute's
    ``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``)."""

    model_config = ConfigDict(extra="forbid")

    reason: str
    per_issue: float


class KernelCounters(BaseModel):
    """The counters of one kernel (by name) in one profiled call: figures of its longest launch, time of all."""

    model_config = ConfigDict(extra="forbid")

    config: str
    """The benchmark shape whose call launched it."""
    name: str
    launches: int = 1
    time_us: float | None = None
    """Device time of all its launches in the call under ncu (clocks locked to base: slower than the timing)."""
    compute_pct: float | None = None
    """Speed of light: SM throughput, % of peak (``sm__throughput``)."""
    memory_pct: float | None = None
    """Speed of light: memory throughput, % of peak (``gpu__compute_memory_throughput``: the busiest memory unit)."""
    dram_pct: float | None = None
    l2_pct: float | None = None
    l1_pct: float | None = None
    l2_hit_pct: float | None = None
    tensor_pct: float | None = None
    """The busiest tensor pipe, % of peak (0 when the kernel issues no tensor-core instruction)."""
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    occupancy_limiter: str = ""
    """The resource that caps the blocks per SM (registers, shared memory, warps, blocks, barriers), '' unknown."""
    registers: int | None = None
    """Per thread."""
    shared_bytes: int | None = None
    """Per block, static and dynamic."""
    block_size: int | None = None
    grid_size: int | None = None
    waves: float | None = None
    """Waves per SM of the grid."""
    dram_bytes: float | None = None
    """Read and written, all its launches in the call."""
    stalls: list[Stall] = Field(default_factory=list)
    """The largest stall reasons, largest first (at most three; 'selected' is no stall and is left out)."""

    @property
    def bound(self) -> str:
        """Its position against the roofline in Nsight Compute's terms: 'compute' or 'memory' (the unit nearer its
        peak), or 'latency' when both are below ``LATENCY_BOUND_PCT``; '' when unknown."""
        if self.compute_pct is None or self.memory_pct is None:
            return ""
        if max(self.compute_pct, self.memory_pct) < LATENCY_BOUND_PCT:
            return "latency"
        return "compute" if self.compute_pct >= self.memory_pct else "memory"


class ShapeCounters(BaseModel):
    """One profiled call (one benchmark shape): its kernels, longest first, and its DRAM traffic."""

    model_config = ConfigDict(extra="forbid")

    config: str
    kernels: list[KernelCounters] = Field(default_factory=list)
    other_kernels: int = 0
    """Further distinct kernels profiled in the call and not listed."""
    launches: int = 0
    """Launches profiled in the call."""
    dram_bytes: float | None = None
    """DRAM bytes read and written by every profiled launch of the call."""
    minimal_bytes: float | None = None
    """The task's minimal bytes for this shape (its inputs read, its output written once)."""

    @property
    def traffic_ratio(self) -> float | None:
        """dram_bytes / minimal_bytes: 1.0 moves each byte once; above it, re-reads or intermediates."""
        if self.dram_bytes is None or not self.minimal_bytes:
            return None
        return self.dram_bytes / self.minimal_bytes


class CounterReport(BaseModel):
    """Nsight Compute's counters of one candidate on a few benchmark shapes, or why there are none."""

    model_config = ConfigDict(extra="forbid")

    status: CounterStatus
    detail: str = ""
    """Why there are no counters (or what limited them: a launch cap reached, a shape whose call failed)."""
    shapes: list[ShapeCounters] = Field(default_factory=list)
    tool: str = ""
    """The ncu version that read them."""
    device: str = ""
    wall_s: float = 0.0
    """What collecting them cost: from starting ncu to the parsed report (the GPU is held throughout)."""
    launch_cap: int = 0
    """At most this many kernel launches were profiled in all."""
    layers: str = ""
    """The containment layers ncu and the candidate's process shared, and what was opened there for ncu."""
    stages: dict[str, float] = Field(default_factory=dict)
    """Where ``wall_s`` went, in seconds: ``ncu`` (ncu with the worker, start to exit) and ``import`` (reading the
    report back), measured by the parent; ``load`` (torch and the candidate imported), ``warm`` (the unmarked calls:
    compile, autotune) and ``profiled`` (the marked calls, ncu's replay included) as the counters worker reported
    them (diagnostics), and ``start``, the rest of ``ncu`` (the layers', ncu's and Python's start, and exit)."""

    @property
    def collected(self) -> bool:
        return self.status == CounterStatus.COLLECTED and bool(self.shapes)
