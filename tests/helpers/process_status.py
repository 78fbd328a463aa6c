"""Run as ``python -P -m process_status`` (tests/helpers on PYTHONPATH): prints, as one JSON line, what a process the
evaluator started can see of itself, for tests/tools/test_fork_server.py to compare a forked process with one that
started its own Python."""

from __future__ import annotations

import ctypes
import json
import os
import sys

FIELDS = ("Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")


def _status() -> dict[str, str]:
    with open("/proc/self/status") as f:
        pairs = (line.split(":", 1) for line in f if ":" in line)
        return {k: v.strip() for k, v in pairs if k in FIELDS}


def _namespaces() -> dict[str, str]:
    found = {}
    for kind in ("user", "pid", "mnt", "net", "ipc"):
        try:
            found[kind] = os.readlink(f"/proc/self/ns/{kind}")
        except OSError:
            found[kind] = ""
    return found


def main() -> None:
    message_fd = os.environ.get("KSEARCH_MSG_FD", "")
    report = {
        "argv": sys.argv[1:],
        "name": __name__,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "ppid": os.getppid(),
        "sid_is_pid": os.getsid(0) == os.getpid(),
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
        "message_fd_open": bool(message_fd) and os.path.exists(f"/proc/self/fd/{message_fd}"),
        "status": _status(),
        "dumpable": ctypes.CDLL(None).prctl(3, 0, 0, 0, 0),  # PR_GET_DUMPABLE
        "namespaces": _namespaces(),
        "stdin": sys.stdin.read(),
        "forked": b"ksearch-fork-server-" in open("/proc/self/environ", "rb").read(),  # the server's HOME
        "cmdline": [a.decode() for a in open("/proc/self/cmdline", "rb").read().split(b"\0") if a],
    }
    print(json.dumps(report), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)


if __name__ == "__main__":
    main()
