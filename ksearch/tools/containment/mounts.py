"""The ``mountns`` layer: a mount namespace of the candidate's own in which the fenced folders are emptied, the
hidden paths covered, ``/dev`` made minimal and every mount read-only but the writable folders.

Standard library only: the launcher runs before every worker.
"""

from __future__ import annotations

import ctypes
import os
import re
import stat

from ksearch.tools.containment.fences import SharedMemoryFolder, fence, hold_shm_folders, private_shm
from ksearch.tools.containment.syscalls import (
    CLONE_NEWNS,
    MS_BIND,
    MS_NOATIME,
    MS_NODEV,
    MS_NODIRATIME,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_RELATIME,
    MS_REMOUNT,
    MS_STRICTATIME,
    LayerError,
    beneath_any,
)
from ksearch.tools.containment.syscalls import check as _check
from ksearch.tools.containment.syscalls import libc as _libc

STATVFS_TO_MOUNT = (
    (os.ST_RDONLY, MS_RDONLY),
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)
SYS_MOUNT_SETATTR, AT_FDCWD, MOUNT_ATTR_RDONLY = 442, -100, 1
"""``mount_setattr(2)`` (Linux 5.12+; one number on every architecture) sets read-only alone, whatever else the mount
has; older kernels take a bind remount that repeats the mount's other flags (a user namespace may not clear them)."""
ALWAYS_WRITABLE = ("/dev", "/proc")
"""Left writable by ``mountns``: device files (CUDA's), and this process's own ``/proc`` entries..."""
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
"""... but not these: a candidate running as root (uid 0 passes the file modes without any capability) could write
``/proc/sys/kernel/core_pattern``, crash, and have the kernel run its helper as root outside every namespace (a
red-team review of 2026-11-30). ``/sys`` is read-only whole (CUDA only reads it; root could move itself out of its
cgroup). Docker's read-only paths are the same list."""
DEVICES_KEPT = ("null", "zero", "full", "random", "urandom", "tty", "shm")
"""What a minimal ``/dev`` (``minimal_dev``) keeps of the machine's, each bound from it, read-only but ``shm``, the
host's folder (POSIX shared memory), unless a ``/dev/shm`` of the candidate's own replaces it. With ``gpu_devices``,
every ``nvidia*`` entry too. Its own ``devpts`` gives it ptys."""
DEVICE_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}


def mount_points(mountinfo: bytes, fstype: bytes | None = None) -> list[bytes]:
    """The mount points of ``/proc/self/mountinfo``'s text, in its order (octal escapes of spaces and the like
    decoded); with ``fstype``, only the mounts of that file system type (the first field after `` - ``)."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split(b" ")
        if len(fields) <= 4:
            continue
        if fstype is not None:
            tail = line.split(b" - ", 1)
            if len(tail) < 2 or tail[1].split(b" ", 1)[0] != fstype:
                continue
        points.append(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), fields[4]))
    return points


def current_mounts(fstype: bytes | None = None) -> list[bytes]:
    """``mount_points`` of this process's mount namespace now."""
    with open("/proc/self/mountinfo", "rb") as f:
        return mount_points(f.read(), fstype)


def private_mounts(
    hidden: list[str],
    writable: list[str],
    *,
    new_namespace: bool,
    setattr_call: bool = True,
    devices: str = "all",
    fenced: list[str] | tuple[str, ...] = (),
    keep: list[str] | tuple[str, ...] = (),
    shm: SharedMemoryFolder | None = None,
) -> None:
    """In a mount namespace of this process's own (``new_namespace``: unshare one; else ``pidns`` made it): each
    folder of ``fenced`` emptied but for the paths of ``keep`` beneath it (``fence``), ``hidden`` covered, ``/dev``
    made minimal unless ``devices`` is ``all`` (``cpu``: ``DEVICES_KEPT``; ``gpu``: and ``nvidia*``; with ``shm``, a
    private ``/dev/shm``), every mount read-only but ``writable`` (and ``ALWAYS_WRITABLE``). Needs ``CAP_SYS_ADMIN``
    over the namespace: the user namespace's. ``setattr_call=False`` takes the older kernels' way (tests)."""
    if new_namespace:
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    kept = [os.path.realpath(k) for k in [*keep, *writable]]
    for folder in fenced:
        fence(folder, kept)
    for path in hidden:
        cover(path)
    if devices != "all":
        minimal_dev(gpu_devices=devices == "gpu", shm=shm)
    folders = sorted({os.fsencode(os.path.realpath(w)) for w in writable if os.path.isdir(w)})
    protected = [os.fsencode(p) for p in PROC_READ_ONLY if os.path.exists(p)]
    for folder in [*folders, *protected]:  # its own mount, so that it can be judged apart from the mount it is in
        _check(_libc.mount(folder, folder, None, MS_BIND | MS_REC, None), f"bind {os.fsdecode(folder)}")
    keep = [*folders, *(os.fsencode(p) for p in ALWAYS_WRITABLE)]
    points = current_mounts()
    use_setattr = setattr_call
    for point in dict.fromkeys(points):
        if beneath_any(point, keep) and not beneath_any(point, protected):
            continue
        if use_setattr:
            attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY, 0, 0, 0)
            if _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, point, 0, ctypes.byref(attr), ctypes.sizeof(attr)) == 0:
                continue
            err = ctypes.get_errno()
            if err == 38:  # ENOSYS: an older kernel
                use_setattr = False
            elif err in (2, 13):  # ENOENT, EACCES: a mount this user cannot reach by its path (nor can the candidate)
                continue
            else:
                raise LayerError(f"mount_setattr {os.fsdecode(point)} read-only: {os.strerror(err)}")
        _remount_read_only(point)
    os.chdir(os.getcwd())  # the working folder was entered through the mount beneath its bind: enter it anew


def minimal_dev(*, gpu_devices: bool, shm: SharedMemoryFolder | None = None) -> None:
    """Put a tmpfs over ``/dev`` holding only ``DEVICES_KEPT`` (and ``nvidia*`` with ``gpu_devices``), each bound from
    the machine's, and ``DEVICE_LINKS``: no disk, loop, input, kvm, watchdog or other device node a uid-0 candidate
    without capabilities could still open by the file modes (a raw disk holds every file a hidden path hides). With
    ``shm``, ``/dev/shm`` is a tmpfs of the candidate's own instead of the machine's (``private_shm``)."""
    names = [name for name in DEVICES_KEPT if os.path.exists(f"/dev/{name}") and not (shm and name == "shm")]
    if gpu_devices:
        names += sorted(name for name in os.listdir("/dev") if name.startswith("nvidia"))
    held = {name: os.open(f"/dev/{name}", os.O_PATH | os.O_CLOEXEC) for name in names}  # reachable once /dev is covered
    shm_held = hold_shm_folders(shm) if shm is not None else {}
    try:
        _check(_libc.mount(b"tmpfs", b"/dev", b"tmpfs", MS_NOSUID | MS_NOEXEC, b"mode=0755,size=64k"), "mount /dev")
        for name, fd in held.items():
            target = f"/dev/{name}"
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.mkdir(target)
            else:
                os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
            _check(
                _libc.mount(f"/proc/self/fd/{fd}".encode(), target.encode(), None, MS_BIND | MS_REC, None),
                f"bind /dev/{name}",
            )
            if name != "shm":  # a device reads and writes on a read-only mount; chmod and chown of the host's
                _remount_read_only(target.encode())  # node (uid 0 owns it) do not (the red team of 2026-11-30)
        for name, link in DEVICE_LINKS.items():
            os.symlink(link, f"/dev/{name}")
        _own_ptys()
        if shm is not None:
            private_shm(shm, shm_held)
    finally:
        for fd in [*held.values(), *shm_held.values()]:
            os.close(fd)
    _remount_read_only(b"/dev")


def _own_ptys() -> None:
    """A ``devpts`` instance of the candidate's own at ``/dev/pts`` (``openpty`` works, no pty of the machine is
    visible); left out where the kernel refuses it, as a missing pty is no escape."""
    os.mkdir("/dev/pts")
    options = b"newinstance,ptmxmode=0666,mode=0620"
    if _libc.mount(b"devpts", b"/dev/pts", b"devpts", MS_NOSUID | MS_NOEXEC, options) == 0:
        os.symlink("pts/ptmx", "/dev/ptmx")


def cover(path: str) -> None:
    """Put an empty, read-only folder over the folder ``path``, ``/dev/null`` over a file (nothing when it is gone)."""
    if not os.path.lexists(path):
        return
    target = os.fsencode(path)
    if os.path.isdir(path) and not os.path.islink(path):
        _check(
            _libc.mount(b"tmpfs", target, b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=4k,mode=0"),
            f"cover {path}",
        )
    else:
        _check(_libc.mount(b"/dev/null", target, None, MS_BIND, None), f"cover {path}")


def _remount_read_only(point: bytes) -> None:
    try:
        current = os.statvfs(point).f_flag
    except (PermissionError, FileNotFoundError):
        return
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    flags |= sum(mount_flag for stat_flag, mount_flag in STATVFS_TO_MOUNT if current & stat_flag)
    if not current & (os.ST_NOATIME | os.ST_RELATIME):
        flags |= MS_STRICTATIME  # a locked atime setting must be repeated as it is
    _check(_libc.mount(None, point, None, flags, None), f"remount {os.fsdecode(point)} read-only")
