"""The staging buffer: where the candidate's worker puts an output for the trusted checker, without leaving the GPU.

The checker owns the buffer (it outlives every worker) and shares it with each worker: on a GPU through CUDA IPC
(the driver's handle, ``cuda_ipc``), so
an output goes from the candidate's memory to the checker's with one device-to-device copy; on the CPU, or where
CUDA IPC is unavailable (some sandboxed runtimes), through a shared host-memory block. The worker copies an output in
stream order right after the call (that copy doubles as the deferred-work check's early copy), synchronises, and
tells the checker where it is; the checker reads it only while the worker waits for the answer (or, for a correctness
output it judges while the worker goes on, takes a private copy before answering), so no code of the candidate runs
while the buffer is read.

Offsets are aligned so that any dtype can be viewed at them.

Where the session gives the checker a staging folder (``settings.STAGING_DIR``), the host-memory block is a file in
it, mapped by both sides: a candidate's ``/dev/shm`` is its own, holding that folder and nothing else of the
machine's (``containment.fences.private_shm``), so no other evaluation's buffer is within its reach.
"""

from __future__ import annotations

import mmap
import os
import secrets
from typing import Any

from ksearch import settings
from ksearch.contracts.exchange import StagingHandle
from ksearch.tools.evaluator.shared import cuda_ipc
from ksearch.tools.evaluator.shared import tensor_access as ta

ALIGN = 256
HEADER = ALIGN
"""The buffer's first bytes, never staged over: CUDA IPC's probe bytes lie there (``cuda_ipc.export``), and every
worker that opens the buffer reads them, the session's later workers after earlier ones staged their outputs. Outputs
staged from offset 0 overwrote them, so every evaluation after a session's first found "not the checker's bytes" and
the session fell back to host memory, whose copies the timing rules do not allow for (an H100, 2026-12-07: each
later TriMul evaluation rejected for time between windows)."""
MIN_BYTES = 64 << 20
"""The session's staging folder beneath ``/dev/shm``, given to the checker."""
_OWNED_HERE: set[str] = set()
"""Shared-memory blocks this process created (a writer in the same process, as in tests, must not untrack them)."""


def aligned(nbytes: int) -> int:
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


def layout(sizes: list[int]) -> tuple[list[int], int]:
    """Byte offsets of consecutive blocks of ``sizes`` bytes, after the ``HEADER``, and the total bytes they need."""
    offsets, total = [], HEADER
    for size in sizes:
        offsets.append(total)
        total += aligned(size)
    return offsets, total


def dtype_of(name: str) -> Any:
    """``'torch.float32'`` -> ``torch.float32`` (only real torch dtypes are accepted)."""
    import torch

    value = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"not a torch dtype: {name!r}")
    return value


class StagingOwner:
    """The checker's side: allocates the buffer, grows it on demand, and hands out views of it."""

    def __init__(self, device: str, *, prefer_ipc: bool = True) -> None:
        self.device = device
        self.use_ipc = prefer_ipc and device.startswith("cuda")
        self.buffer: Any = None
        self._shm: Any = None
        self._file: tuple[str, mmap.mmap] | None = None
        self.handle: StagingHandle | None = None
        self.generation = 0

    def ensure(self, nbytes: int) -> StagingHandle:
        """A handle to a buffer of at least ``nbytes`` (the current one when it is large enough)."""
        if self.handle is not None and self.handle.nbytes >= nbytes:
            return self.handle
        size = max(aligned(nbytes), MIN_BYTES)
        self.release()
        self.generation += 1
        if self.use_ipc:
            import torch

            try:
                self.handle = self._allocate_ipc(size)
                return self.handle
            except torch.OutOfMemoryError:
                # The device is full for now (a KernelBench input set of 6.4 GB, handed over): the caller's
                # out-of-memory handling applies. Host memory for good would time every later copy at host speed.
                self.release()
                self.handle = None
                raise
            except Exception:  # noqa: BLE001 - no CUDA IPC here: fall back to shared host memory
                self.use_ipc = False
                self.release()
        self.handle = self._allocate_shm(size)
        return self.handle

    def renew_header(self) -> StagingHandle | None:
        """New random bytes at the start of a CUDA IPC buffer, and the handle that names them (the current handle
        elsewhere). A candidate's process maps the buffer and can write over its header; every later worker would then
        find "not the checker's bytes" and refuse the buffer. Renewed at each evaluation's start, a header one
        candidate spoilt spoils no other evaluation."""
        if self.handle is None or self.handle.kind != "cuda_ipc" or self.buffer is None:
            return self.handle
        import torch

        with torch.cuda.device(self.buffer.device):
            exported = cuda_ipc.export(self.buffer)
        self.handle = self.handle.model_copy(update={"ipc": exported.encode()})
        return self.handle

    def _allocate_ipc(self, size: int) -> StagingHandle:
        import torch

        self.buffer = torch.empty(size, dtype=torch.uint8, device=self.device)
        with torch.cuda.device(self.buffer.device):
            exported = cuda_ipc.export(self.buffer)
        return StagingHandle(kind="cuda_ipc", nbytes=size, generation=self.generation, ipc=exported.encode())

    def _allocate_shm(self, size: int) -> StagingHandle:
        from multiprocessing import shared_memory

        import torch

        folder = settings.STAGING_DIR.raw()
        if folder:
            path, mapped = map_file(os.path.join(folder, f"buffer-{secrets.token_hex(8)}"), size, create=True)
            self._file = (path, mapped)
            self.buffer = torch.frombuffer(mapped, dtype=torch.uint8)
            return StagingHandle(kind="shm", nbytes=size, generation=self.generation, shm_path=path)
        self._shm = shared_memory.SharedMemory(create=True, size=size)
        _OWNED_HERE.add(self._shm.name)
        self.buffer = torch.frombuffer(self._shm.buf, dtype=torch.uint8)
        return StagingHandle(kind="shm", nbytes=size, generation=self.generation, shm_name=self._shm.name)

    def tensor(self, offset: int, shape: list[int], dtype: str, *, private: bool = False) -> Any:
        """The staged tensor at ``offset``: a view of the buffer (copied to the device when it lives in host memory),
        or with ``private`` always a copy in this process's own memory, which no worker can reach."""
        import math

        torch_dtype = dtype_of(dtype)
        nbytes = math.prod(shape) * torch_dtype.itemsize
        if offset < HEADER or offset % ALIGN or offset + nbytes > self.buffer.numel():
            raise ValueError(f"staged output [{offset}, {offset + nbytes}) lies outside the buffer")
        view = self.buffer[offset : offset + nbytes].view(torch_dtype).view(shape)
        if self.use_ipc or self.device == "cpu":
            return view.clone() if private else view
        return view.to(self.device)

    def release(self) -> None:
        self.buffer = None
        if self._file is not None:
            path, mapped = self._file
            self._file = None
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            try:
                mapped.close()
            except BufferError:
                pass  # a view is still alive somewhere; the memory goes with the process
        if self._shm is not None:
            name = self._shm.name
            try:
                self._shm.unlink()
            except FileNotFoundError:
                pass
            try:
                self._shm.close()
            except BufferError:
                pass  # a view is still alive somewhere; the memory goes with the process
            _OWNED_HERE.discard(name)
            self._shm = None


class StagingWriter:
    """The worker's side: opens the checker's buffer and copies outputs into it in stream order."""

    def __init__(self, handle: StagingHandle) -> None:
        self.handle = handle
        self.buffer: Any = None
        self._shm: Any = None
        self._mapped: mmap.mmap | None = None
        self._ipc: cuda_ipc.MappedBuffer | None = None
        self.open(handle)

    def open(self, handle: StagingHandle) -> None:
        import torch

        self.close()
        self.handle = handle
        if handle.kind == "cuda_ipc":
            self._ipc = cuda_ipc.MappedBuffer(cuda_ipc.ExportedBuffer.decode(handle.ipc), handle.nbytes)
            self.buffer = self._ipc.tensor
        elif handle.shm_path:
            _, mapped = map_file(handle.shm_path, handle.nbytes, create=False)
            self._mapped = mapped
            self.buffer = torch.frombuffer(mapped, dtype=torch.uint8)
        else:
            from multiprocessing import resource_tracker, shared_memory

            self._shm = shared_memory.SharedMemory(name=handle.shm_name)
            if handle.shm_name not in _OWNED_HERE:
                try:  # the checker owns the block: this process must not unlink it at exit
                    resource_tracker.unregister(self._shm._name, "shared_memory")  # noqa: SLF001
                except Exception:  # noqa: BLE001 - older Pythons track differently; unlinking is then the owner's
                    pass
            self.buffer = torch.frombuffer(self._shm.buf, dtype=torch.uint8)

    def fits(self, nbytes: int) -> bool:
        return nbytes <= self.handle.nbytes

    def stage(self, tensors: list[Any]) -> list[int]:
        """Copy ``tensors`` (any layout, any device) into the buffer, enqueued on the current stream; their offsets.
        The tensors are the candidate's: read through ``tensor_access`` only, so no method of theirs runs."""
        offsets, _ = layout([ta.nbytes(t) for t in tensors])
        for tensor, offset in zip(tensors, offsets, strict=True):
            target = ta.typed_view(self.buffer, offset, ta.dtype(tensor), ta.shape(tensor))
            ta.copy_into(target, ta.detach(tensor), non_blocking=self.handle.kind == "cuda_ipc")
        return offsets

    def view(self, offset: int, like: Any) -> Any:
        """The staged copy at ``offset`` of a tensor shaped like ``like`` (a candidate's tensor: read by type)."""
        return ta.typed_view(self.buffer, offset, ta.dtype(like), ta.shape(like))

    def close(self) -> None:
        self.buffer = None
        if self._ipc is not None:
            self._ipc.close()
            self._ipc = None
        if self._mapped is not None:
            try:
                self._mapped.close()
            except BufferError:
                pass
            self._mapped = None
        if self._shm is not None:
            try:
                self._shm.close()
            except BufferError:
                pass
            self._shm = None


def map_file(path: str, size: int, *, create: bool) -> tuple[str, mmap.mmap]:
    """``path`` mapped shared, read and write (``create``: a new file of ``size`` bytes, this user's alone)."""
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if create:
            os.ftruncate(fd, size)
        return path, mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
