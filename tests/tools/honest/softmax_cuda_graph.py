"""Honest softmax through a CUDA graph per input shape: captured once on buffers of its own, then on every call the
input is copied into the graph's static input, the graph replays, and a clone of its static output is returned.

Patterns: (x) a CUDA graph captured per shape (``torch.cuda.CUDAGraph`` and ``torch.cuda.graph`` called where they
stand), the way leaderboard entries cut launch overhead: every call computes from its own input, so its outputs pass
the checker on every audited call like any kernel's.

CPU interpreter: no (CUDA graphs; GPU only).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_row(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)


def _launch(x: torch.Tensor, y: torch.Tensor) -> None:
    m, n = x.shape
    _softmax_row[(m,)](x, y, n, x.stride(0), BLOCK=triton.next_power_of_2(n))


class _ShapeGraph:
    """One captured launch for one shape, on static buffers of its own."""

    def __init__(self, like: torch.Tensor) -> None:
        self.x = torch.empty_like(like)
        self.y = torch.empty_like(like)
        _launch(self.x, self.y)  # compiles the kernel before the capture
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            _launch(self.x, self.y)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.x.copy_(x)
        self.graph.replay()
        return self.y.clone()


_GRAPHS: dict[tuple[tuple[int, ...], torch.dtype], _ShapeGraph] = {}


def kernel(x: torch.Tensor) -> torch.Tensor:
    key = (tuple(x.shape), x.dtype)
    if key not in _GRAPHS:
        _GRAPHS[key] = _ShapeGraph(x.contiguous())
    return _GRAPHS[key](x)
