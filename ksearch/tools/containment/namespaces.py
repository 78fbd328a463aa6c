"""The namespace layers but the mounts: ``userns`` (the same uid and gid inside, no user namespace nested),
``pidns``'s fresh ``/proc``, ``netns`` (its loopback up on request) and ``ipcns``.

Standard library only: the launcher runs before every worker.
"""

from __future__ import annotations

import os

from ksearch.tools.containment.mounts import cover, current_mounts
from ksearch.tools.containment.syscalls import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    LayerError,
)
from ksearch.tools.containment.syscalls import check as _check
from ksearch.tools.containment.syscalls import libc as _libc

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sH22x"
"""``struct ifreq`` with its flags: the interface's name, then ``ifr_flags`` in a union of 24 bytes."""


def enter_namespaces(pid_namespace: bool) -> None:
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWUSER | (CLONE_NEWNS | CLONE_NEWPID if pid_namespace else 0)
    _check(_libc.unshare(flags), "unshare")
    try:
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1")
    except OSError as exc:
        raise LayerError(f"writing the user namespace's id maps: {exc}") from None
    try:  # no user namespace inside this one: every process the candidate starts stays in it, where the parent finds
        with open("/proc/sys/user/max_user_namespaces", "w") as f:  # and kills them (``sandbox.kill_user_namespace``)
            f.write("0")  # (a nested one would also hand it capabilities over new mounts: the red team of 2026-11-30)
    except OSError:
        pass  # a read-only /proc/sys (some containers): the nested namespace stays possible, nothing else changes


def fresh_proc() -> None:
    """In the new PID and mount namespaces: keep mounts from propagating out, and mount a /proc of this namespace."""
    _check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _check(_libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount proc")


def own_network(*, loopback: bool) -> None:
    """A new network namespace; with ``loopback``, its loopback interface up (the namespace's own: only processes
    inside it are on it)."""
    _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
    if not loopback:
        return
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as handle:
        asked = fcntl.ioctl(handle.fileno(), SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0))
        flags = struct.unpack(IFREQ, asked)[1]
        fcntl.ioctl(handle.fileno(), SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


def own_ipc_namespace(*, cover_mqueues: bool) -> None:
    """A new IPC namespace; with ``cover_mqueues`` (in the candidate's mount namespace) every ``mqueue`` mount covered
    too: a file on one is the host's queue itself, whatever the IPC namespace (the red team of 2026-11-30, through
    systemd's ``/dev/mqueue``)."""
    _check(_libc.unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")
    if cover_mqueues:
        for point in current_mounts(fstype=b"mqueue"):
            cover(os.fsdecode(point))
