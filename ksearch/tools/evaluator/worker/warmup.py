"""What a pre-started worker does while no candidate waits: the one-off costs of a process that compiles kernels.

A fresh process pays, on its first Triton compile, for the backend's start-up: its driver helper module is built with
the system C compiler into the (per-worker, private) Triton cache, ``ptxas`` is probed, the MLIR/LLVM pipeline is
initialised. None of that depends on the candidate, so the idle worker pays it by compiling and launching a trivial
kernel of its own before the request arrives; the candidate then waits only for its own kernels. The warm-up kernel
lives in this trusted module and its binary in the worker's own cache, which the candidate could tamper with only in
its own process (the cache is discarded with the worker).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _warm_up_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask, other=0.0) + 1.0, mask=mask)


def warm_up_triton(device: str) -> None:
    """Compile and run the trivial kernel once on ``device`` (a CUDA device)."""
    import torch

    x = torch.zeros(16, device=device)
    _warm_up_kernel[(1,)](x, 16, BLOCK=16)
    torch.cuda.synchronize(device)
