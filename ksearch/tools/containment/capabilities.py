"""The ``caps`` layer: every capability dropped from the bounding and ambient sets, and no_new_privs.

Standard library only: the launcher runs before every worker.
"""

from __future__ import annotations

import ctypes
import os

from ksearch.tools.containment.seccomp import PR_SET_NO_NEW_PRIVS
from ksearch.tools.containment.syscalls import LayerError
from ksearch.tools.containment.syscalls import check as _check
from ksearch.tools.containment.syscalls import libc as _libc

PR_CAPBSET_READ, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 23, 24, 47, 4
CAPABILITY_VERSION_3 = 0x20080522


def drop_capabilities() -> None:
    """Empty the bounding set (so that ``exec`` grants root no capability) and the ambient set; no_new_privs."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 40
    for cap in range(last + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: unknown cap
            err = ctypes.get_errno()
            if err == 1 and os.getuid() != 0 and not _has_any_capability():
                break  # an ordinary user without CAP_SETPCAP: there is nothing to drop
            raise LayerError(f"prctl(PR_CAPBSET_DROP, {cap}): {os.strerror(err)}")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def _has_any_capability() -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16) != 0
    except OSError:
        pass
    return False


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def capabilities_as_after_exec() -> None:
    """Set this process's capabilities to what ``exec`` of a program without file capabilities would leave it: for
    root, the inheritable set and the bounding set (empty after ``drop_capabilities``); for another user, none. A
    process forked into its layers and never ``exec``ed (the fork server's) would otherwise keep the capabilities its
    launcher steps used: in its own user namespace (enough to undo the mounts that hide paths) or, as a root whose
    bounding set is empty, outside it (enough to read a non-dumpable ancestor's environment)."""
    header = _CapHeader(CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capget(ctypes.byref(header), data), "capget")
    kept = [0, 0]
    if os.getuid() == 0:
        for cap in range(64):
            if _libc.prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1:
                kept[cap // 32] |= 1 << (cap % 32)
    for word in (0, 1):
        allowed = (kept[word] | data[word].inheritable) & data[word].permitted
        data[word].effective = data[word].permitted = allowed
    _check(_libc.capset(ctypes.byref(header), data), "capset")
