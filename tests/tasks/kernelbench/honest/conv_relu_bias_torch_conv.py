"""level2/1_Conv2D_ReLU_BiasAdd with the convolution kept in PyTorch (cuDNN) and ReLU + bias fused in Triton: the
partial replacement KernelBench's own setting allows. Expected: rejected (reference_op: it calls self.conv) on
kernelbench:...; passed on kernelbench:...?allow=reference_op, where a sweep reports the rule as waived."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_bias(x_ptr, b_ptr, y_ptr, n, plane, channels, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    channel = (offs // plane) % channels
    x = tl.load(x_ptr + offs, mask=mask)
    b = tl.load(b_ptr + channel, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.conv(x).contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _relu_bias[(triton.cdiv(n, 4096),)](x, self.bias, y, n, x.shape[2] * x.shape[3], x.shape[1], BLOCK=4096)
        return y
