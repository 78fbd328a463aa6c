"""A trimul submission that changes a weight in place: the worker must notice that an input changed."""

import torch


def custom_kernel(data):
    x, mask, w, config = data
    w["norm.bias"].add_(1.0)
    return torch.zeros_like(x)
