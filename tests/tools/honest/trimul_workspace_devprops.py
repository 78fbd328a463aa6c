"""Honest TriMul: all-Triton, with a module-level workspace cache and tile sizes picked from the device.

Patterns: (i) intermediate buffers (normalised x, gated left/right, output gate, contraction result) live in a
module-level dict keyed by (shape, dtype, device) and are reused across calls; every one is fully rewritten each
call, and the output is a new tensor every call; (j) ``torch.cuda.get_device_capability`` and
``torch.cuda.get_device_properties`` choose the tiles on a GPU; (e) ``functools.lru_cache`` on the tile chooser,
whose arguments are ints; (m) ``dataclasses``, ``typing``, ``math``, type hints and an ``if __name__ == "__main__":``
self-test against a local float32 PyTorch version.

CPU interpreter: yes (the device queries are only made for CUDA tensors).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
import triton
import triton.language as tl

EPS = 1e-5


@dataclass(frozen=True)
class Tiles:
    rows: int = 32  # rows of x per program in the row-wise kernels
    contract: int = 32  # output tile (i and j) of the contraction
    contract_k: int = 32
    warps: int = 4


@functools.lru_cache(maxsize=None)
def _tiles(n: int, c: int, major: int, sms: int) -> Tiles:
    if major >= 9 and n >= 256:
        return Tiles(rows=64, contract=128, contract_k=64, warps=8)
    if major >= 8 and n >= 128:
        return Tiles(rows=64, contract=64, contract_k=32, warps=4)
    small = max(16, min(32, triton.next_power_of_2(n)))
    return Tiles(rows=32 if c <= 256 else 16, contract=small, contract_k=small, warps=4)


def _device_tiles(x: torch.Tensor, n: int, c: int) -> Tiles:
    if x.is_cuda:
        major, _minor = torch.cuda.get_device_capability(x.device)
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    else:
        major, sms = 0, 1
    return _tiles(n, c, major, sms)


_WORKSPACE: Dict[Tuple, Dict[str, torch.Tensor]] = {}


def _workspace(b: int, n: int, c: int, h: int, device: torch.device) -> Dict[str, torch.Tensor]:
    key = (b, n, c, h, torch.float16, device)
    ws = _WORKSPACE.get(key)
    if ws is None:
        m = b * n * n
        ws = {
            "xn": torch.empty((m, c), device=device, dtype=torch.float16),
            "w5": torch.empty((5 * h, c), device=device, dtype=torch.float16),
            "lr": torch.empty((2, b, h, n, n), device=device, dtype=torch.float16),
            "og": torch.empty((m, h), device=device, dtype=torch.float32),
            "prod": torch.empty((b, h, n, n), device=device, dtype=torch.float32),
        }
        _WORKSPACE[key] = ws
    return ws


@triton.jit
def _ln_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, C, eps, BR: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    c = tl.arange(0, BC)
    ok = (r < M)[:, None] & (c < C)[None, :]
    idx = r.to(tl.int64)[:, None] * C + c[None, :]
    v = tl.load(x_ptr + idx, mask=ok, other=0.0)
    mean = tl.sum(v, axis=1) / C
    d = tl.where(ok, v - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / C + eps)
    y = d * rstd[:, None] * tl.load(w_ptr + c, mask=c < C)[None, :] + tl.load(b_ptr + c, mask=c < C)[None, :]
    tl.store(out_ptr + idx, y.to(tl.float16), mask=ok)


@triton.jit
def _gated_proj_kernel(xn_ptr, w5_ptr, mask_ptr, lr_ptr, og_ptr, M, NN, C, H,
                       BR: tl.constexpr, BK: tl.constexpr, BH: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    part = tl.program_id(1)  # 0 left, 1 right, 2 output gate
    rok = r < M
    r64 = r.to(tl.int64)
    h = tl.arange(0, BH)
    hok = h < H
    k = tl.arange(0, BK)
    # rows of w5 ([5H, C]): left_proj, right_proj, left_gate, right_gate, out_gate
    p_row = tl.minimum(part, 1) * H
    g_row = (2 + part) * H
    acc_p = tl.zeros([BR, BH], dtype=tl.float32)
    acc_g = tl.zeros([BR, BH], dtype=tl.float32)
    for k0 in range(0, C, BK):
        kok = (k0 + k) < C
        a = tl.load(xn_ptr + r64[:, None] * C + (k0 + k)[None, :], mask=rok[:, None] & kok[None, :], other=0.0)
        wmask = kok[:, None] & hok[None, :]
        wg = tl.load(w5_ptr + (g_row + h)[None, :] * C + (k0 + k)[:, None], mask=wmask, other=0.0)
        acc_g += tl.dot(a, wg)
        wp = tl.load(w5_ptr + (p_row + h)[None, :] * C + (k0 + k)[:, None], mask=wmask, other=0.0)
        acc_p += tl.dot(a, wp)
    gate = 1.0 / (1.0 + tl.exp(-acc_g))
    ok = rok[:, None] & hok[None, :]
    if part == 2:
        tl.store(og_ptr + r64[:, None] * H + h[None, :], gate, mask=ok)
    else:
        mk = tl.load(mask_ptr + r, mask=rok, other=0.0)
        bi = r64 // NN
        pos = r64 % NN
        dst = (part * M).to(tl.int64) * H + bi[:, None] * H * NN + h[None, :].to(tl.int64) * NN + pos[:, None]
        tl.store(lr_ptr + dst, (acc_p * gate * mk[:, None]).to(tl.float16), mask=ok)


@triton.jit
def _contract_kernel(l_ptr, r_ptr, out_ptr, N, BT: tl.constexpr, BK: tl.constexpr):
    """out[z, i, j] = sum_k l[z, i, k] * r[z, j, k] for z = (b, h)."""
    ti, tj, z = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    base = z.to(tl.int64) * N * N
    i = ti * BT + tl.arange(0, BT)
    j = tj * BT + tl.arange(0, BT)
    k = tl.arange(0, BK)
    acc = tl.zeros([BT, BT], dtype=tl.float32)
    for k0 in range(0, N, BK):
        kok = (k0 + k) < N
        a = tl.load(l_ptr + base + i[:, None] * N + (k0 + k)[None, :], mask=(i < N)[:, None] & kok[None, :], other=0.0)
        bt = tl.load(r_ptr + base + j[None, :] * N + (k0 + k)[:, None], mask=kok[:, None] & (j < N)[None, :], other=0.0)
        acc = tl.dot(a, bt, acc)
    tl.store(out_ptr + base + i[:, None] * N + j[None, :], acc, mask=(i < N)[:, None] & (j < N)[None, :])


@triton.jit
def _out_kernel(prod_ptr, og_ptr, w_ptr, b_ptr, wo_ptr, y_ptr, M, NN, C, H, eps,
                BR: tl.constexpr, BH: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    rok = r < M
    r64 = r.to(tl.int64)
    h = tl.arange(0, BH)
    hok = h < H
    ok = rok[:, None] & hok[None, :]
    bi = r64 // NN
    pos = r64 % NN
    v = tl.load(prod_ptr + bi[:, None] * H * NN + h[None, :].to(tl.int64) * NN + pos[:, None], mask=ok, other=0.0)
    mean = tl.sum(v, axis=1) / H
    d = tl.where(ok, v - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / H + eps)
    t = d * rstd[:, None] * tl.load(w_ptr + h, mask=hok, other=0.0)[None, :] + tl.load(b_ptr + h, mask=hok, other=0.0)[None, :]
    t = t * tl.load(og_ptr + r64[:, None] * H + h[None, :], mask=ok, other=0.0)
    a = tl.where(ok, t, 0.0).to(tl.float16)
    cidx = tl.arange(0, BC)
    for c0 in range(0, C, BC):
        cok = (c0 + cidx) < C
        # to_out.weight is [C, H]: the [H, BC] tile is its transpose
        wt = tl.load(wo_ptr + (c0 + cidx)[None, :] * H + h[:, None], mask=hok[:, None] & cok[None, :], other=0.0)
        out = tl.dot(a, wt.to(tl.float16))
        tl.store(y_ptr + r64[:, None] * C + (c0 + cidx)[None, :], out, mask=rok[:, None] & cok[None, :])


def custom_kernel(data: Tuple[torch.Tensor, torch.Tensor, Dict[str, torch.Tensor], Dict]) -> torch.Tensor:
    x, mask, weights, config = data
    b, n, _, c = x.shape
    h: int = weights["left_proj.weight"].shape[0]
    m, nn = b * n * n, n * n
    tiles = _device_tiles(x, n, c)
    ws = _workspace(b, n, c, h, x.device)
    bc = triton.next_power_of_2(c)
    bh = max(16, triton.next_power_of_2(h))

    _ln_kernel[(triton.cdiv(m, 16),)](x.contiguous(), weights["norm.weight"], weights["norm.bias"], ws["xn"],
                                      m, c, EPS, BR=16, BC=bc)
    w5 = ws["w5"]
    for row, name in enumerate(("left_proj", "right_proj", "left_gate", "right_gate", "out_gate")):
        w5[row * h:(row + 1) * h].copy_(weights[f"{name}.weight"])
    _gated_proj_kernel[(triton.cdiv(m, tiles.rows), 3)](
        ws["xn"], w5, mask.contiguous().float(), ws["lr"], ws["og"], m, nn, c, h,
        BR=tiles.rows, BK=max(16, min(64, bc)), BH=bh, num_warps=tiles.warps,
    )
    grid = (triton.cdiv(n, tiles.contract), triton.cdiv(n, tiles.contract), b * h)
    _contract_kernel[grid](ws["lr"][0], ws["lr"][1], ws["prod"], n, BT=tiles.contract, BK=tiles.contract_k,
                           num_warps=tiles.warps)
    y = torch.empty((b, n, n, c), device=x.device, dtype=torch.float32)
    _out_kernel[(triton.cdiv(m, tiles.rows),)](
        ws["prod"], ws["og"], weights["to_out_norm.weight"], weights["to_out_norm.bias"], weights["to_out.weight"], y,
        m, nn, c, h, EPS, BR=tiles.rows, BH=bh, BC=max(16, min(64, bc)), num_warps=tiles.warps,
    )
    return y


def _torch_trimul(x: torch.Tensor, mask: torch.Tensor, w: Dict[str, torch.Tensor],
                  eps: Optional[float] = None) -> torch.Tensor:
    eps = EPS if eps is None else eps
    c, h = x.shape[-1], w["left_proj.weight"].shape[0]
    xn = torch.nn.functional.layer_norm(x, (c,), w["norm.weight"], w["norm.bias"], eps)
    m = mask.unsqueeze(-1)
    left = (xn @ w["left_proj.weight"].t()) * m * torch.sigmoid(xn @ w["left_gate.weight"].t())
    right = (xn @ w["right_proj.weight"].t()) * m * torch.sigmoid(xn @ w["right_gate.weight"].t())
    out = torch.einsum("bikh,bjkh->bijh", left, right)
    out = torch.nn.functional.layer_norm(out, (h,), w["to_out_norm.weight"], w["to_out_norm.bias"], eps)
    return (out * torch.sigmoid(xn @ w["out_gate.weight"].t())) @ w["to_out.weight"].t()


if __name__ == "__main__":
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    for bs, seq, dim in ((1, 16, 32), (2, 24, 16)):
        hid = 128
        xs = torch.randn(bs, seq, seq, dim, device=dev)
        ms = torch.randint(0, 2, (bs, seq, seq), device=dev).float()
        names = ["left_proj", "right_proj", "left_gate", "right_gate", "out_gate"]
        ws_ = {f"{k}.weight": torch.randn(hid, dim, device=dev) / math.sqrt(hid) for k in names}
        ws_.update({"norm.weight": torch.randn(dim, device=dev), "norm.bias": torch.randn(dim, device=dev),
                    "to_out_norm.weight": torch.randn(hid, device=dev), "to_out_norm.bias": torch.randn(hid, device=dev),
                    "to_out.weight": torch.randn(dim, hid, device=dev) / math.sqrt(dim)})
        got = custom_kernel((xs, ms, ws_, {"dim": dim, "hidden_dim": hid}))
        want = _torch_trimul(xs, ms, ws_)
        print(f"B={bs} N={seq} C={dim}: max abs err {(got - want).abs().max().item():.2e}")
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    print("self-test passed")
