"""Reference for the trimul task (outgoing Triangle Multiplicative Update, AlphaFold-3). Its source is shown to the
model, so it stays short and self-contained. Written from the math; float32 throughout, TF32 disabled by the caller.
"""

import torch
import torch.nn.functional as F

WEIGHT_KEYS = (
    "norm.weight",  # [C]     input LayerNorm scale
    "norm.bias",  # [C]       input LayerNorm shift
    "left_proj.weight",  # [H, C]
    "right_proj.weight",  # [H, C]
    "left_gate.weight",  # [H, C]
    "right_gate.weight",  # [H, C]
    "out_gate.weight",  # [H, C]
    "to_out_norm.weight",  # [H]  output LayerNorm scale
    "to_out_norm.bias",  # [H]    output LayerNorm shift
    "to_out.weight",  # [C, H]
)
EPS = 1e-5


def trimul_reference(x: torch.Tensor, mask: torch.Tensor, weights: dict[str, torch.Tensor]) -> torch.Tensor:
    """x: [B, N, N, C] float32; mask: [B, N, N] (0/1); weights as in WEIGHT_KEYS. Returns [B, N, N, C] float32."""
    w = weights
    c = x.shape[-1]
    h = w["left_proj.weight"].shape[0]
    xn = F.layer_norm(x, (c,), w["norm.weight"], w["norm.bias"], EPS)  # LayerNorm over the channel dim C
    m = mask.to(x.dtype).unsqueeze(-1)  # [B, N, N, 1]
    left = F.linear(xn, w["left_proj.weight"]) * m * torch.sigmoid(F.linear(xn, w["left_gate.weight"]))
    right = F.linear(xn, w["right_proj.weight"]) * m * torch.sigmoid(F.linear(xn, w["right_gate.weight"]))
    # out[b, i, j, h] = sum_k left[b, i, k, h] * right[b, j, k, h]: one N x N x N product per (b, h)
    out = torch.einsum("bikh,bjkh->bijh", left, right)
    out = F.layer_norm(out, (h,), w["to_out_norm.weight"], w["to_out_norm.bias"], EPS)  # LayerNorm over H
    out = out * torch.sigmoid(F.linear(xn, w["out_gate.weight"]))
    return F.linear(out, w["to_out.weight"])  # [B, N, N, H] @ [H, C] -> [B, N, N, C]
