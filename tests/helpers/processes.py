"""Finding the evaluator processes a ksearch process started: they carry its pid in ``KSEARCH_PARENT_PID``."""

from __future__ import annotations

from pathlib import Path


def started_by(parent_pid: int) -> list[int]:
    """Live processes (checkers, candidate workers) whose environment names ``parent_pid`` as their parent."""
    marker = f"KSEARCH_PARENT_PID={parent_pid}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found
