"""The ``task`` and ``utils`` modules a GPU MODE TriMul submission may import, written for ksearch.

Leaderboard files start with the template's ``from task import input_t, output_t`` and some import helpers from the
problem's ``utils`` (``from utils import DisableCuDNNTF32``). The evaluator writes this module into the candidate's
private support folder twice, as ``task.py`` and as ``utils.py`` (``TrimulTask.support_modules``), so such a file
runs unchanged. The names and their behaviour follow GPU MODE's own modules; nothing here reaches the harness, and
the reference is not among them (it never exists in the candidate's process).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, TypedDict

import torch

# -- task: the submission's types ----------------------------------------------------------------------------------
input_t = tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor], dict[str, Any]]
"""(input [bs, seqlen, seqlen, dim], mask [bs, seqlen, seqlen], weights by name, config {"dim", "hidden_dim"})."""
output_t = torch.Tensor
"""[bs, seqlen, seqlen, dim], float32."""


class TestSpec(TypedDict):
    """One line of the problem's case list."""

    seqlen: int
    bs: int
    dim: int
    hiddendim: int
    seed: int
    nomask: bool
    distribution: str


# -- utils: the helpers submissions use ----------------------------------------------------------------------------
def set_seed(seed: int = 42) -> None:
    """Seed Python's, NumPy's (when installed) and torch's global generators."""
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def get_device(use_cuda: bool = True) -> torch.device:
    """The GPU when there is one and ``use_cuda``, else the CPU."""
    if use_cuda and torch.cuda.is_available():
        return torch.device("cuda")
    if use_cuda and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _report(received: torch.Tensor, expected: torch.Tensor, bad: torch.Tensor, max_print: int) -> list[str]:
    positions = torch.nonzero(bad)
    lines = [f"Number of mismatched elements: {positions.shape[0]}"]
    for position in positions[:max_print].tolist():
        index = tuple(position)
        lines.append(f"ERROR at {index}: {received[index].item()} {expected[index].item()}")
    if positions.shape[0] > max_print:
        lines.append(f"... and {positions.shape[0] - max_print} more mismatched elements.")
    return lines


@torch.no_grad()
def verbose_allclose(
    received: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-05, atol: float = 1e-08, max_print: int = 5
) -> tuple[bool, list[str]]:
    """Whether every element is within ``atol + rtol * |expected|`` (NaN and infinities must match), with up to
    ``max_print`` mismatches described."""
    if received.shape != expected.shape:
        return False, ["SIZE MISMATCH"]
    difference = torch.abs(received.to(expected.dtype) - expected)
    tolerance = atol + rtol * torch.abs(expected)
    nan_mismatch = torch.isnan(received) != torch.isnan(expected)
    inf_mismatch = torch.isinf(received) & torch.isinf(expected) & (torch.sign(received) != torch.sign(expected))
    inf_mismatch |= torch.isinf(received) != torch.isinf(expected)
    finite = torch.isfinite(received) & torch.isfinite(expected)
    bad = nan_mismatch | inf_mismatch | (finite & (difference > tolerance))
    if bool(bad.any()):
        return False, _report(received, expected, bad, max_print)
    return True, []


@torch.no_grad()
def verbose_allequal(received: torch.Tensor, expected: torch.Tensor, max_print: int = 5) -> tuple[bool, list[str]]:
    """Whether the two tensors are equal element by element, with up to ``max_print`` mismatches described."""
    if received.shape != expected.shape:
        return False, ["SIZE MISMATCH"]
    bad = received != expected
    if bool(bad.any()):
        return False, _report(received, expected, bad, max_print)
    return True, []


def match_reference(
    data: Any, output: torch.Tensor, reference: Callable[[Any], torch.Tensor], rtol: float = 1e-05, atol: float = 1e-08
) -> tuple[bool, str]:
    """Compare ``output`` with ``reference(data)``: (passed, the mismatches as one string)."""
    expected = reference(data)
    good, reasons = verbose_allclose(output, expected, rtol=rtol, atol=atol)
    return (
        (True, "")
        if good
        else (False, "mismatch found! custom implementation doesn't match reference: " + " ".join(reasons))
    )


def make_match_reference(
    reference: Callable[[Any], torch.Tensor], **kwargs: float
) -> Callable[[Any, torch.Tensor], tuple[bool, str]]:
    """A checker ``(data, output) -> (passed, message)`` against ``reference`` with the given tolerances."""

    def check(data: Any, output: torch.Tensor) -> tuple[bool, str]:
        return match_reference(data, output, reference=reference, **kwargs)

    return check


class DisableCuDNNTF32:
    """While active: cuDNN's TF32 off and its deterministic algorithms on; the previous settings come back on exit."""

    def __init__(self) -> None:
        self.allow_tf32 = torch.backends.cudnn.allow_tf32
        self.deterministic = torch.backends.cudnn.deterministic

    def __enter__(self) -> DisableCuDNNTF32:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
        return self

    def __exit__(self, *exc: object) -> None:
        torch.backends.cudnn.allow_tf32 = self.allow_tf32
        torch.backends.cudnn.deterministic = self.deterministic


def clear_l2_cache(device: str = "cuda") -> None:
    """Evict the L2 cache by writing a 256 MB buffer (what newer GPU MODE harnesses do before a timed call)."""
    buffer = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=device)
    buffer.fill_(42)
    del buffer
