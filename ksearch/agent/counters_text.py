"""Hardware counters as compact text for the planner's and the coder's prompts, ``ksearch show`` and the report.

One block per counter report: a head saying what was measured and how, then per profiled shape its DRAM traffic
against the task's minimum and a line per kernel: its roofline position, speed of light, memory units, tensor pipes,
occupancy and its limiter, resources and top stalls. A report without counters is one short line (its status, in a
few words) for the model, and with ``detail`` (``ksearch show``, ``ksearch eval``) the whole reason, which can name
every containment tried. Pure: no I/O.
"""

from __future__ import annotations

from ksearch.contracts.counters import CounterReport, CounterStatus, KernelCounters, ShapeCounters

COUNTERS_FOR_LIMIT = 2
"""Solutions the planner may ask counters for per plan (``EditScript.counters_for``)."""
WHY_NONE = {
    CounterStatus.NO_NCU: "Nsight Compute is not installed here",
    CounterStatus.NO_PERMISSION: "the GPU driver refuses performance counters",
    CounterStatus.NO_GPU: "the CPU has none",
    CounterStatus.TIMEOUT: "ncu ran past its time limit",
    CounterStatus.FAILED: "ncu gave no usable report",
    CounterStatus.OFF: "not asked for this kernel",
    CounterStatus.SKIPPED: "kept within the run's budget for them",
    CounterStatus.COLLECTED: "no kernel of the calls was profiled",
}
"""Why a report has no counters, in a few words: what a prompt says (the full reason is for people)."""


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f} %"


def _bytes(value: float | None) -> str:
    if value is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def kernel_line(k: KernelCounters) -> str:
    """One kernel: what bounds it, then the figures a kernel engineer reads first."""
    parts = [f"{k.name[:80]} x{k.launches}" + (f", {k.time_us:.4g} us" if k.time_us is not None else "")]
    if k.bound:
        parts.append(f"{k.bound}-bound")
    parts.append(f"SOL compute {_pct(k.compute_pct)}, memory {_pct(k.memory_pct)}")
    memory = [f"DRAM {_pct(k.dram_pct)}", f"L2 {_pct(k.l2_pct)}"]
    if k.l2_hit_pct is not None:
        memory.append(f"L2 hit {_pct(k.l2_hit_pct)}")
    parts.append(", ".join(memory))
    if k.tensor_pct is not None:
        parts.append(f"tensor pipe {_pct(k.tensor_pct)}")
    occupancy = f"occupancy {_pct(k.achieved_occupancy_pct)} of {_pct(k.theoretical_occupancy_pct)} theoretical"
    if k.occupancy_limiter:
        occupancy += f" (limited by {k.occupancy_limiter})"
    parts.append(occupancy)
    resources = []
    if k.registers is not None:
        resources.append(f"{k.registers} regs/thread")
    if k.shared_bytes is not None:
        resources.append(f"{_bytes(k.shared_bytes)} smem/block")
    if k.block_size is not None and k.grid_size is not None:
        resources.append(f"block {k.block_size} x grid {k.grid_size}" + (f" ({k.waves:g} waves)" if k.waves else ""))
    if resources:
        parts.append(", ".join(resources))
    if k.stalls:
        parts.append("stalls " + ", ".join(f"{s.reason} {s.per_issue:.3g}" for s in k.stalls))
    return "; ".join(parts)


def shape_head(s: ShapeCounters) -> str:
    traffic = ""
    if s.dram_bytes is not None:
        traffic = f": DRAM {_bytes(s.dram_bytes)} moved"
        ratio = s.traffic_ratio
        if ratio is not None:
            traffic += f", {ratio:.2g}x the task's minimum {_bytes(s.minimal_bytes)}"
    return f"{s.config} ({s.launches} launches profiled){traffic}"


def counters_text(report: CounterReport | None, *, detail: bool = False) -> str:
    """The report as prompt text ('' when there is none); without counters, one short line, and with ``detail`` the
    recorded reason after it."""
    if report is None:
        return ""
    if not report.collected:
        line = f"Hardware counters: not collected ({report.status.value}: {WHY_NONE[report.status]})"
        return f"{line}: {report.detail}" if detail and report.detail else line
    where = f" on {report.device}" if report.device else ""
    lines = [
        f"Hardware counters ({report.tool or 'ncu'}{where}; one call per shape, kernels replayed at base clocks; "
        "SOL = % of the unit's peak, stalls = warps waiting per issued instruction; diagnostics, not the score):"
    ]
    for shape in report.shapes:
        lines.append(f"  {shape_head(shape)}")
        lines.extend(f"    {kernel_line(k)}" for k in shape.kernels)
        if shape.other_kernels:
            lines.append(f"    ... {shape.other_kernels} more kernels")
    if report.detail:
        lines.append(f"  note: {report.detail}")
    return "\n".join(lines)


def counters_request_hint() -> str:
    """For the planner: how to get counters of another solution."""
    return (
        f"To see hardware counters of other solutions, list up to {COUNTERS_FOR_LIMIT} node ids in the script's "
        "`counters_for`: they are collected before your next plan."
    )
