"""The TriMul reference at sampled rows and columns, for an audit's check (``TrimulTask.expected_sample``).

``out[b, i, j, :]`` depends on the projections of rows ``x[b, i, :, :]`` (left) and ``x[b, j, :, :]`` (right) and on
``x[b, i, j, :]`` (the output gate), so the reference at rows ``I`` and columns ``J`` needs the LayerNorm and
projections of ``2 * len(I)`` of the ``N`` rows and an ``N``-long contraction per sampled pair: at N = 1024 and 32 of
each, about a sixteenth of the whole reference's projections and a thousandth of its contraction. The same math as
``reference.trimul_reference`` (float32, TF32 off by the caller), kept apart because that module's source is shown to
the model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ksearch.tasks.trimul.reference import EPS


def trimul_reference_at(
    x: torch.Tensor, mask: torch.Tensor, weights: dict[str, torch.Tensor], rows: torch.Tensor, cols: torch.Tensor
) -> torch.Tensor:
    """``trimul_reference(x, mask, weights)[:, rows][:, :, cols]``: [B, len(rows), len(cols), C] float32."""
    w = weights
    c = x.shape[-1]
    h = w["left_proj.weight"].shape[0]

    def normed(t: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(t, (c,), w["norm.weight"], w["norm.bias"], EPS)

    xi, xj = normed(x[:, rows]), normed(x[:, cols])  # [B, s, N, C]: rows i (left side) and rows j (right side)
    mi = mask[:, rows].to(x.dtype).unsqueeze(-1)
    mj = mask[:, cols].to(x.dtype).unsqueeze(-1)
    left = F.linear(xi, w["left_proj.weight"]) * mi * torch.sigmoid(F.linear(xi, w["left_gate.weight"]))
    right = F.linear(xj, w["right_proj.weight"]) * mj * torch.sigmoid(F.linear(xj, w["right_gate.weight"]))
    out = torch.einsum("bikh,bjkh->bijh", left, right)  # [B, s_i, s_j, H]
    out = F.layer_norm(out, (h,), w["to_out_norm.weight"], w["to_out_norm.bias"], EPS)
    gate = xi[:, :, cols]  # the normalised x at (b, rows[a], cols[b']): [B, s_i, s_j, C]
    out = out * torch.sigmoid(F.linear(gate, w["out_gate.weight"]))
    return F.linear(out, w["to_out.weight"])
