"""Why does TriMul's largest shape read faster in ksearch's worker than in GPU MODE's loop? Variants of the loop's
preamble, each in its own process, alternating, with every repeat's time kept.

    python bench/first_repeats.py KERNEL.py [--case 6] [--rounds 4]      (GPU machine, repo root)

``bench/fidelity.py`` read examples/trimul_triton_fast.py's b6 (seqlen 1024, dim 384) 4 % faster through ksearch than
through ``bench/upstream_trimul.py`` over six rounds (2026-11-29), while in one process ksearch's procedure and a bare
upstream loop agree to 0.1 %: something of the process, not of the timing loop. What upstream's process does that
ksearch's worker does not, per config, between the first call and the timed loop:

- ``upstream``: GPU MODE's sequence: a checked first call whose output stays alive into the first timed repeat, with
  the fp32 reference and its comparison computed in the same process (its allocator then holds their blocks);
- ``held``: the first call's output alive into the first repeat, no reference in this process (what ksearch would do
  if it kept the checked output as upstream does);
- ``lean``: the first call's output dropped before the loop, no reference here (ksearch's worker today: the checker
  computes the reference in its own process).

Each process first warms up on benchmark 0 as upstream does, then times the case; printed per variant: the mean (the
score), the median, the first five repeats and the repeat count, and the ratios of the means to ``upstream``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import upstream_trimul as upstream  # noqa: E402

VARIANTS = ("upstream", "held", "lean")
MARK = "REPEATS "


def loop(fn, data, box: list) -> list[float]:  # noqa: ANN001 - the loop of upstream_trimul.run_benchmark
    """``box`` holds the first call's output, if it is to stay alive into the first repeat (the only reference)."""
    import torch

    output = box.pop() if box else None
    durations: list[float] = []
    started = time.perf_counter_ns()
    for _ in range(100):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        output = fn(data)  # rebinding frees the previous output (the checked one, first) as upstream's does
        end.record()
        torch.cuda.synchronize()
        durations.append(start.elapsed_time(end))
        del output
        s = upstream.stats([d * 1e6 for d in durations])
        if len(durations) > 2 and (
            s["err"] / s["mean"] < 0.001 or s["mean"] * s["runs"] > 10e9 or time.perf_counter_ns() - started > 120e9
        ):
            break
    return durations


def child(kernel: str, case_index: int, variant: str) -> None:
    fn = upstream._kernel(kernel)
    upstream.run_benchmark(kernel, upstream.BENCHMARKS[0], False, 100, 1e8)  # upstream's warm-up
    case = upstream.BENCHMARKS[case_index]
    data = upstream.generate_input(*case)
    check_copy = upstream.clone(data) if variant == "upstream" else None  # alive through the loop, as upstream's
    box = [fn(data)]
    if variant == "upstream":
        good, message = upstream.check(check_copy, box[0])
        if not good:
            raise SystemExit(f"the kernel failed the check: {message}")
    elif variant == "lean":
        box.clear()
    durations = loop(fn, data, box)
    del check_copy
    print(MARK + json.dumps({"variant": variant, "ms": durations}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel")
    parser.add_argument("--case", type=int, default=6, help="index into upstream_trimul.BENCHMARKS (6: the largest)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    kernel = str(Path(args.kernel).resolve())
    if args.child:
        child(kernel, args.case, args.child)
        return 0
    means: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for round_index in range(args.rounds):
        order = VARIANTS if round_index % 2 == 0 else VARIANTS[::-1]
        for variant in order:
            done = subprocess.run(
                [sys.executable, __file__, kernel, "--case", str(args.case), "--child", variant],
                capture_output=True,
                text=True,
                check=False,
            )
            lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
            if done.returncode or not lines:
                print(f"{variant}: exit {done.returncode}\n{done.stderr[-3000:]}", file=sys.stderr)
                continue
            ms = json.loads(lines[-1][len(MARK) :])["ms"]
            means[variant].append(statistics.fmean(ms))
            print(
                f"round {round_index + 1} {variant:8s} mean {statistics.fmean(ms):.4f} median "
                f"{statistics.median(ms):.4f} ms over {len(ms)}; first {[round(x, 4) for x in ms[:5]]}",
                flush=True,
            )
    base = statistics.median(means["upstream"]) if means["upstream"] else float("nan")
    for variant, values in means.items():
        if values:
            print(
                f"{variant:8s} median of means {statistics.median(values):.4f} ms = "
                f"{statistics.median(values) / base:.3f}x upstream ({len(values)} processes)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
