"""Honest TriMul: a ``torch.compile`` path for small shapes that returns float16 in a channel-major layout.

Patterns seen in real leaderboard files (the first-placed A100 and third-placed H100 TriMul entries): (r) small
shapes go through a ``@torch.compile`` function (Inductor keeps idle compile-pool threads afterwards: they are
torch's, not the kernel's); (s) the result is returned in float16, which GPU MODE's check accepts when the values are
within tolerance; (t) the result is a permuted view of a channel-major buffer (not contiguous), which GPU MODE's check
also accepts. Large shapes use a Triton LayerNorm and fp16 GEMMs.

CPU interpreter: yes (the CPU's shapes are small: the compiled path; Inductor builds C++ there).
"""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

SMALL = 512


@torch.compile(dynamic=True)
def _small(x, mask, w5, ln_w, ln_b, out_ln_w, out_ln_b, wout, h: int):
    b, n, _, c = x.shape
    xn = F.layer_norm(x, (c,), ln_w, ln_b).to(torch.float16)
    p = (xn.reshape(-1, c) @ w5.t()).float()
    left, right, lg, rg, og = p.split(h, dim=1)
    m = mask.reshape(-1, 1)
    left = (left * m * torch.sigmoid(lg)).reshape(b, n, n, h).permute(0, 3, 1, 2).half()
    right = (right * m * torch.sigmoid(rg)).reshape(b, n, n, h).permute(0, 3, 1, 2).half()
    prod = (left @ right.transpose(-1, -2)).float()  # [b, h, n, n]
    normed = F.layer_norm(prod.permute(0, 2, 3, 1), (h,), out_ln_w, out_ln_b)
    gated = (normed * torch.sigmoid(og).reshape(b, n, n, h)).half()
    y = torch.einsum("bijh,ch->bcij", gated, wout.half())  # channel-major [b, c, n, n]
    return y.permute(0, 2, 3, 1)  # [b, n, n, c], a view


@triton.jit
def _layer_norm_rows(x_ptr, w_ptr, b_ptr, y_ptr, rows, cols, eps, BR: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    c = tl.arange(0, BC)
    ok = (r < rows)[:, None] & (c < cols)[None, :]
    at = r.to(tl.int64)[:, None] * cols + c[None, :]
    v = tl.load(x_ptr + at, mask=ok, other=0.0)
    mean = tl.sum(v, axis=1) / cols
    d = tl.where(ok, v - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / cols + eps)
    w = tl.load(w_ptr + c, mask=c < cols, other=0.0)
    b = tl.load(b_ptr + c, mask=c < cols, other=0.0)
    tl.store(y_ptr + at, (d * rstd[:, None] * w[None, :] + b[None, :]).to(tl.float16), mask=ok)


def _large(x, mask, weights, h):
    b, n, _, c = x.shape
    rows = b * n * n
    xn = torch.empty((rows, c), device=x.device, dtype=torch.float16)
    _layer_norm_rows[(triton.cdiv(rows, 16),)](x.contiguous(), weights["norm.weight"], weights["norm.bias"], xn, rows, c,
                                               1e-5, BR=16, BC=triton.next_power_of_2(c))  # fmt: skip
    w5 = torch.cat([weights[k] for k in ("left_proj.weight", "right_proj.weight", "left_gate.weight",
                                         "right_gate.weight", "out_gate.weight")]).half()  # fmt: skip
    p = (xn @ w5.t()).float()
    left, right, lg, rg, og = p.split(h, dim=1)
    m = mask.reshape(-1, 1).float()
    left = (left * m * torch.sigmoid(lg)).view(b, n, n, h).permute(0, 3, 1, 2).half()
    right = (right * m * torch.sigmoid(rg)).view(b, n, n, h).permute(0, 3, 1, 2).half()
    prod = torch.matmul(left, right.transpose(-1, -2)).float().permute(0, 2, 3, 1)
    normed = F.layer_norm(prod, (h,), weights["to_out_norm.weight"], weights["to_out_norm.bias"])
    gated = normed * torch.sigmoid(og).view(b, n, n, h)
    return (gated.half() @ weights["to_out.weight"].half().t()).float()


def custom_kernel(data):
    x, mask, weights, config = data
    h = config["hidden_dim"]
    if x.shape[1] < SMALL:
        w5 = torch.cat([weights[k] for k in ("left_proj.weight", "right_proj.weight", "left_gate.weight",
                                             "right_gate.weight", "out_gate.weight")]).half()  # fmt: skip
        return _small(x, mask.float(), w5, weights["norm.weight"], weights["norm.bias"], weights["to_out_norm.weight"],
                      weights["to_out_norm.bias"], weights["to_out.weight"], h)  # fmt: skip
    return _large(x, mask, weights, h)
