"""Honest TriMul: PyTorch fp16 projections and ``torch.einsum`` contraction, one fused Triton epilogue.

Patterns: (l) ``F.layer_norm`` / ``F.linear`` / ``torch.einsum`` on fp16 operands (the GPU accumulates in fp32),
``@torch.no_grad()`` on the entry point, a Triton kernel fusing the output LayerNorm over H, its affine, the output
gate and the cast for the final projection; (m) ``typing.NamedTuple``, type hints.

CPU interpreter: yes.
"""

from typing import Dict, NamedTuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


class Dims(NamedTuple):
    batch: int
    seq: int
    dim: int
    hidden: int

    @property
    def rows(self) -> int:
        return self.batch * self.seq * self.seq


@triton.jit
def _norm_gate_kernel(o_ptr, g_ptr, w_ptr, b_ptr, out_ptr, rows, H, eps, BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    h = tl.arange(0, BLOCK_H)
    ok = (r < rows)[:, None] & (h < H)[None, :]
    idx = r.to(tl.int64)[:, None] * H + h[None, :]
    o = tl.load(o_ptr + idx, mask=ok, other=0.0).to(tl.float32)
    mu = tl.sum(o, axis=1) / H
    d = tl.where(ok, o - mu[:, None], 0.0)
    inv = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / H + eps)
    w = tl.load(w_ptr + h, mask=h < H, other=0.0)
    b = tl.load(b_ptr + h, mask=h < H, other=0.0)
    g = tl.load(g_ptr + idx, mask=ok, other=0.0).to(tl.float32)
    y = (d * inv[:, None] * w[None, :] + b[None, :]) * tl.sigmoid(g)
    tl.store(out_ptr + idx, y.to(tl.float16), mask=ok)


def _dims(x: torch.Tensor, weights: Dict[str, torch.Tensor]) -> Dims:
    b, n, _, c = x.shape
    return Dims(b, n, c, weights["left_proj.weight"].shape[0])


@torch.no_grad()
def custom_kernel(data) -> torch.Tensor:
    x, mask, weights, config = data
    d = _dims(x, weights)
    half = torch.float16

    xn = F.layer_norm(x, (d.dim,), weights["norm.weight"], weights["norm.bias"], 1e-5).to(half)
    m = mask.unsqueeze(-1).to(half)
    left = F.linear(xn, weights["left_proj.weight"].to(half)) * m * torch.sigmoid(
        F.linear(xn, weights["left_gate.weight"].to(half)))
    right = F.linear(xn, weights["right_proj.weight"].to(half)) * m * torch.sigmoid(
        F.linear(xn, weights["right_gate.weight"].to(half)))
    gate_logits = F.linear(xn, weights["out_gate.weight"].to(half))

    out = torch.einsum("bikh,bjkh->bijh", left, right).contiguous()  # [B, N, N, H]

    a = torch.empty((d.rows, d.hidden), device=x.device, dtype=half)
    block_r = 16
    _norm_gate_kernel[(triton.cdiv(d.rows, block_r),)](
        out, gate_logits.contiguous(), weights["to_out_norm.weight"], weights["to_out_norm.bias"], a,
        d.rows, d.hidden, 1e-5, BLOCK_R=block_r, BLOCK_H=triton.next_power_of_2(d.hidden),
    )
    y = F.linear(a, weights["to_out.weight"].to(half))
    return y.view(d.batch, d.seq, d.seq, d.dim).float()
