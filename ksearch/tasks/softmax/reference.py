"""Reference for the softmax task. Its source text is shown to the model, so it stays short and self-contained."""

import torch


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    """Row-wise softmax over the last dim of a 2-D float32 tensor, computed in float64 and rounded to float32."""
    x64 = x.to(torch.float64)
    shifted = x64 - x64.amax(dim=-1, keepdim=True)  # subtract the row max so exp() cannot overflow
    e = shifted.exp()
    return (e / e.sum(dim=-1, keepdim=True)).to(torch.float32)
