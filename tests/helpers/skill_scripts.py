"""Scripted replies for skill tests: the expert softmax of ``examples/softmax_expert.py`` taken apart step by step,
and lifter drafts that describe each step. Written by hand; not a real model's output."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXPERT_FILE = REPO / "examples" / "softmax_expert.py"

ONLINE_ONE_ROW = """import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_row(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = float("-inf")
    l = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        l = l * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=float("-inf"))
        tl.store(y_ptr + row * y_stride + cols, tl.exp(x - m) / l, mask=cols < n_cols)


def kernel(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    block = min(1024, triton.next_power_of_2(n_cols))
    _softmax_row[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=block)
    return y
"""

NO_MAX_SUBTRACTION = ONLINE_ONE_ROW.replace(
    "l = l * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)", "l = l + tl.sum(tl.exp(x), axis=0)"
).replace("tl.exp(x - m) / l", "tl.exp(x) / l")
"""A wrong simplification: without the running maximum, large inputs overflow (the 'large' configs fail)."""

WHOLE_ROW = """import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_row(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * x_stride + offs, mask=mask, other=float("-inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * y_stride + offs, e / tl.sum(e, axis=0), mask=mask)


def kernel(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    _softmax_row[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(n_cols))
    return y
"""


def simplify_reply(category: str, locus: str, removed: str, code: str) -> str:
    head = {
        "done": False,
        "category": category,
        "locus": locus,
        "removed": removed,
        "backward_edit": f"removed {category}",
        "reason": f"the kernel has {category}",
    }
    return json.dumps(head) + "\n\n```python\n" + code + "```\n"


DONE_REPLY = json.dumps({"done": True, "reason": "one row per program, the whole row in one block: nothing left"})

ONLINE_DRAFT = {
    "category": "online_softmax",
    "intent": (
        "Stream each row through one register block with a running maximum and rescaled sum, so any row width fits."
    ),
    "anchor": "softmax.row_loop",
    "recipe": "Replace the whole-row block with a loop over column blocks of BLOCK = min(1024, next_pow2(n)): keep a "
    "scalar running max m and sum l, rescale l by exp(m - m_new) when the max grows, then a second loop writes "
    "exp(x - m) / l.",
    "preconditions": [
        {
            "category": "data_types",
            "text": "float32 accumulation: the rescaling by exp(m - m_new) loses precision in fp16",
        },
        {"category": "layout", "text": "rows are contiguous along columns, so column blocks are coalesced loads"},
    ],
    "requires": [],
    "provides": [{"locus": "softmax.row_loop", "name": "online_softmax", "detect": ["tl.exp(m - m_new)"]}],
    "conflicts": [],
    "effects": ["one block of registers per row whatever its width; the row is read twice instead of once"],
    "risks": ["dropping the running maximum overflows exp() on large inputs"],
}

ROWS_DRAFT = {
    "category": "row_batching",
    "intent": "Give each program several consecutive rows so that narrow rows do not each launch a tiny program.",
    "anchor": "launch",
    "recipe": "Add a constexpr ROWS_PER_PROGRAM (4 here), launch cdiv(n_rows, ROWS_PER_PROGRAM) programs, loop over "
    "the program's rows and skip rows past the end with `if row < n_rows`.",
    "preconditions": [{"category": "pipeline", "text": "rows are independent: no cross-row reduction"}],
    "requires": [{"locus": "softmax.row_loop", "name": "online_softmax", "detect": ["tl.exp(m - m_new)"]}],
    "provides": [{"locus": "launch", "name": "rows_per_program", "detect": ["ROWS_PER_PROGRAM"]}],
    "conflicts": [],
    "effects": ["a quarter as many programs for the same rows"],
    "risks": ["rows past the end must be skipped"],
}


def learn_script(path: Path) -> Path:
    """Simplifier and lifter replies for a walk over the expert: remove row batching (accepted), drop the running
    maximum (wrong: rejected), remove online softmax (accepted), done; then lift the two accepted steps."""
    entries = [
        ("simplify:1", simplify_reply("row_batching", "launch", "several rows per program", ONLINE_ONE_ROW)),
        (
            "simplify:2",
            simplify_reply(
                "online_softmax", "softmax.row_loop", "the running maximum and its rescaling", NO_MAX_SUBTRACTION
            ),
        ),
        ("simplify:3", simplify_reply("online_softmax", "softmax.row_loop", "the online max/sum loop", WHOLE_ROW)),
        ("simplify:4", DONE_REPLY),
        ("lift:3", json.dumps(ONLINE_DRAFT)),
        ("lift:1", json.dumps(ROWS_DRAFT)),
    ]
    with path.open("w") as f:
        f.write(
            "// SCRIPTED replies for `ksearch skills learn examples/softmax_expert.py --task softmax`, written by "
            "hand by\n"
            "// the ksearch authors: NOT a real model's output (tests and the README demo use them)\n"
        )
        for key, reply in entries:
            f.write(json.dumps({"call_key": key, "reply": reply}) + "\n")
    return path
