"""Honest TriMul in PyTorch: the five input projections fused into one weight matrix, cached in a module-level
table keyed by the ``id()`` of the weight tensors.

Patterns: (p) derived weights keyed by the weights' identity, here ``id()`` of each source tensor rather than
``data_ptr()``; the entry keeps the source tensors and is rebuilt unless every one is the same object, so a reused id
cannot bring back stale weights; (l) ``F.layer_norm``, one ``F.linear`` for the five projections, ``torch.einsum``
for the triangle contraction, ``torch.inference_mode``.

CPU interpreter: yes (PyTorch only).
"""

import torch
import torch.nn.functional as F

_PROJECTIONS = ("left_proj.weight", "right_proj.weight", "left_gate.weight", "right_gate.weight", "out_gate.weight")
_FUSED: dict = {}


def _fused(weights: dict) -> torch.Tensor:
    """[5H, C]: the five projections stacked, built once per set of weight tensors."""
    sources = tuple(weights[name] for name in _PROJECTIONS)
    key = tuple(id(t) for t in sources)
    entry = _FUSED.get(key)
    if entry is None or not all(a is b for a, b in zip(entry[0], sources)):
        entry = (sources, torch.cat(sources, dim=0).contiguous())
        _FUSED[key] = entry
    return entry[1]


@torch.inference_mode()
def custom_kernel(data) -> torch.Tensor:
    x, mask, weights, config = data
    hidden = config["hidden_dim"]
    xn = F.layer_norm(x, (x.shape[-1],), weights["norm.weight"], weights["norm.bias"], 1e-5)
    left, right, left_gate, right_gate, out_gate = F.linear(xn, _fused(weights)).split(hidden, dim=-1)
    m = mask.unsqueeze(-1).to(x.dtype)
    left = left * m * torch.sigmoid(left_gate)
    right = right * m * torch.sigmoid(right_gate)
    out = torch.einsum("bikh,bjkh->bijh", left, right)
    out = F.layer_norm(out, (hidden,), weights["to_out_norm.weight"], weights["to_out_norm.bias"], 1e-5)
    return F.linear(out * torch.sigmoid(out_gate), weights["to_out.weight"])
