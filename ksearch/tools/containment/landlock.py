"""Landlock (Linux 5.13+) through ``ctypes``: an unprivileged process restricts itself and everything it starts.

Why our own forty lines rather than a binding from PyPI: the maintained kernel interface is three system calls and
two structs, stable by the kernel's ABI promise; the Python packages found (``landlock`` 1.0.0.dev5, alpha) cover
file rules only, not the network rules (ABI 4) and scopes (ABI 6) used here, and check ``errno`` even on success.

What a Landlock domain gives a candidate process, whatever its uid and capabilities (root included):
- file rules: it may read, write or execute only beneath the hierarchies it was given (``/proc/PID`` included);
- ptrace scoping (every ABI): no ``ptrace`` attach to a process outside the domain. Measured on Linux 6.18 as root:
  reading ``/proc/PPID/environ`` was still allowed, so this is not what keeps the environment of others away
  (``launcher``: namespaces, no capabilities, or hiding those ``/proc`` folders);
- ABI 4: no TCP ``bind``/``connect``; ABI 6: no signals to, and no abstract UNIX sockets of, processes outside.
"""

from __future__ import annotations

import ctypes
import os

CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446  # the same numbers on every architecture
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

READ = EXECUTE | READ_FILE | READ_DIR
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE
"""Rights a rule on a file (not a directory) may carry."""


class LandlockError(OSError):
    """Landlock is missing or refused a request."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # packed in the kernel's header
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _call(*args: object) -> int:
    result = _libc.syscall(*args)
    if result < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, os.strerror(err))
    return int(result)


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is missing or disabled."""
    try:
        return _call(ctypes.c_long(CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    except LandlockError:
        return 0


def write_rights(abi: int) -> int:
    rights = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO
    rights |= MAKE_BLOCK | MAKE_SYM
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    return rights


class Ruleset:
    """A ruleset handling reads and writes of files (not device ioctls), and on ABI 4+ TCP, on ABI 6+ scopes."""

    def __init__(self, abi: int, *, abstract_sockets: bool = True, tcp: bool = True) -> None:
        """``abstract_sockets``: refuse abstract Unix sockets outside the domain too (redundant in a network namespace
        of its own, where no abstract socket outside is visible); ``tcp``: refuse TCP binds and connections (off
        only for a process profiled by Nsight Compute, whose injected library talks to ncu: ``tools.counters``)."""
        self.abi = abi
        self.handled_fs = READ | write_rights(abi)
        scopes = 0
        if abi >= 6:
            scopes = SCOPE_SIGNAL | (SCOPE_ABSTRACT_UNIX_SOCKET if abstract_sockets else 0)
        attr = _RulesetAttr(self.handled_fs, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 and tcp else 0, scopes)
        size = 24 if abi >= 6 else 16 if abi >= 4 else 8
        self.fd = _call(ctypes.c_long(CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))

    def allow(self, path: str, rights: int) -> None:
        """Allow ``rights`` beneath ``path`` (a file gets only the rights a file can have)."""
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            if not os.path.isdir(path):
                rights &= FILE_ONLY
            rights &= self.handled_fs
            if rights:
                attr = _PathBeneathAttr(rights, fd)
                _call(
                    ctypes.c_long(ADD_RULE),
                    ctypes.c_int(self.fd),
                    ctypes.c_int(RULE_PATH_BENEATH),
                    ctypes.byref(attr),
                    ctypes.c_uint32(0),
                )
        finally:
            os.close(fd)

    def restrict_self(self) -> None:
        """Enforce the ruleset on this process and everything it starts (needs no_new_privs, set here)."""
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise LandlockError(err, os.strerror(err))
        _call(ctypes.c_long(RESTRICT_SELF), ctypes.c_int(self.fd), ctypes.c_uint32(0))
        os.close(self.fd)
