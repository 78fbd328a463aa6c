"""KernelBench-format problems on a GPU: our Triton solutions against PyTorch eager and torch.compile.

Usage (on a GPU machine, from the repository root):

    python bench/kernelbench.py                 # all four problems, eager and compile baselines
    python bench/kernelbench.py --no-compile    # eager only (faster)
    python bench/kernelbench.py --problems 1/1,2/2

The problems are ksearch's own test problems (tests/tasks/data/kernelbench/, written in KernelBench's format, not
copied from KernelBench) with their size constants rewritten to KernelBench-like GPU sizes in a temp checkout.
Every number comes from ksearch's evaluator (``evaluate()``: a fresh worker per candidate, correctness on 5 seeded
trials first, then the evaluator's timing method), and the baselines are the problem's own ``Model`` packaged as a
candidate (``ksearch.tasks.kernelbench.baseline``). Prints a table; writes kernelbench.json to $OUT when it is set.
Meant to finish in about 3 minutes on an H100.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ksearch.contracts.candidate import Candidate  # noqa: E402
from ksearch.flows.baselines import measure_baseline, speedup  # noqa: E402
from ksearch.tasks.kernelbench import KernelBenchTask  # noqa: E402
from ksearch.tasks.kernelbench.problem_files import find_problem  # noqa: E402
from ksearch.tools.evaluator import EvalRequest, evaluate  # noqa: E402

DATA = REPO / "tests" / "tasks" / "data" / "kernelbench"
PROBLEMS: dict[str, tuple[str, dict[str, str]]] = {
    # spec: (solution file, size constants for the GPU)
    "1/1": ("level1_1_ok.py", {"batch_size": "4096", "dim": "8192"}),
    "1/2": ("level1_2_ok.py", {"batch_size": "16", "rows": "1024", "cols": "2048"}),
    "2/1": ("level2_1_ok.py", {"batch_size": "2048", "in_features": "2048", "out_features": "2048"}),
    "2/2": ("level2_2_ok.py", {"batch_size": "2048", "in_features": "1024", "out_features": "1024"}),
}


def scaled_checkout(dest: Path) -> Path:
    """A copy of the test checkout with the GPU sizes written into each problem's constants."""
    shutil.copytree(DATA / "KernelBench", dest / "KernelBench")
    for spec, (_solution, sizes) in PROBLEMS.items():
        path = find_problem(spec, dest)
        text = path.read_text()
        for name, value in sizes.items():
            text, count = re.subn(rf"^{name} = .*$", f"{name} = {value}", text, flags=re.MULTILINE)
            assert count == 1, f"{path.name}: constant {name} not found"
        path.write_text(text)
    return dest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated LEVEL/ID (default: all)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ksearch-kb-bench-") as tmp:
        root = scaled_checkout(Path(tmp))
        workspace = Path(tmp) / "ws"
        for spec in args.problems.split(","):
            solution, _sizes = PROBLEMS[spec]
            task = KernelBenchTask(find_problem(spec, root))
            started = time.monotonic()
            ours = evaluate(
                EvalRequest(
                    candidate=Candidate(
                        task=task.name,
                        language="triton",
                        code=(DATA / "solutions" / solution).read_text(),
                        entry_point="ModelNew",
                    ),
                    device=args.device,
                    timing=True,
                )
            )
            eager = measure_baseline(task, device=args.device, mode="eager", workspace=workspace)
            compiled = (
                None
                if args.no_compile
                else measure_baseline(task, device=args.device, mode="compile", workspace=workspace)
            )
            row = {
                "problem": task.title.removeprefix("KernelBench "),
                "verdict": ours.verdict.value,
                "device": ours.device,
                "ours_ms": ours.latency_ms,
                "eager_ms": eager.latency_ms,
                "compile_ms": compiled.latency_ms if compiled else None,
                "speedup_vs_eager": speedup(eager, ours),
                "speedup_vs_compile": speedup(compiled, ours) if compiled else None,
                "ours_timings": [t.model_dump() for t in ours.timings],
                "eager_timings": [t.model_dump() for t in eager.timings],
                "compile_timings": [t.model_dump() for t in compiled.timings] if compiled else [],
                "notes": "; ".join(
                    x
                    for x in (
                        ours.log[:300] if not ours.passed else "",
                        "" if eager.latency_ms else f"eager: {eager.verdict} {eager.log[:200]}",
                        ""
                        if not compiled or compiled.latency_ms
                        else f"compile: {compiled.verdict} {compiled.log[:200]}",
                    )
                    if x
                ),
                "wall_s": round(time.monotonic() - started, 1),
            }
            rows.append(row)
            print(
                json.dumps({k: row[k] for k in ("problem", "verdict", "ours_ms", "eager_ms", "compile_ms", "wall_s")}),
                flush=True,
            )
    fmt = lambda v, suffix="": "-" if v is None else f"{v:.4f}{suffix}"  # noqa: E731
    header = (
        f"{'problem':34} {'verdict':10} {'eager ms':>10} {'compile ms':>11} {'ours ms':>10} {'vs eager':>9} "
        f"{'vs compile':>10}"
    )
    print("\n" + header + "\n" + "-" * len(header))
    for r in rows:
        print(
            f"{r['problem']:34} {r['verdict']:10} {fmt(r['eager_ms']):>10} {fmt(r['compile_ms']):>11} "
            f"{fmt(r['ours_ms']):>10} "
            f"{fmt(r['speedup_vs_eager'], 'x'):>9} {fmt(r['speedup_vs_compile'], 'x'):>10}"
        )
        if r["notes"]:
            print(f"    note: {r['notes']}")
    result = {"rows": rows, "python": sys.version.split()[0]}
    try:
        import torch
        import triton

        result.update(
            torch=torch.__version__,
            triton=triton.__version__,
            gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        )
    except Exception:  # noqa: BLE001 - versions are a courtesy
        pass
    if os.environ.get("OUT"):
        out = Path(os.environ["OUT"]) / "kernelbench.json"
        out.write_text(json.dumps(result, indent=2))
        print(f"wrote {out}")
    return 0 if all(r["verdict"] == "passed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
