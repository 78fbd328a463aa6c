"""CUDA IPC of the staging buffer through the driver API alone (``cuIpcGetMemHandle`` / ``cuIpcOpenMemHandle``).

torch's own CUDA tensor sharing also keeps a reference-count file in ``/dev/shm`` that the receiving process opens;
a candidate's ``/dev/shm`` is its own (``containment.fences.private_shm``), so on the H100 every worker failed to
open the checker's buffer and fell back to host memory (2026-12-07). The driver's handle needs no file: the checker
exports the allocation that holds its buffer, the worker maps it and views it at the buffer's offset. The checker
keeps its buffer alive while any worker may write to it (it replaces it only between requests).

The checker writes random bytes (``probe``) at the buffer's start before it hands the handle out, and the worker reads
them back after mapping: a mapping that missed the buffer is refused there (the session then stages through host
memory) instead of misplacing every output, which the checker would judge wrong.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

PREFIX = "cuipc1"
HANDLE_BYTES = 64
PROBE_BYTES = 16
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1


class _IpcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


@dataclass(frozen=True)
class ExportedBuffer:
    """What a worker needs to map the checker's buffer: the allocation's handle, the buffer's offset in it, and the
    bytes the checker wrote at the buffer's start."""

    handle: bytes
    offset: int
    probe: bytes

    def encode(self) -> str:
        return f"{PREFIX}:{self.handle.hex()}:{self.offset}:{self.probe.hex()}"

    @classmethod
    def decode(cls, text: str) -> ExportedBuffer:
        parts = text.split(":")
        if len(parts) != 4 or parts[0] != PREFIX:
            raise ValueError(f"not a staging buffer's CUDA IPC handle: {text[:40]!r}")
        handle, offset, probe = bytes.fromhex(parts[1]), int(parts[2]), bytes.fromhex(parts[3])
        if len(handle) != HANDLE_BYTES or offset < 0 or len(probe) != PROBE_BYTES:
            raise ValueError(f"not a staging buffer's CUDA IPC handle: {text[:40]!r}")
        return cls(handle=handle, offset=offset, probe=probe)


_driver: Any = None


def _cuda() -> Any:
    global _driver
    if _driver is None:
        cuda = ctypes.CDLL("libcuda.so.1")
        u64, size_p, u64_p = ctypes.c_uint64, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_uint64)
        cuda.cuMemGetAddressRange_v2.argtypes = [u64_p, size_p, u64]
        cuda.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_IpcMemHandle), u64]
        cuda.cuIpcOpenMemHandle_v2.argtypes = [u64_p, _IpcMemHandle, ctypes.c_uint]
        cuda.cuIpcCloseMemHandle.argtypes = [u64]
        cuda.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        _driver = cuda
    return _driver


def _check(status: int, call: str) -> None:
    if status != 0:
        name = ctypes.c_char_p()
        _cuda().cuGetErrorName(status, ctypes.byref(name))
        raise RuntimeError(f"{call} failed: {(name.value or b'?').decode()} ({status})")


def export(buffer: Any) -> ExportedBuffer:
    """The IPC handle of the allocation holding ``buffer`` (a uint8 CUDA tensor of the current device), its offset,
    and the random bytes now written at its start (synchronised: the worker may read them at once)."""
    import secrets

    import torch

    probe = secrets.token_bytes(PROBE_BYTES)
    buffer[:PROBE_BYTES].copy_(torch.frombuffer(bytearray(probe), dtype=torch.uint8))
    torch.cuda.synchronize(buffer.device)
    pointer = buffer.data_ptr()
    cuda = _cuda()
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(pointer)), "range")
    handle = _IpcMemHandle()
    _check(cuda.cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(base.value)), "cuIpcGetMemHandle")
    raw = ctypes.string_at(ctypes.byref(handle), HANDLE_BYTES)
    return ExportedBuffer(handle=raw, offset=pointer - base.value, probe=probe)


class _DeviceBytes:
    """``nbytes`` bytes of device memory at ``pointer``, for ``torch.as_tensor`` (the CUDA array interface)."""

    def __init__(self, pointer: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (pointer, False),
            "version": 3,
            "strides": None,
        }


class MappedBuffer:
    """The worker's mapping of the checker's buffer; ``tensor`` views it (uint8, ``nbytes`` long)."""

    def __init__(self, exported: ExportedBuffer, nbytes: int) -> None:
        import torch

        index = torch.cuda.current_device()  # the worker's device (prepared before the buffer is opened)
        torch.empty(1, device=f"cuda:{index}")  # its primary context is current on this thread
        handle = _IpcMemHandle.from_buffer_copy(exported.handle)
        base = ctypes.c_uint64()
        _check(
            _cuda().cuIpcOpenMemHandle_v2(ctypes.byref(base), handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
            "cuIpcOpenMemHandle",
        )
        self._base: int | None = base.value
        self.tensor = torch.as_tensor(_DeviceBytes(base.value + exported.offset, nbytes), device=f"cuda:{index}")
        found = bytes(self.tensor[:PROBE_BYTES].cpu().tolist())
        if found != exported.probe:
            self.close()
            raise RuntimeError("the mapped staging buffer does not hold the checker's bytes")

    def close(self) -> None:
        """Unmap (no view of ``tensor`` may be used afterwards)."""
        self.tensor = None
        if self._base is not None:
            _cuda().cuIpcCloseMemHandle(ctypes.c_uint64(self._base))
            self._base = None
