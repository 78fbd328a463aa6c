"""What issue 36's KernelBench checks do to the reference itself, per problem of a level: no LLM needed.

Usage (on a GPU machine, from the repository root, with a KernelBench checkout):

    python bench/kernelbench_checks.py --kernelbench-root ~/KernelBench --level 1 --problems 1-100

For each problem: whether its reference is deterministic (else it is unjudgeable and not evaluated), on which input
variants its reference is not finite (those variants are not judged for it), and the evaluation of the problem's
own ``Model`` as the kernel (``ModelNew = Model``, on ``kernelbench:...?allow=reference_op,no_custom_kernel``, since
it is PyTorch by definition) through the real evaluator, correctness only. The reference must pass every check it
is given: a check that fails it is a false rejection, and is listed per check. Prints a table and the counts per
check; writes kernelbench_checks.json to $OUT when it is set (after every problem, so a cut run keeps what it did).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from ksearch.contracts.candidate import Candidate  # noqa: E402
from ksearch.tasks.kernelbench import KernelBenchTask, UnjudgeableProblem  # noqa: E402
from ksearch.tasks.kernelbench.judging import check_of  # noqa: E402
from ksearch.tasks.kernelbench.problem_files import kernelbench_root, parse_ids, problems  # noqa: E402
from ksearch.tasks.kernelbench.variants import VARIANTS  # noqa: E402
from ksearch.tools.evaluator import EvalRequest, EvaluatorSession, evaluate  # noqa: E402

ALLOW = ("no_custom_kernel", "reference_op")


def variants_not_judged(task: KernelBenchTask, device: str) -> list[str]:
    """The variants on which the reference's output is not finite (the checker does not judge those)."""
    skipped = []
    for config in task.test_configs(device):
        if config.distribution in VARIANTS:
            expected = task.expected(config, task.make_inputs(config, device))
            tensors = expected if isinstance(expected, (tuple, list)) else [expected]
            if any(
                isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all())
                for t in tensors
            ):
                skipped.append(config.name)
            del expected, tensors
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return skipped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernelbench-root", default=None)
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--problems", default=None, help="ids and ranges, e.g. 1-20,25 (default: all)")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    found = problems(kernelbench_root(args.kernelbench_root), args.level)
    ids = parse_ids(args.problems) if args.problems else list(found)
    rows: list[dict] = []
    out = Path(os.environ["OUT"]) / "kernelbench_checks.json" if os.environ.get("OUT") else None
    with EvaluatorSession(args.device) as session:
        for problem_id in ids:
            started = time.monotonic()
            task = KernelBenchTask(found[problem_id], allow=ALLOW)
            row: dict = {"problem": problem_id, "title": task.title, "cpu": task.device_note("cpu")}
            try:
                task.validate(args.device)
            except UnjudgeableProblem as exc:
                row.update(verdict="unjudgeable", detail=str(exc))
            else:
                row["variants_not_judged"] = variants_not_judged(task, args.device)
                code = task.source.rstrip() + "\n\nModelNew = Model\n"
                candidate = Candidate(task=task.name, language="triton", code=code, entry_point="ModelNew")
                evaluation = evaluate(
                    EvalRequest(candidate=candidate, device=args.device, timing=False), session=session
                )
                row.update(
                    verdict=evaluation.verdict.value, check=check_of(evaluation), detail=evaluation.summary()[:300]
                )
            row["seconds"] = round(time.monotonic() - started, 1)
            rows.append(row)
            print(
                f"{problem_id:>4} {row['verdict']:<12} {row.get('check') or '':<20} "
                f"not judged: {','.join(row.get('variants_not_judged', [])) or '-':<30} {row['seconds']:>6}s  "
                f"{task.title}",
                flush=True,
            )
            if out is not None:
                out.write_text(json.dumps(rows, indent=2))
    false_rejections: dict[str, list[int]] = {}
    for row in rows:
        if row.get("check"):
            false_rejections.setdefault(row["check"], []).append(row["problem"])
    skipped = {v: [r["problem"] for r in rows if v in r.get("variants_not_judged", [])] for v in VARIANTS}
    print(f"\n{sum(r['verdict'] == 'passed' for r in rows)}/{len(rows)} references pass every check")
    print(
        "checks failing the reference (false rejections):", json.dumps(false_rejections) if false_rejections else "none"
    )
    print("unjudgeable (reference not deterministic):", [r["problem"] for r in rows if r["verdict"] == "unjudgeable"])
    print(
        "variants not judged (reference not finite), problems per variant:",
        json.dumps({v: len(p) for v, p in skipped.items()}),
    )
    print("checked at reduced sizes on the CPU:", sum(1 for r in rows if r["cpu"]), "of", len(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
