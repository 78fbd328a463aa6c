"""Honest softmax: a persistent Triton kernel, as many programs as the GPU has SMs (times two), walking the rows.

Patterns: (n) Triton with a persistent grid-stride loop over rows (``range(pid, n_rows, num_programs)``);
(j) ``torch.cuda.get_device_properties(...).multi_processor_count`` sizes the grid; (e) ``functools.lru_cache`` on
the SM-count lookup, whose argument is a device index (an int). Rows wider than one tile use an online max/sum.

CPU interpreter: yes (four programs on the CPU).
"""

import functools

import torch
import triton
import triton.language as tl


@functools.lru_cache(maxsize=8)
def _programs_per_device(index: int) -> int:
    return 2 * torch.cuda.get_device_properties(index).multi_processor_count


@triton.jit
def _softmax_persistent(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        xr = x_ptr + row * stride_x
        yr = y_ptr + row * stride_y
        m = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
        s = tl.zeros([BLOCK], dtype=tl.float32)
        for c0 in range(0, n_cols, BLOCK):
            v = tl.load(xr + c0 + cols, mask=c0 + cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, v)
            scale = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
            s = s * scale + tl.where(m_new == float("-inf"), 0.0, tl.exp(v - m_new))
            m = m_new
        mx = tl.max(m, axis=0)
        total = tl.sum(s * tl.exp(m - mx), axis=0)
        for c0 in range(0, n_cols, BLOCK):
            ok = c0 + cols < n_cols
            v = tl.load(xr + c0 + cols, mask=ok, other=float("-inf"))
            tl.store(yr + c0 + cols, tl.exp(v - mx) / total, mask=ok)


def kernel(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    block = min(4096, triton.next_power_of_2(n_cols))
    if x.is_cuda:
        index = x.device.index if x.device.index is not None else torch.cuda.current_device()
        programs = min(n_rows, _programs_per_device(index))
    else:
        programs = min(n_rows, 4)
    warps = 4 if block <= 1024 else 8
    _softmax_persistent[(max(1, programs),)](x, y, n_rows, n_cols, x.stride(0), y.stride(0), BLOCK=block,
                                             num_warps=warps)
    return y
