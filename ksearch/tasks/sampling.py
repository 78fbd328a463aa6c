"""Seeded random inputs that are the same bits in every process that draws them.

The worker and the trusted checker each regenerate a config's inputs from its seed and compare digests, so the draw
must not depend on anything but the seed. On the CPU it can: ATen draws float32 normals with a kernel picked by the
CPU capability it detects at start-up (AVX2/AVX512 against the generic one give different last bits), and a process
that detects differently (``ATEN_CPU_CAPABILITY``, or a detection that fails) would disagree with its partner on
every weight, which the checker must read as tampered inputs. float64 normals take one scalar path on every
capability and round to float32 exactly, so CPU draws go through float64. On CUDA the kernel is fixed; draws stay in
the requested dtype there (nothing changes for GPU inputs).

ATen's float64 ``exp`` and ``pow`` are not safe either: on a 2-core machine about one sandboxed worker in ten computed
its first ``exp_`` of an evaluation with other last bits than every later call and the checker (2026-12-07: the same
bits as ``ATEN_CPU_CAPABILITY=default``, one float32 element off by one ulp), and the checker rejected an honest
KernelBench kernel for modified inputs. ``exp`` and ``power`` here compute them with numpy on the CPU: one thread,
its loops chosen once at import from the CPU's features.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def randn(
    *shape: int, generator: torch.Generator, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``torch.randn(*shape)`` from ``generator``, identical across CPU capabilities (see the module docstring)."""
    if torch.device(device).type == "cpu" and dtype in (torch.float32, torch.float16, torch.bfloat16):
        return torch.randn(*shape, generator=generator, device=device, dtype=torch.float64).to(dtype)
    return torch.randn(*shape, generator=generator, device=device, dtype=dtype)


def cauchy(*shape: int, scale: float, generator: torch.Generator, device: torch.device | str = "cpu") -> torch.Tensor:
    """float32 Cauchy(0, ``scale``) values from ``generator``. On CUDA by the inverse CDF, ``scale * tan(pi * (u -
    1/2))``; on the CPU as ``scale`` times the ratio of two float64 normals (also Cauchy), because ATen's vectorised
    ``tan`` differs in the last bit between CPU capabilities and a ratio of exactly drawn normals does not."""
    if torch.device(device).type == "cpu":
        numerator = torch.randn(*shape, generator=generator, device=device, dtype=torch.float64)
        denominator = torch.randn(*shape, generator=generator, device=device, dtype=torch.float64)
        return numerator.div_(denominator).mul_(scale).to(torch.float32)
    u = torch.rand(*shape, generator=generator, device=device, dtype=torch.float32)
    return u.sub_(0.5).mul_(math.pi).tan_().mul_(scale)


def exp(values: torch.Tensor) -> torch.Tensor:
    """``values.exp()``, the same bits in every process of a machine on the CPU (see the module docstring)."""
    if values.device.type == "cpu":
        return torch.from_numpy(np.exp(values.detach().contiguous().numpy())).to(values.dtype)
    return values.exp()


def power(values: torch.Tensor, exponent: float) -> torch.Tensor:
    """``values.pow(exponent)``, the same bits in every process of a machine on the CPU (see the module docstring)."""
    if values.device.type == "cpu":
        return torch.from_numpy(np.power(values.detach().contiguous().numpy(), exponent)).to(values.dtype)
    return values.pow(exponent)
