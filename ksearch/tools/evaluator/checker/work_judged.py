"""Where a candidate's work happens, judged in the trusted checker (issue 60): the other half of
``worker.work_observed``.

Pure functions of the records the worker ships (``ksearch.contracts.work``), the task's ``WorkPolicy`` and what
the checker knows itself (the size of the inputs it regenerated, the reference). Rules:

- ``trace_tampered``: the harness's tracing mode or launch hooks were gone when the call returned;
- ``no_custom_launch``: the call launched no custom kernel (where the policy requires one);
- ``aten_compute``: ATen ops outside allocation, layout and views (``LAYOUT_OPS``) and the task's declared glue
  touched, summed over the call, at least ``1 / policy.share`` of the largest input's elements: PyTorch did the
  work (a small final reduction of per-block partials, a scalar's arithmetic, stays allowed);
- ``ghost_output``: with every custom launch skipped the output still matches the reference: the launches did not
  produce it.
"""

from __future__ import annotations

from ksearch.contracts.work import ATEN_COMPUTE, GHOST_OUTPUT, NO_CUSTOM_LAUNCH, TRACE_TAMPERED, WorkTrace
from ksearch.tasks.base import WorkPolicy

LAYOUT_OPS = frozenset(
    {
        # allocation
        "empty",
        "empty_like",
        "empty_strided",
        "empty_permuted",
        "new_empty",
        "new_empty_strided",
        "zeros",
        "zeros_like",
        "new_zeros",
        "ones",
        "ones_like",
        "new_ones",
        "full",
        "full_like",
        "new_full",
        "fill",
        "fill_",
        "zero",
        "zero_",
        "scalar_tensor",
        "arange",
        "lift_fresh",
        "lift_fresh_copy",
        "resize_",
        "set_",
        # data movement and layout
        "_to_copy",
        "to",
        "copy",
        "copy_",
        "clone",
        "contiguous",
        "cat",
        "stack",
        "constant_pad_nd",
        "_pin_memory",
        "record_stream",
        "_local_scalar_dense",
        # views
        "alias",
        "detach",
        "view",
        "_unsafe_view",
        "_reshape_alias",
        "reshape",
        "as_strided",
        "expand",
        "expand_as",
        "permute",
        "transpose",
        "t",
        "unsqueeze",
        "squeeze",
        "select",
        "slice",
        "narrow",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "flatten",
        "unflatten",
        "view_as",
        "view_as_real",
        "view_as_complex",
        "movedim",
        "diagonal",
    }
)
"""ATen ops (overload packets) that allocate, move or view data: never the work."""
SHOWN_OPS = 6


def judge_trace(trace: WorkTrace, largest_input: int, policy: WorkPolicy) -> tuple[str, str] | None:
    """(rule, evidence) when ``trace`` breaks one of the rules, else None. ``largest_input``: the element count of the
    largest input tensor, from the inputs the checker regenerated."""
    if not trace.intact:
        return TRACE_TAMPERED, (
            "the harness's tracing of PyTorch ops or its launch hooks were no longer in place when the call "
            "returned: the candidate removed or replaced them"
        )
    if policy.launches_required and trace.launches == 0 and not trace.ghost:
        return NO_CUSTOM_LAUNCH, "the call launched no custom kernel (no Triton launch, no C++ extension call)"
    allowed = LAYOUT_OPS | policy.glue_ops
    compute = [op for op in trace.ops if op.op not in allowed]
    total = sum(op.elements for op in compute) + trace.unlisted_elements
    threshold = max(1, largest_input // policy.share)
    if total < threshold:
        return None
    shown = ", ".join(
        f"aten.{op.op} ({op.calls} call{'s' if op.calls != 1 else ''}, {op.elements} elements)"
        for op in sorted(compute, key=lambda o: -o.elements)[:SHOWN_OPS]
    )
    return ATEN_COMPUTE, (
        f"PyTorch computed on input-sized tensors: {shown}; {total} elements in all, where at most "
        f"{threshold - 1} (1/{policy.share} of the largest input's {largest_input}) may go through PyTorch ops other "
        "than allocation, copies and views: compute in your own kernels"
    )


def judge_ghost(trace: WorkTrace, matches_reference: bool) -> tuple[str, str] | None:
    """(rule, evidence) when the ghost replay's output still matched the reference, else None."""
    if not trace.intact:
        return TRACE_TAMPERED, "the harness's launch hooks were no longer in place during the ghost replay"
    if not matches_reference or trace.raised:
        return None
    return GHOST_OUTPUT, (
        f"with every custom launch skipped ({trace.launches} launches) and fresh allocations poisoned, the output "
        "still matches the reference: the custom kernels do not produce it (PyTorch, numpy or a copy of an earlier "
        "answer does)"
    )


__all__ = [
    "ATEN_COMPUTE",
    "GHOST_OUTPUT",
    "LAYOUT_OPS",
    "NO_CUSTOM_LAUNCH",
    "TRACE_TAMPERED",
    "judge_ghost",
    "judge_trace",
]
