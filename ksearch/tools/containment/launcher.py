"""The child's side of containment: ``python -P -m ksearch.tools.containment.launcher SPEC -- PROGRAM ARGS...``.

It applies the layers the parent chose (``policy``), in this order, then ``exec``s the program (a candidate worker):

``limits``  the spec's ``limits`` (``Limits``): ``RLIMIT_AS`` (or ``RLIMIT_DATA``), ``RLIMIT_FSIZE``, no core files,
            an OOM score of 1000, and once in the user namespace ``RLIMIT_NPROC`` (counted there).
``userns``  a new user namespace (the same uid and gid inside): from inside it, nothing outside can be ptraced and
            no ``/proc/PID/{environ,mem,fd}`` outside it can be read, even as root, since its capabilities count only
            inside it. No user namespace can be made inside it, so every process the candidate starts stays in it:
            the parent kills them all by it when the worker ends, even those that left its process group.
``pidns``   with it, new PID and mount namespaces and a fresh ``/proc``: no other process of the machine is visible,
            not even by ``/proc/*/cmdline``, and a process the candidate starts in a new session still dies with the
            worker (the namespace ends with its first process, a reaper whose child is the worker). The launcher
            stays outside as the namespace's parent and exits as the worker did.
``mountns`` a mount namespace of its own (``pidns``'s, or a new one) in which each ``fenced`` folder (``/tmp``,
            ``/run``, the homes...) is emptied but for the ``readable`` and writable paths beneath it (``fence``),
            the hidden paths are covered (an empty
            read-only folder over a folder, ``/dev/null`` over a file) and every mount is read-only but the writable
            folders (bind-mounted onto themselves first), ``/dev`` and ``/proc`` (not its system settings:
            ``PROC_READ_ONLY``). Without Landlock (a machine that refuses it) this is what keeps the workspace and the
            home's key files unread, and the ksearch installation the next checker imports, a workspace's database or
            a cache another process reads unchanged. Undoing a mount needs a capability, and ``caps`` leaves none.
            ``/dev`` is a minimal one (``minimal_dev``, where the spec's ``devices`` asks; a GPU's keeps ``nvidia*``):
            no disk, loop, input or other device node that a uid-0 candidate without capabilities could still open
            by the file modes; with the spec's ``shm``, its ``/dev/shm`` is a tmpfs of its own holding only the
            machine's folders it names (``private_shm``).
``netns``   a network namespace of its own, with only a loopback interface that is down: no TCP, UDP or abstract
            socket reaches anything outside (a Dask scheduler, a model server, another process's port), where
            Landlock's network rules are missing or do not reach (UDP, abstract sockets before Linux 6.12). With the
            spec's ``loopback``, that interface is up: it is the namespace's own, so only processes inside reach it
            (Nsight Compute, run inside with the candidate, talks to its library in the candidate's process).
``ipcns``   an IPC namespace of its own: no System V message queue, semaphore or shared-memory segment, and no POSIX
            message queue, of any process outside (a red-team review of 2026-11-30 sent a message into a same-user
            queue outside); with ``mountns``, every ``mqueue`` mount covered (its files are the host's queues).
            POSIX shared memory (``/dev/shm`` files, which CUDA and NCCL use) is not affected.
``caps``    every capability dropped from the bounding set (root keeps uid 0 but has no capability after ``exec``:
            no ``CAP_SYS_PTRACE``, no ``CAP_DAC_OVERRIDE``), and no_new_privs (no setuid program gives them back).
``seccomp`` a system-call filter (last, with no_new_privs): ``setsid`` and ``setpgid`` succeed without effect, so every
            process the candidate starts stays in the worker's process group, which the parent's group kill takes whole
            (a process that forked faster than /proc is read slipped past the kill by namespace: the red team of
            2026-11-30); ``connect`` fails as if nothing listened there, and so does ``sendto`` with an address, so no
            service listening on a path (a same-user Python forkserver ran the red team's code outside every layer;
            root's docker socket) can be reached; ``io_uring`` (which would connect past the filter) and 32-bit or x32
            system calls (other numbers) fail; with ``ip_sockets`` false (a CPU's candidate), creating an IP or packet
            socket fails too. Creating a Unix socket stays allowed: CUDA's start needs one (it failed
            with error 304 when ``socket(AF_UNIX)`` did, on an H200, 2026-11-30). With the spec's ``connect`` (only
            beside ``netns`` and ``mountns``, where the only listeners in reach are the sandbox's own), ``connect``
            and ``sendto`` pass: Nsight Compute connects to its library in the candidate's process.
``landlock`` reads beneath the spec's ``readable`` paths only (the allow-list; everywhere where the spec names
            none) but the hidden paths, lists the ``listable`` folders, writes only beneath the given folders and
            ``/dev`` (and, for
            a GPU's candidate, the spec's ``cuda``, ``/proc``: CUDA's start writes beneath its process's entry, in
            every process that starts it), no TCP (ABI 4+), no signals or (without ``netns``) abstract sockets outside
            (ABI 6+), no ptrace attach outside.
            Where nothing else keeps the ancestors' ``/proc`` entries away (an ordinary user without user namespaces),
            the parent hides their ``/proc/PID`` folders here too.

A layer that fails is an error (exit code ``FAILED``), never silently skipped: the parent decided from a probe of the
same steps (``--probe``), which instead reports what worked as one JSON line. Only the standard library is imported:
this runs before every worker.

The layers are applied here, in a process of one thread (a user namespace is refused to a process of several, and a
per-thread layer would not bind threads that already run), and then the program is ``exec``ed: a worker, or a
trusted tool that starts the worker inside the same layers (the spec's ``tool``: Nsight Compute, whose library
starts threads in every process it profiles). The tool's child names no parent to die with
(``KSEARCH_PARENT_PID``): its parent is the tool.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import re
import signal
import stat
import sys
from collections.abc import Callable

from ksearch import settings
from ksearch.tools.containment.fences import SharedMemoryFolder, fence, hold_shm_folders, private_shm
from ksearch.tools.containment.rlimits import Limits, apply_limits, limit_processes
from ksearch.tools.containment.syscalls import (
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

FAILED = 121
"""Exit status of a launcher that could not apply a layer it was asked for."""
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
CLONE_NEWIPC = 0x08000000
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
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 47, 4
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sH22x"
"""``struct ifreq`` with its flags: the interface's name, then ``ifr_flags`` in a union of 24 bytes."""


def readable_roots(
    hidden: list[str],
    listdir: Callable[[str], list[str]] = os.listdir,
    is_link: Callable[[str], bool] = os.path.islink,
    roots: tuple[str, ...] | list[str] = ("/",),
) -> tuple[list[str], list[str]]:
    """(hierarchies to allow reading whole, folders to allow listing only) so that everything beneath ``roots`` (the
    allow-list; by default the whole file system) is readable except the files beneath ``hidden`` (absolute,
    resolved paths).

    Landlock only allows, so "all but X" is every sibling of every ancestor of X, read whole. The ancestors
    themselves may be listed (with everything beneath them, hidden folders included: names only, no contents), since
    Python's import system lists every folder on ``sys.path`` and the workspace often lies inside the project.
    Symbolic links are left out: a link is followed to its target, which is judged where it lies. A folder that
    cannot be listed is allowed whole."""
    hidden_set = {os.path.normpath(h) for h in hidden if h}
    listed: list[str] = []

    def beneath(path: str, root: str) -> bool:
        return path.startswith(root.rstrip("/") + "/")

    def visit(path: str) -> list[str]:
        if path in hidden_set:
            return []
        if not any(beneath(h, path) for h in hidden_set):
            return [path]
        try:
            names = sorted(listdir(path))
        except OSError:
            return [path]
        listed.append(path)
        found: list[str] = []
        for name in names:
            child = os.path.join(path, name)
            if not is_link(child):
                found.extend(visit(child))
        return found

    whole: list[str] = []
    for root in dict.fromkeys(os.path.normpath(r) for r in roots):
        whole.extend(visit(root))
    return whole, listed


def die_with(parent_pid: int) -> None:
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


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


SECCOMP_SYSCALLS = {  # setsid, setpgid, connect, sendto, io_uring_setup; audit arch; whether x32 numbers exist
    "x86_64": ((112, 109, 42, 44, 425), 0xC000003E, True),
    "aarch64": ((157, 154, 203, 206, 425), 0xC00000B7, False),
}
SOCKET_SYSCALL = {"x86_64": 41, "aarch64": 198}
IP_FAMILIES = (2, 10, 17)
"""``AF_INET``, ``AF_INET6``, ``AF_PACKET``: the sockets a CPU's candidate may not create (``refuse_ip``)."""
EPERM, ENOENT, EACCES = 1, 2, 13
SOCKET_FAMILY = 16
"""Offset of ``socket``'s first argument (the address family) in ``struct seccomp_data`` (its low word)."""
SENDTO_ADDRESS = 16 + 4 * 8
"""Offset of ``sendto``'s fifth argument (its destination address) in ``struct seccomp_data`` (low word first)."""
PR_SET_SECCOMP, SECCOMP_MODE_FILTER, PR_SET_NO_NEW_PRIVS = 22, 2, 38
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
LD_ABS, JEQ, JGE, RET = 0x20, 0x15, 0x35, 0x06


def seccomp_program(
    machine: str, *, refuse_ip: bool = False, refuse_connect: bool = True
) -> list[tuple[int, int, int, int]]:
    """The filter as classic BPF instructions (code, jump if true, jump if false, k) for ``machine``; with
    ``refuse_ip``, creating an IP or packet socket fails too (``EACCES``: a CPU's candidate needs none); without
    ``refuse_connect``, ``connect`` and ``sendto`` pass (the spec's ``connect``)."""
    if machine not in SECCOMP_SYSCALLS:
        raise LayerError(f"seccomp: no system-call table for {machine}")
    (setsid, setpgid, connect, sendto, io_uring), arch, x32 = SECCOMP_SYSCALLS[machine]
    deny, fake_success, nobody_there = RET_ERRNO | EPERM, RET_ERRNO | 0, RET_ERRNO | ENOENT
    head = [(LD_ABS, 0, 0, 4), (JEQ, 1, 0, arch), (RET, 0, 0, deny), (LD_ABS, 0, 0, 0)]
    if x32:
        head += [(JGE, 0, 1, 0x40000000), (RET, 0, 0, deny)]
    body = [
        (JEQ, 0, 1, setsid),
        (RET, 0, 0, fake_success),
        (JEQ, 0, 1, setpgid),
        (RET, 0, 0, fake_success),
        (JEQ, 0, 1, io_uring),
        (RET, 0, 0, deny),
    ]
    if refuse_connect:
        body += [
            (JEQ, 0, 1, connect),
            (RET, 0, 0, nobody_there),  # ENOENT: what CUDA meets where no MPS daemon listens
            (JEQ, 0, 5, sendto),  # with an address (either word not zero): a datagram to a path
            (LD_ABS, 0, 0, SENDTO_ADDRESS),
            (JEQ, 0, 2, 0),
            (LD_ABS, 0, 0, SENDTO_ADDRESS + 4),
            (JEQ, 1, 0, 0),
            (RET, 0, 0, nobody_there),
        ]
    tail = [(RET, 0, 0, RET_ALLOW)]
    if refuse_ip:
        inet, inet6, packet = IP_FAMILIES
        tail = [
            (LD_ABS, 0, 0, 0),  # the call's number again (the sendto branch loaded an argument)
            (JEQ, 0, 5, SOCKET_SYSCALL[machine]),
            (LD_ABS, 0, 0, SOCKET_FAMILY),
            (JEQ, 2, 0, inet),
            (JEQ, 1, 0, inet6),
            (JEQ, 0, 1, packet),
            (RET, 0, 0, RET_ERRNO | EACCES),
            (RET, 0, 0, RET_ALLOW),
        ]
    return head + body + tail


def install_seccomp(machine: str, *, refuse_ip: bool = False, refuse_connect: bool = True) -> None:
    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Instruction))]

    instructions = seccomp_program(machine, refuse_ip=refuse_ip, refuse_connect=refuse_connect)
    table = (Instruction * len(instructions))(*(Instruction(*i) for i in instructions))
    program = Program(len(instructions), table)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0), "prctl(PR_SET_SECCOMP)")


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


def apply_landlock(
    hidden: list[str],
    writable: list[str],
    *,
    readable: list[str] | None = None,
    listable: list[str] | tuple[str, ...] = (),
    abstract_sockets: bool = True,
    network: bool = False,
) -> int:
    """Landlock over this process and what it starts: reads beneath ``readable`` (the allow-list; None: everywhere)
    but not beneath ``hidden``, listing ``listable`` folders (names only: Python lists every folder on its path),
    writes beneath ``writable``, and the network and scope rules of ``landlock.Ruleset`` (``network``: none for TCP
    and abstract sockets)."""
    from ksearch.tools.containment import landlock

    abi = landlock.abi_version()
    if abi < 1:
        raise LayerError("Landlock is not available in this kernel")
    try:
        ruleset = landlock.Ruleset(abi, abstract_sockets=abstract_sockets and not network, tcp=not network)
        whole, listed = readable_roots(hidden, roots=readable if readable is not None else ("/",))
        listed = [*listed, *listable]
        rules = [(root, landlock.READ) for root in whole] + [(folder, landlock.READ_DIR) for folder in listed]
        rules += [(folder, landlock.READ | landlock.write_rights(abi)) for folder in writable]
        for path, rights in rules:
            try:
                ruleset.allow(path, rights)
            except FileNotFoundError:
                continue  # gone since it was listed (another process's temporary folder): nothing to allow
        ruleset.restrict_self()
    except OSError as exc:
        raise LayerError(f"Landlock: {exc}") from None
    return abi


def apply(spec: dict, *, probe: bool) -> tuple[list[str], dict[str, str]]:
    """Apply the layers of ``spec`` in order; (layers applied, {layer: why it failed}) - failures raise unless
    ``probe``. With ``pidns`` this returns only in the namespace's first process (the launcher waits for it)."""
    layers: list[str] = list(spec.get("layers", []))
    applied: list[str] = []
    failed: dict[str, str] = {}

    def attempt(name: str, step: Callable[[], object]) -> None:
        if name not in layers:
            return
        try:
            step()
            applied.append(name)
        except (LayerError, OSError) as exc:
            if not probe:
                raise LayerError(f"{name}: {exc}") from None
            failed[name] = str(exc)[:200]

    def in_user_namespace(name: str) -> bool:
        """Whether layer ``name``, which needs the user namespace, may be attempted (else it has failed)."""
        if name not in layers:
            return False
        if "userns" in applied:
            return True
        failed[name] = "needs the user namespace"
        if not probe:
            raise LayerError(f"{name}: needs the user namespace")
        return False

    limits = Limits(**spec.get("limits", {}))
    attempt("limits", lambda: apply_limits(limits))
    attempt("userns", lambda: enter_namespaces("pidns" in layers))
    if "limits" in applied and "userns" in applied:
        limit_processes(limits.processes)
    if in_user_namespace("pidns"):
        _fork_into_namespace()
        attempt("pidns", fresh_proc)
    readable = spec.get("readable")
    if in_user_namespace("mountns"):
        hidden, writable = list(spec.get("hidden", [])), list(spec.get("writable", []))
        devices = str(spec.get("devices", "all"))
        shm = SharedMemoryFolder(**spec["shm"]) if spec.get("shm") is not None else None
        attempt(
            "mountns",
            lambda: private_mounts(
                hidden,
                writable,
                new_namespace="pidns" not in applied,
                devices=devices,
                fenced=list(spec.get("fenced", [])),
                keep=list(readable or []),
                shm=shm,
            ),
        )
    if in_user_namespace("netns"):
        attempt("netns", lambda: own_network(loopback=bool(spec.get("loopback"))))
    if in_user_namespace("ipcns"):
        attempt("ipcns", lambda: own_ipc_namespace(cover_mqueues="mountns" in applied))
    attempt("caps", drop_capabilities)
    # in a network namespace of its own no abstract socket outside is visible: the scope would add nothing there
    # CUDA's start writes beneath its process's /proc/PID (error 304 otherwise), in every process that starts CUDA
    # (Inductor's compile workers too, 2026-11-30): for a GPU's candidate /proc stays writable, as mountns leaves it
    writable = [*spec.get("writable", []), *(["/proc"] if spec.get("cuda") else [])]
    attempt(
        "landlock",
        lambda: apply_landlock(
            list(spec.get("hidden", [])),
            writable,
            readable=readable,
            listable=list(spec.get("listable", [])),
            abstract_sockets="netns" not in applied,
            network=bool(spec.get("network")),
        ),
    )
    refuse_ip, refuse_connect = not spec.get("ip_sockets", True), not spec.get("connect")
    attempt("seccomp", lambda: install_seccomp(platform.machine(), refuse_ip=refuse_ip, refuse_connect=refuse_connect))
    return applied, failed


def _fork_into_namespace() -> None:
    """Fork the namespace's first process, which forks the worker and reaps; returns in the worker (pid 2: a pid 1
    would ignore the signals it raises itself, so a candidate's segfault would not end it). This (outer) process
    waits and exits as the worker did."""
    status_r, status_w = os.pipe()
    alive_r, alive_w = os.pipe()
    # opened before any fork: the worker's mount layer then changes the /dev this namespace's processes see, and
    # opening /dev/null after it raced with it (CI, 2026-11-30: FileNotFoundError in the namespace's first process)
    null = os.open(os.devnull, os.O_RDONLY)
    first = os.fork()
    if first == 0:
        os.close(status_r)
        os.close(alive_w)
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if _closed(alive_r):  # the launcher died before the request took effect
            os._exit(1)
        worker = os.fork()
        if worker == 0:
            os.close(status_w)
            os.close(alive_r)
            os.close(null)
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            os.environ[settings.PARENT_PID.name] = "1"  # its parent, the namespace's first process
            return
        _close_all_but({1, 2, status_w}, null)
        while True:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                os._exit(FAILED)
            except InterruptedError:
                continue
            if pid == worker:
                os.write(status_w, status.to_bytes(4, "little"))
                os._exit(0)  # the namespace, and whatever the candidate left in it, ends here
    os.close(status_w)
    os.close(alive_r)
    _close_all_but({1, 2, status_r, alive_w}, null)
    while True:
        try:
            os.waitpid(first, 0)
            break
        except InterruptedError:
            continue
    data = os.read(status_r, 4)
    if len(data) != 4:
        os._exit(FAILED)
    status = int.from_bytes(data, "little")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be caught, nor set to their default
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else FAILED)


def _closed(fd: int) -> bool:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 1) == b""
    except BlockingIOError:
        return False


def _close_all_but(keep: set[int], null: int) -> None:
    """Close every descriptor but ``keep`` and the message pipe (stdin becomes ``null``, /dev/null opened before the
    worker's mounts: the worker reads its requests alone). The message pipe stays open here until this process exits,
    after the worker: the parent takes its end of file for the worker's exit, and must find the exit status (mirrored
    by the launcher) by then. (No listing of ``/proc/self/fd``: the namespace's own /proc may already be mounted over
    it.)"""
    os.dup2(null, 0)
    message = settings.MSG_FD.raw()
    keep = keep | {0} | ({int(message)} if message.isdigit() else set())
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def main(argv: list[str]) -> int:
    probe = bool(argv) and argv[0] == "--probe"
    if probe:
        argv = argv[1:]
    if not argv:
        print("usage: launcher [--probe] SPEC -- PROGRAM ARGS...", file=sys.stderr)
        return 2
    spec = json.loads(argv[0])
    program = argv[2:] if len(argv) > 1 and argv[1] == "--" else []
    parent = settings.PARENT_PID.number()
    if parent is not None:
        die_with(parent)
    try:
        applied, failed = apply(spec, probe=probe)
    except LayerError as exc:
        print(f"ksearch containment could not apply {exc}", file=sys.stderr)
        return FAILED
    if probe:
        print(json.dumps({"applied": applied, "failed": failed}), flush=True)
        return 0
    if not program:
        return 0
    if spec.get("tool"):  # a trusted tool that starts the worker: the worker's parent is the tool, not ours
        os.environ[settings.PARENT_PID.name] = ""
    try:
        os.execv(program[0], program)
    except OSError as exc:  # inside the layers, the program (a tool's installation) may be out of reach
        print(f"ksearch containment could not start {program[0]}: {exc.strerror or exc}", file=sys.stderr)
    return FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
