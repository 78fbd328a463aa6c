"""Nsight Compute's raw page as CSV (``ncu --import R --csv --page raw --print-units base``) read into typed counters.

The page has a header row (``"ID","Process ID","Process Name","Host Name","Kernel Name",...`` then one column per
metric), a units row, and a row per profiled kernel launch. Metrics are looked up by name with fallbacks, and the
families that differ between GPU generations (tensor pipes, occupancy limits, stall reasons) by pattern, so the
same reader serves every architecture's sections. Pure: no I/O.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field

from ksearch.contracts.counters import KernelCounters, ShapeCounters, Stall

RANGE_PREFIX = "ksearch_counters_"
"""The NVTX push/pop range around shape ``i``'s profiled call is named ``ksearch_counters_<i>``."""
RANGE_PATTERN = re.compile(re.escape(RANGE_PREFIX) + r"(\d+)")
KERNELS_PER_SHAPE = 4
"""Kernels listed per shape (longest first); the rest are counted."""
STALLS_PER_KERNEL = 3
NAME_LIMIT = 200
"""A kernel name is cut to this many characters (the candidate chose it)."""

COMPUTE = ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)
MEMORY = ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",)
DRAM = (
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
)
L2 = ("lts__throughput.avg.pct_of_peak_sustained_elapsed",)
L1 = ("l1tex__throughput.avg.pct_of_peak_sustained_active", "l1tex__throughput.avg.pct_of_peak_sustained_elapsed")
L2_HIT = ("lts__t_sector_hit_rate.pct",)
ACHIEVED = ("sm__warps_active.avg.pct_of_peak_sustained_active",)
THEORETICAL = ("sm__maximum_warps_per_active_cycle_pct",)
REGISTERS = ("launch__registers_per_thread",)
BLOCK = ("launch__block_size",)
GRID = ("launch__grid_size",)
WAVES = ("launch__waves_per_multiprocessor",)
DURATION = ("gpu__time_duration.sum",)
SHARED_PARTS = ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic")
DRAM_PARTS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
DRAM_TOTAL = ("dram__bytes.sum",)
TENSOR = re.compile(
    r"^sm__(pipe_tensor\w*_cycles_active|inst_executed_pipe_tensor\w*)\.avg\.pct_of_peak_sustained_(active|elapsed)$"
)
LIMIT = re.compile(r"^launch__occupancy_limit_(\w+)$")
STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio$")
NOT_STALLS = frozenset({"selected"})
TIME_UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6}
BYTE_UNITS = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12}
LIMIT_NAMES = {"shared_mem": "shared memory", "registers": "registers", "warps": "warps", "blocks": "blocks"}


@dataclass
class Launch:
    """One row of the raw page: a profiled kernel launch."""

    id: int
    name: str
    values: dict[str, float] = field(default_factory=dict)
    """Every numeric metric of the row, in base units as printed."""
    units: dict[str, str] = field(default_factory=dict)

    def first(self, names: tuple[str, ...]) -> float | None:
        for name in names:
            if name in self.values:
                return self.values[name]
        return None

    def scaled(self, names: tuple[str, ...], table: dict[str, float]) -> float | None:
        """The first of ``names`` present, converted by its unit through ``table`` (None for an unknown unit; a
        rate's denominator is kept: 'byte/block' scales as 'byte')."""
        for name in names:
            if name in self.values:
                factor = table.get(self.units.get(name, "").split("/")[0].strip().lower())
                return None if factor is None else self.values[name] * factor
        return None


class RawPageError(ValueError):
    """The text is not Nsight Compute's raw page (no header row with an ID and a kernel name)."""


def number(text: str) -> float | None:
    """A metric value as a float ('1,234.5' and '12.5' read; 'n/a', '' and tuples do not)."""
    cleaned = text.strip().replace(",", "")
    if not cleaned:
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def parse_raw_page(text: str) -> list[Launch]:
    """Every launch of the page, in order. ncu's own messages (lines starting ``==``) before the header are skipped;
    ``RawPageError`` when there is no header."""
    lines = [line for line in text.splitlines() if not line.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    start = next((i for i, row in enumerate(rows) if row[:1] == ["ID"] and "Kernel Name" in row), None)
    if start is None:
        raise RawPageError("no header row with 'ID' and 'Kernel Name' (is this ncu --csv --page raw output?)")
    header = rows[start]
    body = rows[start + 1 :]
    units_row = body[0] if body and (body[0][:1] == [""] or number(body[0][0]) is None) else None
    if units_row is not None:
        body = body[1:]
    name_at = header.index("Kernel Name")
    launches = []
    for row in body:
        if len(row) < len(header) or number(row[0]) is None:
            continue
        values: dict[str, float] = {}
        units: dict[str, str] = {}
        for i, column in enumerate(header):
            if "__" not in column:  # the launch's identity columns, not metrics
                continue
            value = number(row[i])
            if value is not None:
                values[column] = value
                units[column] = units_row[i] if units_row is not None and i < len(units_row) else ""
        launches.append(Launch(id=int(number(row[0]) or 0), name=row[name_at][:NAME_LIMIT], values=values, units=units))
    return launches


def range_of(renamed: str) -> int | None:
    """The shape index in a kernel name that ``--print-nvtx-rename kernel`` replaced by its NVTX range, or None."""
    match = RANGE_PATTERN.search(renamed)
    return int(match.group(1)) if match else None


def tensor_pct(launch: Launch) -> float | None:
    """The busiest tensor pipe's share of peak: the metric names differ by architecture (hmma, gmma, imma...)."""
    found = [value for name, value in launch.values.items() if TENSOR.match(name)]
    return max(found) if found else None


def occupancy_limiter(launch: Launch) -> str:
    """The resource allowing the fewest blocks per SM ('' when the launch statistics are missing)."""
    limits = {m.group(1): value for name, value in launch.values.items() if (m := LIMIT.match(name))}
    if not limits:
        return ""
    key = min(limits, key=lambda k: (limits[k], k))
    return LIMIT_NAMES.get(key, key.replace("_", " "))


def top_stalls(launch: Launch, limit: int = STALLS_PER_KERNEL) -> list[Stall]:
    found = [
        Stall(reason=m.group(1).replace("_", " "), per_issue=round(value, 3))
        for name, value in launch.values.items()
        if (m := STALL.match(name)) and m.group(1) not in NOT_STALLS and value > 0
    ]
    return sorted(found, key=lambda s: (-s.per_issue, s.reason))[:limit]


def dram_bytes(launch: Launch) -> float | None:
    parts = [launch.scaled((name,), BYTE_UNITS) for name in DRAM_PARTS if name in launch.values]
    if parts and all(p is not None for p in parts):
        return sum(p for p in parts if p is not None)
    return launch.scaled(DRAM_TOTAL, BYTE_UNITS)


def _int(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def _pct(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def kernel_counters(config: str, launches: list[Launch]) -> KernelCounters:
    """One kernel's counters in one call from its launches (same name): the longest launch's figures, the time and
    DRAM bytes of all."""
    times = [launch.scaled(DURATION, TIME_UNITS) for launch in launches]
    longest = max(zip(times, launches, strict=True), key=lambda pair: pair[0] or 0.0)[1]
    byte_counts = [dram_bytes(launch) for launch in launches]
    shared = [longest.scaled((name,), BYTE_UNITS) for name in SHARED_PARTS if name in longest.values]
    return KernelCounters(
        config=config,
        name=longest.name,
        launches=len(launches),
        time_us=round(sum(t for t in times if t is not None), 3) if any(t is not None for t in times) else None,
        compute_pct=_pct(longest.first(COMPUTE)),
        memory_pct=_pct(longest.first(MEMORY)),
        dram_pct=_pct(longest.first(DRAM)),
        l2_pct=_pct(longest.first(L2)),
        l1_pct=_pct(longest.first(L1)),
        l2_hit_pct=_pct(longest.first(L2_HIT)),
        tensor_pct=_pct(tensor_pct(longest)),
        achieved_occupancy_pct=_pct(longest.first(ACHIEVED)),
        theoretical_occupancy_pct=_pct(longest.first(THEORETICAL)),
        occupancy_limiter=occupancy_limiter(longest),
        registers=_int(longest.first(REGISTERS)),
        shared_bytes=_int(sum(s for s in shared if s is not None)) if shared and None not in shared else None,
        block_size=_int(longest.first(BLOCK)),
        grid_size=_int(longest.first(GRID)),
        waves=None if (w := longest.first(WAVES)) is None else round(w, 2),
        dram_bytes=sum(b for b in byte_counts if b is not None) if any(b is not None for b in byte_counts) else None,
        stalls=top_stalls(longest),
    )


def shape_counters(
    launches: list[Launch],
    shape_of: dict[int, int],
    configs: list[str],
    minimal_bytes: dict[str, float] | None = None,
    limit: int = KERNELS_PER_SHAPE,
) -> list[ShapeCounters]:
    """Per profiled shape (``configs[i]`` for NVTX range ``i``; ``shape_of`` maps a launch's ID to its range), its
    kernels by name, longest first, at most ``limit`` of them. Launches outside every known range are left out."""
    by_shape: dict[int, list[Launch]] = {}
    for launch in launches:
        index = shape_of.get(launch.id)
        if index is not None and 0 <= index < len(configs):
            by_shape.setdefault(index, []).append(launch)
    shapes = []
    for index, config in enumerate(configs):
        own = by_shape.get(index, [])
        if not own:
            continue
        by_name: dict[str, list[Launch]] = {}
        for launch in own:
            by_name.setdefault(launch.name, []).append(launch)
        kernels = sorted(
            (kernel_counters(config, group) for group in by_name.values()),
            key=lambda k: (-(k.time_us or 0.0), k.name),
        )
        moved = [dram_bytes(launch) for launch in own]
        shapes.append(
            ShapeCounters(
                config=config,
                kernels=kernels[:limit],
                other_kernels=max(0, len(kernels) - limit),
                launches=len(own),
                dram_bytes=sum(b for b in moved if b is not None) if any(b is not None for b in moved) else None,
                minimal_bytes=(minimal_bytes or {}).get(config),
            )
        )
    return shapes
