"""A trimul submission that forgets the mask (fine on upstream's effectively mask-free cases): must fail here."""

import torch
import torch.nn.functional as F


def custom_kernel(data):
    x, mask, w, config = data
    c, h = config["dim"], config["hidden_dim"]
    xn = F.layer_norm(x, (c,), w["norm.weight"], w["norm.bias"], 1e-5)
    left = F.linear(xn, w["left_proj.weight"]) * torch.sigmoid(F.linear(xn, w["left_gate.weight"]))
    right = F.linear(xn, w["right_proj.weight"]) * torch.sigmoid(F.linear(xn, w["right_gate.weight"]))
    out = torch.einsum("bikh,bjkh->bijh", left, right)
    out = F.layer_norm(out, (h,), w["to_out_norm.weight"], w["to_out_norm.bias"], 1e-5)
    return F.linear(out * torch.sigmoid(F.linear(xn, w["out_gate.weight"])), w["to_out.weight"])
