import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over one dimension, keeping it."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 8
rows = 300
cols = 96
reduce_dim = 1


def get_inputs():
    return [torch.rand(batch_size, rows, cols)]


def get_init_inputs():
    return [reduce_dim]
