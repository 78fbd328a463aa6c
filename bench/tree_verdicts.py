"""Live-session time to verdict of two ksearch source trees side by side, on one machine in one call.

    python bench/tree_verdicts.py KERNEL.py --tree old=DIR --tree new=. [--rounds 3] [--evals 2] [--method M]
    python bench/tree_verdicts.py KERNEL.py --tree old=DIR --tree new=. --tree rare=.,KSEARCH_AUDIT_RATE=0.05

Each round starts one process per tree (order alternating between rounds), with ``PYTHONPATH`` set to that tree so
its evaluator's own worker and checker processes import that tree's code. A process opens a session, spends one
evaluation warming it up (not counted), then times ``--evals`` evaluations of the kernel as a search makes them
(the session ready between them) and prints one JSON line each: wall seconds, verdict, score and the stages the
evaluation reports. The summary gives each tree's median and the ratio, so a change's cost is read against the code
before it on the same GPU, the same day (the question "is the verdict within a few percent of what it was" cannot be
answered from figures taken on different machines).

A tree is any checkout of this repository (``git archive REV | tar -x -C DIR``); it needs the same dependencies.
``,VAR=VALUE`` after a tree's folder sets a variable in its process (one tree under two settings);
``TREE_VERDICTS_PROFILE=0`` asks that tree's evaluations for no per-kernel profile (``EvalRequest.profile``, issue
31), to tell the trusted timing's cost from the profile's against a tree older than both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

MARK = "VERDICT "


def child(tree: Path, kernel: Path, evals: int, method: str, device: str) -> int:
    """Runs in the tree's own process: a session, one warm-up evaluation, then ``evals`` timed ones."""
    import ksearch
    from ksearch.contracts.candidate import Candidate
    from ksearch.tasks.registry import resolve_task
    from ksearch.tools.evaluator import EvalRequest
    from ksearch.tools.executors.local import LocalExecutor

    if not Path(ksearch.__file__).resolve().is_relative_to(tree):
        print(f"ksearch came from {ksearch.__file__}, not from {tree}", file=sys.stderr)
        return 2
    entry_point = resolve_task("trimul").entry_point
    code = kernel.read_text(encoding="utf-8")
    unprofiled = {"profile": False} if os.environ.get("TREE_VERDICTS_PROFILE") == "0" else {}
    with LocalExecutor() as executor:
        for index in range(evals + 1):
            tag = "warm-up" if index == 0 else f"evaluation {index}"
            candidate = Candidate(
                task="trimul", language="triton", code=f"{code}\n# {tree.name} {tag}\n", entry_point=entry_point
            )
            started = time.perf_counter()
            evaluation = executor.evaluate(
                EvalRequest(candidate=candidate, device=device, timing_method=method, **unprofiled)
            )
            seconds = time.perf_counter() - started
            executor.wait_ready(device)  # as a search has the LLM's next call to get the next worker ready
            means = [t.mean_ms for t in evaluation.timings if t.mean_ms]
            record = {
                "index": index,
                "seconds": round(seconds, 3),
                "verdict": evaluation.verdict.value,
                "score_ms": round(statistics.geometric_mean(means), 4) if means else None,
                "stages": evaluation.environment.get("stage_seconds", ""),
            }
            print(MARK + json.dumps(record), flush=True)
    return 0


def run_tree(
    name: str, tree: Path, kernel: Path, evals: int, method: str, device: str, variables: dict[str, str]
) -> list[dict]:
    env = {**os.environ, **variables}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        str(tree),
        str(kernel),
        "--evals",
        str(evals),
        "--method",
        method,
        "--device",
        device,
    ]
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    records = [json.loads(line[len(MARK) :]) for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or len(records) != evals + 1:
        print(f"{name}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}", file=sys.stderr)
    for record in records:
        print(
            f"  {name}: {'warm-up' if record['index'] == 0 else 'eval':8s} {record['seconds']:6.2f} s "
            f"{record['verdict']} {record['score_ms']} ms  {record['stages']}",
            flush=True,
        )
    return [r for r in records if r["index"] > 0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel", type=Path)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=DIR", help="two or more")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--evals", type=int, default=2, help="timed evaluations per process, after its warm-up")
    parser.add_argument("--method", default="gpumode-benchmark")
    parser.add_argument("--device", default="cuda", help="cpu: a check of the script itself (KSEARCH_CPU_TIMING=1)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    kernel = args.kernel.resolve()
    if args.child is not None:
        return child(args.child.resolve(), kernel, args.evals, args.method, args.device)
    parsed = [_tree(spec) for spec in args.tree]
    trees = [tree for tree in parsed if tree is not None]
    if len(trees) < 2 or len(trees) < len(parsed):
        parser.error("give at least two --tree NAME=DIR[,VAR=VALUE...]")
    seconds: dict[str, list[float]] = {name: [] for name, _, _ in trees}
    for round_index in range(args.rounds):
        order = trees if round_index % 2 == 0 else trees[::-1]
        print(f"round {round_index + 1}: " + ", ".join(name for name, _, _ in order), flush=True)
        for name, tree, variables in order:
            records = run_tree(name, tree, kernel, args.evals, args.method, args.device, variables)
            seconds[name] += [r["seconds"] for r in records if r["verdict"] == "passed"]
    first = trees[0][0]
    for name, values in seconds.items():
        if not values:
            print(f"{name}: no passed evaluation")
            continue
        median = statistics.median(values)
        ratio = median / statistics.median(seconds[first]) if seconds[first] else float("nan")
        print(
            f"{name}: median {median:.2f} s over {len(values)} (min {min(values):.2f}, max {max(values):.2f}); "
            f"{ratio:.3f}x {first}"
        )
    return 0


def _tree(spec: str) -> tuple[str, Path, dict[str, str]] | None:
    """``NAME=DIR[,VAR=VALUE...]`` -> (name, folder, variables), or None when malformed."""
    name, _, rest = spec.partition("=")
    folder, *assignments = rest.split(",")
    if not name or not folder or not all("=" in a for a in assignments):
        return None
    return name, Path(folder).resolve(), dict(a.split("=", 1) for a in assignments)


if __name__ == "__main__":
    sys.exit(main())
