"""Honest softmax on two CUDA streams joined correctly: each half of the rows on its own stream, both joined to the
caller's stream before the kernel returns.

Patterns: (v) a side stream that first waits for the current stream (its inputs are ready), a Triton launch on each
stream, the current stream waiting for the side stream before returning, and ``record_stream`` so the caching
allocator does not reuse the output's memory while the side stream may still use it. The work is finished, in
stream order, when the call returns: nothing escapes the timer.

CPU interpreter: no (CUDA streams; GPU only).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_row(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    ok = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=ok, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=ok)


_SIDE: dict[int, torch.cuda.Stream] = {}


def _launch(x: torch.Tensor, y: torch.Tensor) -> None:
    m, n = x.shape
    if m:
        _softmax_row[(m,)](x, y, n, x.stride(0), BLOCK=triton.next_power_of_2(n))


def kernel(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    half = x.shape[0] // 2
    main = torch.cuda.current_stream(x.device)
    side = _SIDE.setdefault(x.device.index or 0, torch.cuda.Stream(x.device))
    side.wait_stream(main)
    with torch.cuda.stream(side):
        _launch(x[half:], y[half:])
    _launch(x[:half], y[:half])
    main.wait_stream(side)
    y.record_stream(side)
    return y
