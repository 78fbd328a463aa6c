"""What one candidate may use of the machine (the parent's side of the ``limits`` layer; ``rlimits.apply_limits``
applies them): memory, processes, the size of a file it writes, and the OOM killer's preference.

A candidate that allocates without bound must end itself, not set off the machine's OOM killer, which may take
another process (the agent, a shell, another user's job). So, per candidate process tree:

- memory: ``RLIMIT_AS`` on the CPU (an allocation past it fails: ``MemoryError``, or PyTorch's "can't allocate
  memory"); none on a GPU, where CUDA reserves far more address space than it uses (and ``RLIMIT_DATA`` is untested
  with CUDA): the OOM score below is what protects the machine there;
- processes and threads: ``RLIMIT_NPROC``, counted in the candidate's own user namespace (Linux 5.14+; a ksearch run
  as root is exempt, as uid 0 always is);
- the size of one file: ``RLIMIT_FSIZE`` (a write past it ends the process with ``SIGXFSZ``);
- the OOM score: 1000, so that when memory runs out anyway the kernel's OOM killer takes the candidate first.

``KSEARCH_CANDIDATE_MEMORY`` (``8G``, ``512M``, bytes, or ``off``) and ``KSEARCH_CANDIDATE_FILE_SIZE`` change the
defaults (half the machine's memory; 16 GiB). cgroup v2 limits (which would hold a GPU's host memory too) are not
used: a cgroup ksearch could create its own below is rarely delegated to a user's process.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ksearch import settings
from ksearch.errors import UserError

MEMORY_VARIABLE = settings.CANDIDATE_MEMORY.name
FILE_SIZE_VARIABLE = settings.CANDIDATE_FILE_SIZE.name
DEFAULT_PROCESSES = 4096
"""Processes and threads of one candidate: room for Inductor's compile workers and OpenMP's threads on a large
host, not for a fork bomb."""
OOM_SCORE = 1000
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class LimitError(UserError):
    """A limit variable that cannot be read."""

    hint = f"e.g. {MEMORY_VARIABLE}=8G, {FILE_SIZE_VARIABLE}=512M, or off for no limit of that kind"


class Limits(NamedTuple):
    """The launcher's ``Limits`` (the same fields; 0: no limit of that kind)."""

    memory: int = 0
    address_space: bool = True
    file_size: int = 0
    processes: int = 0
    oom_score: int = OOM_SCORE


def parse_size(text: str, variable: str) -> int:
    """``8G``, ``512m``, ``1048576`` -> bytes; ``off``/``0`` -> 0 (no limit)."""
    value = text.strip().lower().removesuffix("b").removesuffix("i")
    if value in ("off", "none", "0", ""):
        return 0
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)", value)
    if match is None:
        raise LimitError(f"{variable}={text!r} is not a size: use e.g. 8G, 512M, a number of bytes, or off")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def machine_memory() -> int:
    """Bytes of memory of this machine (``MemTotal``), 0 where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def for_device(device: str) -> Limits:
    """The limits of a candidate on ``device`` (``LimitError`` for an unreadable variable)."""
    memory_text = settings.CANDIDATE_MEMORY.given()
    if device != "cpu":
        memory = parse_size(memory_text, MEMORY_VARIABLE) if memory_text else 0
        address_space = False
    else:
        memory = parse_size(memory_text, MEMORY_VARIABLE) if memory_text is not None else machine_memory() // 2
        address_space = True
    file_size = parse_size(settings.CANDIDATE_FILE_SIZE.raw(), FILE_SIZE_VARIABLE)
    return Limits(memory=memory, address_space=address_space, file_size=file_size, processes=DEFAULT_PROCESSES)


def describe(limits: Limits) -> str:
    """One line for an evaluation's record."""
    parts = []
    if limits.memory:
        kind = "address space" if limits.address_space else "data"
        parts.append(f"memory {limits.memory / (1 << 30):.1f} GiB ({kind})")
    else:
        parts.append("memory unlimited")
    parts.append(f"files {limits.file_size / (1 << 30):.1f} GiB" if limits.file_size else "files unlimited")
    parts.append(f"processes {limits.processes}" if limits.processes else "processes unlimited")
    parts.append(f"oom score {limits.oom_score}")
    return ", ".join(parts)
