"""What one candidate may use: the child's side of the ``limits`` layer (``policy``'s ``limits`` decides the values).

Standard library only: the launcher runs before every worker.
"""

from __future__ import annotations

from typing import NamedTuple

from ksearch.tools.containment.syscalls import LayerError


class Limits(NamedTuple):
    """What one candidate may use (0: no limit of that kind)."""

    memory: int = 0
    """Bytes: ``RLIMIT_AS`` (``address_space``) or ``RLIMIT_DATA`` (a GPU's candidate: CUDA reserves far more
    address space than it uses)."""
    address_space: bool = True
    file_size: int = 0
    """Bytes, per file written (``RLIMIT_FSIZE``: a larger write ends the process with ``SIGXFSZ``)."""
    processes: int = 0
    """``RLIMIT_NPROC``, set inside the user namespace (counted there from Linux 5.14; uid 0 is exempt)."""
    oom_score: int = 1000
    """The OOM killer's first choice when memory runs out is the candidate, never another process of the machine."""


def apply_limits(limits: Limits) -> None:
    """The resource limits of ``limits`` on this process and what it starts (the candidate), and no core files."""
    import resource

    wanted = [(resource.RLIMIT_CORE, 0)]
    if limits.memory:
        wanted.append((resource.RLIMIT_AS if limits.address_space else resource.RLIMIT_DATA, limits.memory))
    if limits.file_size:
        wanted.append((resource.RLIMIT_FSIZE, limits.file_size))
    for kind, value in wanted:
        _lower(kind, value)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(limits.oom_score))
    except OSError as exc:
        raise LayerError(f"oom_score_adj: {exc.strerror or exc}") from None


def limit_processes(count: int) -> None:
    """``RLIMIT_NPROC`` (in the candidate's own user namespace, where only its own processes count)."""
    import resource

    if count:
        _lower(resource.RLIMIT_NPROC, count)


def _lower(kind: int, value: int) -> None:
    import resource

    soft, hard = resource.getrlimit(kind)
    top = value if hard == resource.RLIM_INFINITY else min(value, hard)
    try:
        resource.setrlimit(kind, (top, top))
    except (OSError, ValueError) as exc:
        raise LayerError(f"setrlimit({kind}, {top}): {exc}") from None
