"""Honest softmax: a row-tiled online softmax tuned with ``@triton.autotune``, with a ``@triton.heuristics`` fast path.

Patterns: (n) Triton with ``@triton.autotune`` (several configs, ``key=["n_cols"]``); (h) ``@triton.heuristics``
setting ``EVEN_N`` when the row length is a multiple of the tile. One program per row: pass 1 keeps a running max
and a rescaled running sum per lane, pass 2 writes exp(x - max) / sum. Every launch rewrites the whole output, so the
autotuner's benchmark launches are harmless.

CPU interpreter: the code is interpreter-safe, but Triton's autotuner benchmarks through the active GPU driver, so
under TRITON_INTERPRET=1 today it fails with Triton's "0 active drivers" error until the worker handles autotuned
kernels on the CPU.
"""

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_N": 256}, num_warps=2),
        triton.Config({"BLOCK_N": 1024}, num_warps=4),
        triton.Config({"BLOCK_N": 2048}, num_warps=8),
        triton.Config({"BLOCK_N": 4096}, num_warps=16),
    ],
    key=["n_cols"],
)
@triton.heuristics({"EVEN_N": lambda args: args["n_cols"] % args["BLOCK_N"] == 0})
@triton.jit
def _softmax_rows(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    run_max = tl.full([BLOCK_N], float("-inf"), dtype=tl.float32)
    run_sum = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        if EVEN_N:
            v = tl.load(x_row + start + cols)
        else:
            v = tl.load(x_row + start + cols, mask=start + cols < n_cols, other=float("-inf"))
        new_max = tl.maximum(run_max, v)
        seen = new_max > float("-inf")
        run_sum = tl.where(seen, run_sum * tl.exp(run_max - new_max) + tl.exp(v - new_max), 0.0)
        run_max = new_max
    row_max = tl.max(run_max, axis=0)
    row_sum = tl.sum(run_sum * tl.exp(run_max - row_max), axis=0)
    inv = 1.0 / row_sum
    for start in range(0, n_cols, BLOCK_N):
        ok = start + cols < n_cols
        v = tl.load(x_row + start + cols, mask=ok, other=float("-inf"))
        tl.store(y_row + start + cols, tl.exp(v - row_max) * inv, mask=ok)


def kernel(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    _softmax_rows[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0))
    return y
