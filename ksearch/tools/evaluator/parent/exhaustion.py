"""Why a candidate ran out of something, from what its process left (issue 61): its exit, its error, its stderr,
and the kernel's count of OOM kills while it ran.

A verdict that ran out of memory or disk says so, rather than "killed by SIGKILL" or "exited with code 1": the model
(and the user) can act on "out of memory", not on a signal number. The limits themselves are the containment's
(``ksearch.tools.containment.limits``).
"""

from __future__ import annotations

import re
import signal

from ksearch.tools.containment import limits

OUT_OF_MEMORY = re.compile(
    r"MemoryError|OutOfMemoryError|CUDA out of memory|can't allocate memory|Cannot allocate memory|\[Errno 12\]"
    r"|std::bad_alloc|out of memory",
)
OUT_OF_DISK = re.compile(r"No space left on device|\[Errno 28\]|ENOSPC|Disk quota exceeded|\[Errno 122\]")
FILE_TOO_LARGE = re.compile(r"File too large|\[Errno 27\]|EFBIG")
VMSTAT = "/proc/vmstat"


def oom_kills() -> int:
    """How many processes the kernel's OOM killer has ended since boot (``oom_kill`` of ``/proc/vmstat``; 0 where
    it is not kept)."""
    try:
        with open(VMSTAT) as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def memory_limit_note(device: str) -> str:
    """The candidate's memory limit, in words, for a message."""
    try:
        memory = limits.for_device(device).memory
    except limits.LimitError:
        return ""
    if not memory:
        return ""
    return f"; a candidate may use {memory / (1 << 30):.1f} GiB ({limits.MEMORY_VARIABLE})"


def cause(*, returncode: int | None, text: str, oom_killed: bool, device: str) -> str:
    """What the candidate ran out of, as a phrase ('' when nothing says it ran out of anything)."""
    if returncode is not None and returncode == -signal.SIGXFSZ or FILE_TOO_LARGE.search(text):
        return f"a file it wrote grew past the candidate's file size limit ({limits.FILE_SIZE_VARIABLE})"
    if returncode is not None and returncode == -signal.SIGKILL and oom_killed:
        return "out of memory: the kernel's OOM killer ended it" + memory_limit_note(device)
    if OUT_OF_DISK.search(text):
        return "out of disk space: a write failed with 'No space left on device'"
    if OUT_OF_MEMORY.search(text):
        return "out of memory" + memory_limit_note(device)
    return ""
