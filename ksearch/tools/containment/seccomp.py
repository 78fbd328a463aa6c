"""The ``seccomp`` layer: the system-call filter as classic BPF, and its installation (with no_new_privs).

Standard library only: the launcher runs before every worker.
"""

from __future__ import annotations

import ctypes

from ksearch.tools.containment.syscalls import LayerError
from ksearch.tools.containment.syscalls import check as _check
from ksearch.tools.containment.syscalls import libc as _libc

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
