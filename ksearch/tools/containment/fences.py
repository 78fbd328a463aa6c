"""Folders of a candidate's mount namespace emptied but for what it needs (the ``mountns`` layer's allow-list, the
bubblewrap way: a fresh tmpfs over a folder, the needed paths bound back at their places) and its own ``/dev/shm``.

Standard library only: the launcher runs before every worker.
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple

from ksearch.tools.containment.syscalls import MS_BIND, MS_NODEV, MS_NOSUID, MS_REC, beneath_any, check, libc


class SharedMemoryFolder(NamedTuple):
    """A candidate's own ``/dev/shm``: a tmpfs of at most ``size`` bytes (0: the kernel's default, half the memory)
    holding, besides what the candidate writes, only the machine's folders ``keep`` (beneath ``/dev/shm``: an
    evaluation's staging folder, shared with its checker)."""

    size: int = 0
    keep: tuple[str, ...] = ()


def hold_shm_folders(shm: SharedMemoryFolder) -> dict[str, int]:
    """Descriptors of the machine's folders ``shm`` keeps, opened before ``/dev`` is covered (they are reachable by
    their paths no longer after that); the caller closes them."""
    keep = [k for k in shm.keep if beneath_any(os.fsencode(k), [b"/dev/shm"]) and os.path.isdir(k)]
    return {k: os.open(k, os.O_PATH | os.O_CLOEXEC) for k in keep}


def private_shm(shm: SharedMemoryFolder, held: dict[str, int]) -> None:
    """Mount the candidate's own ``/dev/shm`` (in ``minimal_dev``'s new ``/dev``), with the folders of ``held``
    (``hold_shm_folders``) bound back: what it writes there is gone with its mount namespace, and no other
    evaluation's staging buffer, nor any other file of the machine's ``/dev/shm``, is in it."""
    os.mkdir("/dev/shm")
    options = f"mode=1777{f',size={shm.size}' if shm.size else ''}".encode()
    check(libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, options), "mount /dev/shm")
    for path, fd in held.items():
        os.makedirs(path, exist_ok=True)
        check(
            libc.mount(f"/proc/self/fd/{fd}".encode(), os.fsencode(path), None, MS_BIND | MS_REC, None),
            f"bind {path}",
        )


def fence(folder: str, keep: list[str]) -> None:
    """Put an empty tmpfs over ``folder`` holding only the paths of ``keep`` (resolved) that lie beneath it, each
    bound from the machine's at its own path (the folders leading to one are there, empty but for it): ``/tmp`` with
    only the worker's own folders in it, a home with only the virtual environment that runs ksearch. Nothing when
    ``folder`` is missing, a link, or lies within a path of ``keep`` (it is needed whole)."""
    root = os.path.realpath(folder)
    if not os.path.isdir(folder) or os.path.islink(folder) or root == "/":
        return
    if any(root == k or _beneath(root, k) for k in keep):
        return
    inside = sorted({k for k in keep if _beneath(k, root) and os.path.lexists(k)})
    outermost = [k for k in inside if not any(_beneath(k, other) for other in inside if other != k)]
    held = {k: os.open(k, os.O_PATH | os.O_CLOEXEC) for k in outermost}
    try:
        options = b"mode=0755,size=1m"
        check(libc.mount(b"tmpfs", os.fsencode(root), b"tmpfs", MS_NOSUID | MS_NODEV, options), f"fence {root}")
        for path, fd in held.items():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.mkdir(path)
            else:
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
            check(
                libc.mount(f"/proc/self/fd/{fd}".encode(), os.fsencode(path), None, MS_BIND | MS_REC, None),
                f"bind {path}",
            )
    finally:
        for fd in held.values():
            os.close(fd)


def _beneath(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")
