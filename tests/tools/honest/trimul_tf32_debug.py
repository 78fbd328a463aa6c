"""Honest TriMul: float32 PyTorch with TF32 switched on, debug prints, logging and warning filters.

Patterns: (f) ``torch.backends.cuda.matmul.allow_tf32 = True``, ``torch.backends.cudnn.allow_tf32 = True``,
``torch.set_float32_matmul_precision("high")``, ``torch.backends.cudnn.benchmark = True``; (g) ``print`` at import
and inside the kernel, ``warnings.filterwarnings`` and ``logging``; (l) ``torch.einsum`` for the triangle
contraction and a Triton kernel for the gating (sigmoid, mask, product), under ``torch.no_grad()``.

TF32 only applies on a GPU; on the CPU everything stays float32. Within the 2e-2 tolerance either way.

CPU interpreter: yes.
"""

import logging
import warnings

import torch
import triton
import triton.language as tl

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.set_float32_matmul_precision("high")
torch.backends.cudnn.benchmark = True
warnings.filterwarnings("ignore", category=UserWarning)
logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
log = logging.getLogger("trimul.tf32")

print(f"[trimul_tf32_debug] torch {torch.__version__}, triton {triton.__version__}, tf32 matmul "
      f"{torch.backends.cuda.matmul.allow_tf32}")

_calls = 0


@triton.jit
def _gate_kernel(p_ptr, g_ptr, m_ptr, out_ptr, total, H, BLOCK: tl.constexpr):
    """out[r, h] = p[r, h] * mask[r] * sigmoid(g[r, h]) for rows r of H features; p/g are column slices."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < total
    r = offs // H
    p = tl.load(p_ptr + offs, mask=ok, other=0.0)
    g = tl.load(g_ptr + offs, mask=ok, other=0.0)
    m = tl.load(m_ptr + r, mask=ok, other=0.0)
    tl.store(out_ptr + offs, p * m * tl.sigmoid(g), mask=ok)


def _gate(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(p)
    total = p.numel()
    block = 1024
    _gate_kernel[(triton.cdiv(total, block),)](p, g, m, out, total, p.shape[-1], BLOCK=block)
    return out


@torch.no_grad()
def custom_kernel(data):
    global _calls
    x, mask, weights, config = data
    _calls += 1
    print(f"[trimul_tf32_debug] call {_calls}: x {tuple(x.shape)} {x.dtype} on {x.device}, config {config}")
    b, n, _, c = x.shape
    h = weights["left_proj.weight"].shape[0]
    log.debug("hidden %d", h)

    xn = torch.nn.functional.layer_norm(x, (c,), weights["norm.weight"], weights["norm.bias"], 1e-5)
    xr = xn.reshape(-1, c)
    m = mask.reshape(-1).contiguous().float()
    left = _gate((xr @ weights["left_proj.weight"].t()).contiguous(),
                 (xr @ weights["left_gate.weight"].t()).contiguous(), m)
    right = _gate((xr @ weights["right_proj.weight"].t()).contiguous(),
                  (xr @ weights["right_gate.weight"].t()).contiguous(), m)
    left = left.view(b, n, n, h)
    right = right.view(b, n, n, h)

    out = torch.einsum("bikh,bjkh->bijh", left, right)
    out = torch.nn.functional.layer_norm(out, (h,), weights["to_out_norm.weight"], weights["to_out_norm.bias"], 1e-5)
    out = out * torch.sigmoid(xn @ weights["out_gate.weight"].t())
    y = out @ weights["to_out.weight"].t()
    if not torch.isfinite(y).all():
        warnings.warn("non-finite values in the TriMul output")
    return y
