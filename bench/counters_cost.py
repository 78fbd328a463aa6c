"""What hardware counters cost a TriMul cycle (issue 57), measured side by side in one run on one GPU.

A cycle is ``--attempts`` evaluations of a TriMul kernel (examples/trimul_triton_fast.py by default: each a fresh
sandboxed worker, correctness then timing, as the search's profile node runs them) followed, with counters on, by
one collection for the cycle's best (Nsight Compute inside the candidate's containment, with a worker on the
``--shapes`` longest shapes, ``ksearch.tools.counters.collect``). The session's checker is started and warm before
anything is measured, as in a search after its first evaluation. Every figure is wall time with the GPU held.

Prints the cycle's GPU time without and with counters and their ratio (target: at most 0.15), where the counters'
time went (the processes' start, torch's and the candidate's import, the unmarked calls that compile, the profiled
calls with ncu's replay, reading the report back), the trusted probe that picks the containment ncu works through
(paid once per process), and the counters as the model reads them.
Writes ``$OUT/counters_cost.json`` when ``OUT`` is set, holding the best evaluation with its counters, for
``scripts/counter_prompts.py --evaluation``, and ncu's report, log and raw CSV pages to ``$OUT/ncu/`` (the pages are
the format ``tests/tools/ncu/`` fixtures follow).

Usage (repo root, GPU machine): ``python bench/counters_cost.py [--attempts 5] [--shapes 2] [--kernel FILE]``.
Exits at once with a message when there is no GPU or no ncu.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernel", type=Path, default=REPO / "examples" / "trimul_triton_fast.py")
    parser.add_argument(
        "--attempts", type=int, default=5, help="evaluations in the cycle (a cycle ends after --stagnation-window, 5)"
    )
    parser.add_argument("--shapes", type=int, default=2, help="shapes the counters profile")
    args = parser.parse_args()

    from ksearch.agent.counters_text import counters_text
    from ksearch.flows.evaluate import eval_request_for_file
    from ksearch.tools.counters import collect, ncu_command, probe
    from ksearch.tools.counters.budget import SHARE, choose_shapes
    from ksearch.tools.executors.local import LocalExecutor
    from ksearch.tools.fingerprint import probe_device

    if not probe_device("cuda").is_gpu:
        print("no GPU here: counters are read on a GPU only")
        return 0
    ncu = ncu_command.find_ncu()
    if ncu is None:
        print("no ncu here (Nsight Compute): set KSEARCH_NCU or put ncu on PATH")
        return 0
    request = eval_request_for_file("trimul", args.kernel, device="cuda")
    with LocalExecutor(prestart=True) as executor:
        with executor.session(request.device):
            pass  # the checker starts now, outside the measured cycle
        executor.wait_ready(request.device)
        evaluations = []
        for attempt in range(1, args.attempts + 1):
            started = time.monotonic()
            evaluation = executor.evaluate(request)
            evaluations.append((time.monotonic() - started, evaluation))
            print(f"attempt {attempt}: {evaluation.summary()} in {evaluations[-1][0]:.1f} s", flush=True)
        passed = [e for _, e in evaluations if e.passed and e.timings]
        if not passed:
            print("no attempt passed: nothing to profile")
            return 1
        best = min(passed, key=lambda e: e.latency_ms or float("inf"))
        started = time.monotonic()
        rung, why = probe.choose_rung(request.device, collect.resolved(ncu))
        probe_s = time.monotonic() - started
        print(f"containment probe: {rung.describe() if rung else why} in {probe_s:.1f} s", flush=True)
        shapes = choose_shapes(best.timings, args.shapes)
        started = time.monotonic()
        keep = Path(os.environ["OUT"], "ncu") if os.environ.get("OUT") else None
        report = collect.collect_counters(request, shapes, keep=keep)  # what executor.counters runs, its files kept
        counters_s = time.monotonic() - started
    report = report.model_copy(update={"device": best.device}) if report.collected else report
    cycle_s = sum(seconds for seconds, _ in evaluations)
    ratio = counters_s / cycle_s
    first = (counters_s + probe_s) / cycle_s
    print()
    print(counters_text(report, detail=True))
    print()
    print(f"GPU: {best.device}; {report.tool or 'ncu'}; kernel {args.kernel.name}; shapes {', '.join(shapes)}")
    print(f"cycle without counters: {args.attempts} evaluations, {cycle_s:.1f} s")
    print(f"cycle with counters:    {cycle_s + counters_s:.1f} s (counters {counters_s:.1f} s, status {report.status})")
    print(f"ratio counters / cycle: {ratio:.3f} (target <= {SHARE}); with the once-per-process probe: {first:.3f}")
    print(f"where the counters' {counters_s:.1f} s went: {stages_text(report.stages)}")
    out = os.environ.get("OUT")
    if out:
        record = {
            "kernel": str(args.kernel.relative_to(REPO)) if args.kernel.is_relative_to(REPO) else str(args.kernel),
            "attempt_s": [round(s, 3) for s, _ in evaluations],
            "cycle_s": round(cycle_s, 3),
            "counters_s": round(counters_s, 3),
            "probe_s": round(probe_s, 3),
            "ratio": round(ratio, 4),
            "ratio_with_probe": round(first, 4),
            "stages": report.stages,
            "best": json.loads(best.model_copy(update={"counters": report}).model_dump_json()),
        }
        Path(out, "counters_cost.json").write_text(json.dumps(record, indent=2))
    return 0 if report.collected else 1


STAGE_WORDS = {
    "start": "the launcher's layers, ncu's, Python's and the worker's start, and exit",
    "load": "torch, CUDA and the candidate imported",
    "warm": "the unmarked calls: compile, autotune",
    "profiled": "the marked calls with ncu's replay",
    "import": "ncu reading its report back, contained",
}


def stages_text(stages: dict[str, float]) -> str:
    """The collection's stages (``CounterReport.stages``) in words; ``ncu`` is the first four together."""
    parts = [f"{name} {stages[name]:.1f} s ({words})" for name, words in STAGE_WORDS.items() if name in stages]
    return "; ".join(parts) or "no stages recorded"


if __name__ == "__main__":
    sys.exit(main())
