import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear, ReLU, then LayerNorm over the features (with learnable scale and shift)."""

    def __init__(self, in_features: int, out_features: int, eps: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features, eps=eps)
        with torch.no_grad():  # non-trivial affine parameters, so a kernel that ignores them fails
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(torch.relu(self.linear(x)))


batch_size = 24
in_features = 40
out_features = 72
eps = 1e-5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, eps]
