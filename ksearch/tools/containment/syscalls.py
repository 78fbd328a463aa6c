"""What the launcher's layers share: the C library, the mount flags, and the error a layer raises (standard library
only: the launcher runs before every worker)."""

from __future__ import annotations

import ctypes
import os

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
MS_NOATIME, MS_NODIRATIME, MS_REC, MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = (
    1024,
    2048,
    1 << 14,
    1 << 18,
    1 << 21,
    1 << 24,
)
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
CLONE_NEWIPC = 0x08000000
PR_SET_DUMPABLE = 4

libc = ctypes.CDLL(None, use_errno=True)


class LayerError(Exception):
    """A layer could not be applied."""


def check(result: int, what: str) -> None:
    """Raise ``LayerError`` naming ``what`` and the C library's error when ``result`` is not 0."""
    if result != 0:
        err = ctypes.get_errno()
        raise LayerError(f"{what}: {os.strerror(err)}")


def beneath_any(path: bytes, roots: list[bytes]) -> bool:
    return any(path == root or path.startswith(root.rstrip(b"/") + b"/") for root in roots)
