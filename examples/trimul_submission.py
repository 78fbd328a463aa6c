"""A GPU MODE TriMul submission in plain PyTorch (float32), written for ksearch as a baseline.

GPU MODE format: the module defines ``custom_kernel(data)`` with ``data = (input, mask, weights, config)`` and
returns the [B, N, N, C] float32 output. Runs unchanged under ``ksearch eval trimul examples/trimul_submission.py``
and on the GPU MODE leaderboard. Full float32: it relies on PyTorch's default of TF32 off for matmuls (it does not
touch torch.backends, which ksearch's integrity checks reject).
"""

import torch


def _layer_norm(t: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    mean = t.mean(dim=-1, keepdim=True)
    var = (t - mean).pow(2).mean(dim=-1, keepdim=True)
    return (t - mean) * torch.rsqrt(var + eps) * weight + bias


def _trimul(x: torch.Tensor, mask: torch.Tensor, w: dict) -> torch.Tensor:
    b, n, _, c = x.shape
    h = w["left_proj.weight"].shape[0]
    xn = _layer_norm(x, w["norm.weight"], w["norm.bias"]).reshape(b * n * n, c)

    # All five C -> H maps in one GEMM: [M, C] @ [C, 5H].
    stacked = torch.cat(
        [w["left_proj.weight"], w["right_proj.weight"], w["left_gate.weight"], w["right_gate.weight"],
         w["out_gate.weight"]],
        dim=0,
    )
    lp, rp, lg, rg, og = (xn @ stacked.t()).split(h, dim=1)
    m = mask.reshape(b * n * n, 1).to(x.dtype)
    left = lp * m * torch.sigmoid(lg)
    right = rp * m * torch.sigmoid(rg)

    # Channel-major [B, H, N, N]: out[b, h] = left[b, h] @ right[b, h]^T.
    left = left.reshape(b, n, n, h).permute(0, 3, 1, 2)
    right = right.reshape(b, n, n, h).permute(0, 3, 1, 2)
    out = torch.matmul(left, right.transpose(-1, -2)).permute(0, 2, 3, 1)  # [B, N, N, H]

    out = _layer_norm(out, w["to_out_norm.weight"], w["to_out_norm.bias"])
    out = out * torch.sigmoid(og).reshape(b, n, n, h)
    return out @ w["to_out.weight"].t()


def custom_kernel(data):
    x, mask, weights, config = data
    assert x.shape[-1] == config["dim"] and weights["left_proj.weight"].shape[0] == config["hidden_dim"]
    return _trimul(x, mask, weights)
