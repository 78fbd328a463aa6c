"""The coder's task text for a KernelBench problem: what to write, and what correctness and timing check."""

from __future__ import annotations

from ksearch.tasks.kernelbench.distributions import DISTRIBUTIONS
from ksearch.tasks.kernelbench.variants import VARIANTS

NUM_CORRECT_TRIALS = 5


def spec_text(title: str, language: str, allowed_rules: frozenset[str], cpu_note: str, source: str) -> str:
    """The prompt's task section; ``cpu_note`` is how the CPU checks the problem ('' when as written)."""
    variants = "; ".join(f"{name}: {what}" for name, what in VARIANTS.items())
    shaped = "; ".join(f"{name}: {what}" for name, what in DISTRIBUTIONS.items())
    if allowed_rules:
        torch_ops = (
            "This run allows calling PyTorch ops (" + ", ".join(sorted(allowed_rules)) + "): "
            "you may keep some of the reference's operations in PyTorch and write kernels for the rest."
        )
    else:
        torch_ops = (
            "Do not call the PyTorch operations the reference computes with (its torch / "
            "torch.nn.functional calls, tensor methods and nn layers), nor high-level PyTorch compute ops "
            "(matmul, convolutions, pooling, activations, softmax, norms, losses, clamp): compute them in "
            "your own @triton.jit kernels, and launch at least one. Allocating, reshaping and moving "
            "tensors (torch.empty, .view, .contiguous) is fine; keep nn layers only to hold weights "
            "(self.conv.weight), never call them. This is checked at run time too, whatever name reaches PyTorch: "
            "the PyTorch ops of every correctness call are traced, and compute beyond allocation, copies and views "
            "that touches 1/8 of the largest input's elements or more is rejected; one call is replayed with every "
            "kernel launch skipped, and its output must then be wrong."
        )
    sizes = (
        f"\nOn the CPU (Triton interpreter) this problem is {cpu_note.removeprefix('checked on the CPU ')}."
        if cpu_note
        else ""
    )
    return f"""Task: {title} (KernelBench format).

Write a Python module defining `class ModelNew(nn.Module)` that computes exactly what `Model` below computes, with
the same constructor arguments (`ModelNew(*get_init_inputs())`) and the same forward signature
(`ModelNew(...)(*get_inputs())`), using custom {language.capitalize()} kernels (`@triton.jit`) for the computation.
Keep the parameters the reference creates (same names, shapes and creation order) so that, with the same seed,
`ModelNew` gets the same weights as `Model`: the harness seeds the RNG before building each of them, and
`ModelNew.__init__` may draw no more random numbers than `Model.__init__` does (the inputs come from another stream).
{torch_ops} A try/except that falls back to PyTorch is rejected.

Correctness: {NUM_CORRECT_TRIALS} trials with different seeds on `get_inputs()`, then the same shapes and dtypes
with other values in every floating-point activation ({variants}; {shaped}); integer, boolean and two-valued inputs
are kept. The kernel must compute the op for any such values, and return a new tensor (never an input or a view of
one). Outputs are compared with the reference computed in float64 and rounded to the output's dtype: within
rtol = 1e-4 for float32 outputs and 1e-2 for float16/bfloat16 outputs, with an absolute tolerance of the same size
times the output's scale (its root mean square, at most 1), widened for the op's own float32 rounding (what
PyTorch's float32 result shows on the same inputs); no TF32 or lower-precision shortcuts for float32. The inputs
must not be modified.
Timing: the forward call at the sizes below, on `get_inputs()` or on rescaled inputs; the score is the speedup over
PyTorch eager.{sizes}

Reference (the problem file):
```python
{source.rstrip()}
```
"""
