"""The child's side of containment: ``python -P -m ksearch.tools.containment.launcher SPEC -- PROGRAM ARGS...``.

It applies the layers the parent chose (``policy``), in this order, then ``exec``s the program (a candidate worker):

``userns``  a new user namespace (the same uid and gid inside): from inside it, nothing outside can be ptraced and
            no ``/proc/PID/{environ,mem,fd}`` outside it can be read, even as root, since its capabilities count only
            inside it.
``pidns``   with it, new PID and mount namespaces and a fresh ``/proc``: no other process of the machine is visible,
            not even by ``/proc/*/cmdline``, and a process the candidate starts in a new session still dies with the
            worker (the namespace ends with its first process, a reaper whose child is the worker). The launcher
            stays outside as the namespace's parent and exits as the worker did.
``caps``    every capability dropped from the bounding set (root keeps uid 0 but has no capability after ``exec``:
            no ``CAP_SYS_PTRACE``, no ``CAP_DAC_OVERRIDE``), and no_new_privs (no setuid program gives them back).
``landlock`` reads everywhere except the hidden paths, writes only beneath the given folders and ``/dev``, no TCP
            (ABI 4+), no signals or abstract sockets outside (ABI 6+), no ptrace attach outside. Where nothing else
            keeps the ancestors' ``/proc`` entries away (an ordinary user without user namespaces), the parent hides
            their ``/proc/PID`` folders here too.

A layer that fails is an error (exit code ``FAILED``), never silently skipped: the parent decided from a probe of the
same steps (``--probe``), which instead reports what worked as one JSON line. Only the standard library is imported:
this runs before every worker.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from collections.abc import Callable

FAILED = 121
"""Exit status of a launcher that could not apply a layer it was asked for."""
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 47, 4

_libc = ctypes.CDLL(None, use_errno=True)


class LayerError(Exception):
    """A layer could not be applied."""


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise LayerError(f"{what}: {os.strerror(err)}")


def readable_roots(
    hidden: list[str],
    listdir: Callable[[str], list[str]] = os.listdir,
    is_link: Callable[[str], bool] = os.path.islink,
) -> tuple[list[str], list[str]]:
    """(hierarchies to allow reading whole, folders to allow listing only) so that everything is readable except
    the files beneath ``hidden`` (absolute, resolved paths).

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

    return visit("/"), listed


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


def fresh_proc() -> None:
    """In the new PID and mount namespaces: keep mounts from propagating out, and mount a /proc of this namespace."""
    _check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _check(_libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount proc")


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
    _check(_libc.prctl(38, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def _has_any_capability() -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16) != 0
    except OSError:
        pass
    return False


def apply_landlock(hidden: list[str], writable: list[str]) -> int:
    from ksearch.tools.containment import landlock

    abi = landlock.abi_version()
    if abi < 1:
        raise LayerError("Landlock is not available in this kernel")
    try:
        ruleset = landlock.Ruleset(abi)
        whole, listed = readable_roots(hidden)
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

    pid_namespace = "pidns" in layers
    attempt("userns", lambda: enter_namespaces(pid_namespace))
    if pid_namespace:
        if "userns" not in applied:
            failed["pidns"] = "needs the user namespace"
            if not probe:
                raise LayerError("pidns: needs the user namespace")
        else:
            _fork_into_namespace()
            attempt("pidns", fresh_proc)
    attempt("caps", drop_capabilities)
    attempt("landlock", lambda: apply_landlock(list(spec.get("hidden", [])), list(spec.get("writable", []))))
    return applied, failed


def _fork_into_namespace() -> None:
    """Fork the namespace's first process, which forks the worker and reaps; returns in the worker (pid 2: a pid 1
    would ignore the signals it raises itself, so a candidate's segfault would not end it). This (outer) process
    waits and exits as the worker did."""
    status_r, status_w = os.pipe()
    alive_r, alive_w = os.pipe()
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
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            os.environ["KSEARCH_PARENT_PID"] = "1"  # its parent, the namespace's first process
            return
        _close_all_but({1, 2, status_w})
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
    _close_all_but({1, 2, status_r, alive_w})
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


def _close_all_but(keep: set[int]) -> None:
    """Close every descriptor but ``keep`` and the message pipe (stdin becomes /dev/null: the worker reads its requests
    alone). The message pipe stays open here until this process exits, after the worker: the parent takes its end of
    file for the worker's exit, and must find the exit status (mirrored by the launcher) by then. (No listing of
    ``/proc/self/fd``: the namespace's own /proc may already be mounted over it.)"""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    message = os.environ.get("KSEARCH_MSG_FD", "")
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
    parent = os.environ.get("KSEARCH_PARENT_PID")
    if parent:
        die_with(int(parent))
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
    os.execv(program[0], program)
    return FAILED  # unreachable: execv replaces this process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
