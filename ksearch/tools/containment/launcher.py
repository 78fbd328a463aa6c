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

This module orders the layers, reaps the PID namespace and ``exec``s; each layer's steps are in a module of their own:
``rlimits`` (limits), ``namespaces`` (userns, pidns, netns, ipcns), ``mounts`` (mountns, with ``fences``),
``capabilities`` (caps), ``landlock_rules`` (landlock, through ``landlock``) and ``seccomp``.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import sys
from collections.abc import Callable

from ksearch import settings
from ksearch.tools.containment.capabilities import drop_capabilities
from ksearch.tools.containment.fences import SharedMemoryFolder
from ksearch.tools.containment.landlock_rules import apply_landlock
from ksearch.tools.containment.mounts import private_mounts
from ksearch.tools.containment.namespaces import enter_namespaces, fresh_proc, own_ipc_namespace, own_network
from ksearch.tools.containment.rlimits import Limits, apply_limits, limit_processes
from ksearch.tools.containment.seccomp import install_seccomp
from ksearch.tools.containment.syscalls import LayerError
from ksearch.tools.containment.syscalls import check as _check
from ksearch.tools.containment.syscalls import libc as _libc

FAILED = 121
"""Exit status of a launcher that could not apply a layer it was asked for."""
PR_SET_PDEATHSIG = 1


def die_with(parent_pid: int) -> None:
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


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
