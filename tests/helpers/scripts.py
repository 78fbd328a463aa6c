"""Scripted model replies for end-to-end tests: small, deterministic searches on the built-in softmax task."""

from __future__ import annotations

import json
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "examples" / "softmax-demo.jsonl"
"""The scripted softmax demo: a replay file of a 6-round search (plans and kernels by call key)."""


def demo_replies() -> dict[str, str]:
    """The demo's replies by call key."""
    lines = [line for line in DEMO.read_text().splitlines() if line.strip() and not line.startswith("//")]
    return {entry["call_key"]: entry["reply"] for entry in map(json.loads, lines)}


ROW_KERNEL = """import time
import torch
import triton
import triton.language as tl

_SLEEP_S = {sleep}
_slept = False


@triton.jit
def _softmax_row(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * x_stride + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * y_stride + offs, e / tl.sum(e, axis=0), mask=mask)


def kernel(x: torch.Tensor) -> torch.Tensor:
    global _slept
    if not _slept:  # makes the evaluation slow enough to be killed in the middle of it
        time.sleep(_SLEEP_S)
        _slept = True
    m, n = x.shape
    y = torch.empty_like(x)
    _softmax_row[(m,)](x, y, n, x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(n))
    return y  # variant {variant}
"""

WRONG_KERNEL = ROW_KERNEL.replace("e / tl.sum(e, axis=0)", "e / (tl.sum(e, axis=0) + 1.0)")


def row_kernel(variant: int, sleep: float = 0.0) -> str:
    return ROW_KERNEL.format(sleep=sleep, variant=variant)


def fenced(code: str) -> str:
    return f"Here is the kernel.\n\n```python\n{code}```\n"


def init_plan(actions: list[tuple[str, float]]) -> str:
    ops = [
        {
            "op": "insert",
            "parent_id": "root",
            "node": {
                "id": node_id,
                "decision": "Kernel family",
                "choice": node_id,
                "action": {"title": f"Try {node_id}", "difficulty": 2, "score": score},
            },
        }
        for node_id, score in actions
    ]
    return json.dumps({"kernel_summary": "softmax is memory-bound", "open_questions": ["q"], "ops": ops})


def followup_plan(parent: str, child: str, score: float = 0.9) -> str:
    return json.dumps(
        {
            "ops": [
                {"op": "update", "node_id": parent, "patch": {"notes": "FOLLOW_THROUGH: yes", "rating": 7}},
                {
                    "op": "insert",
                    "parent_id": parent,
                    "node": {"id": child, "action": {"title": f"Refine {parent}", "difficulty": 2, "score": score}},
                },
            ]
        }
    )


def write_script(path: Path, entries: list[tuple[str, str]]) -> Path:
    """Entries are (call_key, reply)."""
    with path.open("w") as f:
        f.write("// scripted replies for a test\n")
        for key, reply in entries:
            f.write(json.dumps({"call_key": key, "reply": reply}) + "\n")
    return path


def two_cycle_script(path: Path, *, sleep: float = 0.0, sleep_in: str | None = None) -> Path:
    """Cycle c1 on action `a`: a wrong kernel, then two passing variants (window 2 ends it after the 4th round);
    then the planner adds `a1` under the solved `a`; cycle c2 on `a1` gets the remaining rounds. Each kernel sleeps
    ``sleep`` seconds in its first call, or only the one written for the call key ``sleep_in``."""

    def slept(key: str) -> float:
        return sleep if sleep_in in (None, key) else 0.0

    return write_script(
        path,
        [
            ("plan:0:0", init_plan([("a", 0.9), ("b", 0.5)])),
            ("write:c1:1", fenced(WRONG_KERNEL.format(sleep=slept("write:c1:1"), variant=1))),
            ("write:c1:2", fenced(row_kernel(2, slept("write:c1:2")))),
            ("write:c1:3", fenced(row_kernel(3, slept("write:c1:3")))),
            ("write:c1:4", fenced(row_kernel(4, slept("write:c1:4")))),
            ("plan:1:0", followup_plan("a", "a1")),
            ("write:c2:1", fenced(row_kernel(5, slept("write:c2:1")))),
            ("write:c2:2", fenced(row_kernel(6, slept("write:c2:2")))),
            ("plan:2:0", json.dumps({"ops": []})),
        ],
    )


def trimul_variants(seed_code: str) -> dict[str, str]:
    """Edits of ``examples/trimul_triton.py`` for a scripted TriMul search on the CPU: two correct ones, a wrong one
    (the output LayerNorm's bias replaced by its weight) and one that does not parse."""
    variants = {
        "smaller_epilogue_block": seed_code.replace("epi_block_m = 32", "epi_block_m = 16"),
        "wrong_bias": seed_code.replace(
            'weights["to_out_norm.bias"].contiguous()', 'weights["to_out_norm.weight"].contiguous()'
        ),
        "syntax_error": seed_code.replace("epi_block_m = 32", "epi_block_m = (32"),
    }
    variants["fewer_warps"] = variants["smaller_epilogue_block"].replace(
        "BLOCK_K=bk, num_warps=4", "BLOCK_K=bk, num_warps=2"
    )
    for name, code in variants.items():
        assert code != seed_code, f"variant {name} changed nothing: examples/trimul_triton.py moved on"
    return variants


def trimul_seeded_script(path: Path, seed_code: str) -> Path:
    """A 4-round TriMul search from the seed kernel: cycle c1 on `a` passes, then fails to compile, then is wrong
    (window 2 ends it); the planner adds `a1` under the solved `a`, whose cycle c2 passes again."""
    v = trimul_variants(seed_code)
    return write_script(
        path,
        [
            ("plan:0:0", init_plan([("a", 0.9), ("b", 0.5)])),
            ("write:c1:1", fenced(v["smaller_epilogue_block"])),
            ("write:c1:2", fenced(v["syntax_error"])),
            ("write:c1:3", fenced(v["wrong_bias"])),
            ("plan:1:0", followup_plan("a", "a1")),
            ("write:c2:1", fenced(v["fewer_warps"])),
            ("plan:2:0", json.dumps({"ops": []})),
        ],
    )
