"""Honest Triton LayerNorm for level1/40_LayerNorm: each row (all of features x dim1 x dim2) is split into chunks;
one kernel sums each chunk's values and squares (shifted by the row's first value, against cancellation), one
combines a row's chunks into its mean and inverse deviation, one normalises and applies the weight and bias.
Expected: passed (every config)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _chunk_sums(x_ptr, sums_ptr, sq_ptr, row_len, chunks, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    shift = tl.load(x_ptr + row * row_len)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, CHUNK, BLOCK):
        offs = chunk * CHUNK + start + tl.arange(0, BLOCK)
        mask = offs < row_len
        x = tl.load(x_ptr + row * row_len + offs, mask=mask, other=0.0)
        d = tl.where(mask, x - shift, 0.0)
        acc += d
        acc2 += d * d
    tl.store(sums_ptr + row * chunks + chunk, tl.sum(acc, axis=0))
    tl.store(sq_ptr + row * chunks + chunk, tl.sum(acc2, axis=0))


@triton.jit
def _row_stats(x_ptr, sums_ptr, sq_ptr, mean_ptr, rstd_ptr, row_len, chunks, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < chunks
    s = tl.sum(tl.load(sums_ptr + row * chunks + offs, mask=mask, other=0.0), axis=0)
    s2 = tl.sum(tl.load(sq_ptr + row * chunks + offs, mask=mask, other=0.0), axis=0)
    shifted_mean = s / row_len
    var = tl.maximum(s2 / row_len - shifted_mean * shifted_mean, 0.0)
    tl.store(mean_ptr + row, tl.load(x_ptr + row * row_len) + shifted_mean)
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(var + eps))


@triton.jit
def _normalise(x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, y_ptr, row_len, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    for start in range(0, CHUNK, BLOCK):
        offs = chunk * CHUNK + start + tl.arange(0, BLOCK)
        mask = offs < row_len
        x = tl.load(x_ptr + row * row_len + offs, mask=mask, other=0.0)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        tl.store(y_ptr + row * row_len + offs, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)  # holds the weight and bias; never called

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        row_len = self.ln.weight.numel()
        rows = x.numel() // row_len
        chunk, block = 16384, 4096  # 4 steps a chunk: Triton's interpreter runs each step's block ops in Python
        chunks = triton.cdiv(row_len, chunk)
        sums = torch.empty(rows, chunks, device=x.device, dtype=torch.float32)
        squares = torch.empty_like(sums)
        mean = torch.empty(rows, device=x.device, dtype=torch.float32)
        rstd = torch.empty_like(mean)
        y = torch.empty_like(x)
        _chunk_sums[(rows, chunks)](x, sums, squares, row_len, chunks, CHUNK=chunk, BLOCK=block)
        _row_stats[(rows,)](
            x, sums, squares, mean, rstd, row_len, chunks, self.ln.eps, BLOCK=triton.next_power_of_2(chunks)
        )
        _normalise[(rows, chunks)](x, self.ln.weight, self.ln.bias, mean, rstd, y, row_len, CHUNK=chunk, BLOCK=block)
        return y
