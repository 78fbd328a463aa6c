"""What a GPU process held at its allocation peak, and where it was allocated: reads the allocator histories that
``KSEARCH_PROFILE=DIR KSEARCH_MEMORY_HISTORY=1`` makes every worker and checker write (``*.memory.pickle``, torch's
snapshot format).

Usage (from the repository root, on the machine or after fetching DIR):

    python bench/memory_timeline.py DIR/*.memory.pickle [--top 12]

For each file: the peak of allocated bytes (blocks alive at once, from the events recorded since the history
started), the peak of reserved bytes (segments the allocator took from the driver), and the blocks alive at the
allocated peak summed by where they were allocated (the innermost ksearch or problem frame of the stack).
"""

from __future__ import annotations

import argparse
import pickle
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = float(1 << 30)
ALLOC, FREED = {"alloc"}, {"free_completed"}
SEGMENT_IN, SEGMENT_OUT = {"segment_alloc", "segment_map"}, {"segment_free", "segment_unmap"}


@dataclass
class Peaks:
    allocated: int = 0
    reserved: int = 0
    live_at_peak: dict[str, tuple[int, int]] = field(default_factory=dict)
    """where -> (bytes, blocks) alive at the allocated peak."""
    out_of_memory: int = 0


def where(frames: Sequence[Mapping[str, Any]]) -> str:
    """The innermost frame in ksearch (not this profiling aid) or in a task's problem file, else the innermost one."""
    if not frames:
        return "(no stack)"
    frame = next((f for f in frames if _ours(str(f.get("filename", "")))), frames[0])
    return f"{_short(str(frame.get('filename', '?')))}:{frame.get('line', '?')} {frame.get('name', '')}"


def _ours(name: str) -> bool:
    return ("/ksearch/" in name and "/profiling.py" not in name) or "/level" in name or "/tasks/" in name


def _short(path: str) -> str:
    for marker in ("/ksearch/", "/site-packages/"):
        if marker in path:
            return path[path.index(marker) + 1 :]
    return path


def peaks(events: Iterable[Mapping[str, Any]]) -> Peaks:
    """Replay one device's trace: blocks allocated and freed, segments mapped and released."""
    result = Peaks()
    live: dict[int, tuple[int, str]] = {}
    allocated = reserved = 0
    for event in events:
        action, size = event.get("action"), int(event.get("size", 0))
        if action in ALLOC:
            live[int(event["addr"])] = (size, where(event.get("frames") or []))
            allocated += size
            if allocated > result.allocated:
                result.allocated = allocated
                result.live_at_peak = _grouped(live.values())
        elif action in FREED:
            found = live.pop(int(event["addr"]), None)
            if found is not None:  # a block allocated before the history started is not counted
                allocated -= found[0]
        elif action in SEGMENT_IN:
            reserved += size
            result.reserved = max(result.reserved, reserved)
        elif action in SEGMENT_OUT:
            reserved = max(0, reserved - size)
        elif action == "oom":
            result.out_of_memory += 1
    return result


def _grouped(blocks: Iterable[tuple[int, str]]) -> dict[str, tuple[int, int]]:
    grouped: dict[str, tuple[int, int]] = {}
    for size, place in blocks:
        total, count = grouped.get(place, (0, 0))
        grouped[place] = (total + size, count + 1)
    return grouped


def report(name: str, snapshot: Mapping[str, Any], top: int) -> list[str]:
    lines = []
    for device, events in enumerate(snapshot.get("device_traces") or []):
        if not events:
            continue
        found = peaks(events)
        oom = f", {found.out_of_memory} out of memory" if found.out_of_memory else ""
        lines.append(
            f"{name} (device {device}, {len(events)} events): allocated peak {found.allocated / GIB:.2f} GiB, "
            f"reserved peak {found.reserved / GIB:.2f} GiB{oom}"
        )
        ranked = sorted(found.live_at_peak.items(), key=lambda item: -item[1][0])
        for place, (size, count) in ranked[:top]:
            lines.append(f"  {size / GIB:8.2f} GiB  {count:4d} blocks  {place}")
    return lines or [f"{name}: no events recorded"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    for path in args.files:
        with path.open("rb") as handle:
            snapshot = pickle.load(handle)  # noqa: S301 - the developer's own dump
        print("\n".join(report(path.name, snapshot, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
