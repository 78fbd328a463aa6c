"""How long ksearch's prompts are: a scripted 4-round TriMul search on the CPU (replayed replies, the real graph,
evaluator and prompts), each LLM call's prompt length by call key, for comparing versions of the prompts.

The script: the planner's first tree; cycle c1 on action `a` passes (examples/trimul_triton.py), then fails to
compile, then is wrong (a stagnation window of 2 ends it); the planner updates the tree; cycle c2 passes. So the
lengths cover plan_init, plan_update, action_from_spec, debug (after a failure) and action_on_base prompts.

Usage (repo root): ``PYTHONPATH=$PWD python bench/prompt_lengths.py [--target-gpu h100]``; run it from another
checkout (its own PYTHONPATH) for the other version. Prints JSON: {call key: characters}. Takes a few minutes on
the CPU (four TriMul evaluations under the Triton interpreter).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

SEED = (Path(__file__).resolve().parents[1] / "examples" / "trimul_triton.py").read_text(encoding="utf-8")


def _plan(ops: list[dict]) -> str:
    return json.dumps(
        {"kernel_summary": "TriMul is dominated by the N^3 contraction", "open_questions": ["q"], "ops": ops}
    )


def _insert(parent: str, node_id: str, title: str) -> dict:
    return {
        "op": "insert",
        "parent_id": parent,
        "node": {"id": node_id, "decision": "d", "choice": node_id, "action": {"title": title, "score": 0.8}},
    }


def _fenced(code: str) -> str:
    return f"```python\n{code}\n```\n"


def script(path: Path) -> Path:
    broken = SEED.replace("epi_block_m = 32", "epi_block_m = (32")
    wrong = SEED.replace('weights["to_out_norm.bias"].contiguous()', 'weights["to_out_norm.weight"].contiguous()')
    entries = [
        ("plan:0:0", _plan([_insert("root", "a", "Hybrid baseline"), _insert("root", "b", "Fused input side")])),
        ("write:c1:1", _fenced(SEED)),
        ("write:c1:2", _fenced(broken)),
        ("write:c1:3", _fenced(wrong)),
        (
            "plan:1:0",
            json.dumps(
                {
                    "ops": [
                        {"op": "update", "node_id": "a", "patch": {"notes": "CURRENT: ok"}},
                        _insert("a", "a1", "Smaller epilogue tiles"),
                    ]
                }
            ),
        ),
        ("write:c2:1", _fenced(SEED.replace("epi_block_m = 32", "epi_block_m = 16"))),
        ("plan:2:0", json.dumps({"ops": []})),
    ]
    with path.open("w") as f:
        for key, reply in entries:
            f.write(json.dumps({"call_key": key, "reply": reply}) + "\n")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-gpu", default=None)
    args = parser.parse_args()
    from ksearch.agent.config import RunConfig
    from ksearch.flows import run as runner
    from ksearch.logs import configure_logging

    folder = Path(tempfile.mkdtemp(prefix="ksearch-prompts-"))
    configure_logging(folder / "ksearch.log")  # the run's events go to the file, the lengths alone to stdout
    settings = {"target_gpu": args.target_gpu} if args.target_gpu else {}
    config = RunConfig(
        run_id="prompts",
        task="trimul",
        model=f"replay:{script(folder / 'replies.jsonl')}",
        device="cpu",
        max_rounds=4,
        stagnation_window=2,
        **settings,
    )
    runner.start_run(config, workspace=folder / "ws")
    store = runner.open_store(folder / "ws")
    try:
        lengths = {c["call_key"]: len(c["prompt"]) for c in store.list_llm_calls("prompts")}
    finally:
        store.close()
    print(json.dumps(lengths, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
