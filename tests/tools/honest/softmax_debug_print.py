"""Honest softmax: a plain one-row-per-program Triton kernel with debug output and a self-test.

Patterns: (n) a kernel that prints: ``print`` at import and on every call, ``logging`` and ``warnings.filterwarnings``;
(m) ``math``, ``typing``, type hints and an ``if __name__ == "__main__":`` self-test that compares with
``torch.softmax`` (the library op the task forbids for the kernel itself; the self-test never runs when the module is
imported). Rows longer than one block are processed in three passes (max, sum, write).

CPU interpreter: yes.
"""

import logging
import math
import sys
import warnings
from typing import Optional

import torch
import triton
import triton.language as tl

warnings.filterwarnings("ignore", message=".*TF32.*")
logger = logging.getLogger(__name__)
print(f"softmax_debug_print: imported (torch {torch.__version__}, triton {triton.__version__})", flush=True)

MAX_BLOCK = 2048


@triton.jit
def _softmax_three_pass(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mx = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        mx = tl.maximum(mx, tl.load(x_ptr + row * stride + c0 + offs, mask=c0 + offs < n_cols, other=float("-inf")))
    row_max = tl.max(mx, axis=0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        v = tl.load(x_ptr + row * stride + c0 + offs, mask=c0 + offs < n_cols, other=float("-inf"))
        acc += tl.exp(v - row_max)
    denom = tl.sum(acc, axis=0)
    for c0 in range(0, n_cols, BLOCK):
        ok = c0 + offs < n_cols
        v = tl.load(x_ptr + row * stride + c0 + offs, mask=ok, other=float("-inf"))
        tl.store(y_ptr + row * stride + c0 + offs, tl.exp(v - row_max) / denom, mask=ok)


def kernel(x: torch.Tensor, block: Optional[int] = None) -> torch.Tensor:
    n_rows, n_cols = x.shape
    block = block or min(MAX_BLOCK, triton.next_power_of_2(n_cols))
    passes = math.ceil(n_cols / block)
    print(f"softmax_debug_print: {n_rows}x{n_cols} block={block} passes={passes}", file=sys.stderr)
    logger.info("launching %d programs", n_rows)
    x = x.contiguous()
    y = torch.empty_like(x)
    _softmax_three_pass[(n_rows,)](x, y, n_cols, x.stride(0), BLOCK=block)
    return y


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for rows, cols in ((4, 1), (7, 33), (3, 5000)):
        data = torch.randn(rows, cols, device=device) * 10
        torch.testing.assert_close(kernel(data), torch.softmax(data, dim=-1), atol=1e-5, rtol=1e-5)
    print("self-test passed")
