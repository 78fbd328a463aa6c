"""Does ksearch read what GPU MODE's harness reads? TriMul kernels timed both ways, side by side in one run (issue 10).

For each kernel, in ABBA order (upstream then ksearch, then ksearch then upstream, ... so clock or thermal drift
and the order itself hit both sides alike):

- **upstream**: ``bench/upstream_trimul.py benchmark`` (and ``leaderboard`` for ``--method gpumode``), a bare loop
  written from GPU MODE's published procedure with no ksearch code inside it, in its own process;
- **ksearch**: ``ksearch eval trimul FILE --device cuda --timing-method gpumode-benchmark --json`` (or ``gpumode``),
  the command a user runs.

Printed: each shape's mean (ms) both ways and their ratio, the geometric means and their ratio, and the ranking of
the kernels both ways. Bar (issue 10): every shape within 3 %, geomean within 2 %, the same ranking. Each side's
numbers are the mean over ``--rounds`` runs of its per-shape means. Beside each shape: upstream's own spread over its
rounds (two processes of the same bare loop), the resolution this machine allows; a shape over the bar by less than
that is marked so (it still counts as over).

    PYTHONPATH=$PWD python bench/fidelity.py [--rounds 2] [--method gpumode-benchmark] [KERNEL.py ...]

Defaults to the repository's Triton and PyTorch TriMul kernels and examples/trimul_triton_fast.py. Writes
``$OUT/fidelity.json`` when ``OUT`` is set. Exits at once, saying so, when there is no GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_KERNELS = ["examples/trimul_triton.py", "examples/trimul_submission.py", "examples/trimul_triton_fast.py"]
UPSTREAM_MODE = {"gpumode-benchmark": "benchmark", "gpumode": "leaderboard"}
SHAPE_BAR, GEOMEAN_BAR = 0.03, 0.02


def run_json(command: list[str], extra_env: dict[str, str] | None = None) -> tuple[dict, float, int]:
    """Run a command (repository root, repository first on PYTHONPATH) that prints one JSON object; return the
    object, the wall time (process start included) and the exit status."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    env.update(extra_env or {})
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - started
    start = proc.stdout.find("{")
    try:
        if start < 0:
            raise json.JSONDecodeError("no object", proc.stdout, 0)
        result, _ = json.JSONDecoder().raw_decode(proc.stdout, start)
    except json.JSONDecodeError:
        raise RuntimeError(f"{' '.join(command)} printed no JSON (rc {proc.returncode}):\n{proc.stderr[-3000:]}") from None
    return result, wall, proc.returncode


def upstream_means(kernel: str, method: str) -> tuple[list[float], float, list[float]]:
    """Per-shape means in ms from the upstream-procedure runner, its wall time, and per-shape medians (diagnostic)."""
    result, wall, _ = run_json([sys.executable, "bench/upstream_trimul.py", UPSTREAM_MODE[method], kernel])
    if not result.get("passed"):
        raise RuntimeError(f"upstream procedure failed {kernel}: {result.get('cases', [])[-1:]}")
    cases = result["cases"]
    return [case["mean"] / 1e6 for case in cases], wall, [case["median"] / 1e6 for case in cases]


def ksearch_means(kernel: str, method: str) -> tuple[list[float], float, dict, list[float]]:
    """Per-shape means in ms from ``ksearch eval``, its wall time, its environment and per-shape medians."""
    command = [sys.executable, "-m", "ksearch.cli", "eval", "trimul", kernel, "--device", "cuda",
               "--timing-method", method, "--json"]  # fmt: skip
    result, wall, _ = run_json(command)
    if result.get("verdict") != "passed":
        raise RuntimeError(f"ksearch eval did not pass {kernel}: {result.get('verdict')} {result.get('log', '')[-2000:]}")
    timings = result["timings"]
    return [t["mean_ms"] for t in timings], wall, result.get("environment", {}), [t["median_ms"] for t in timings]


def _spreads(rows: list[list[float]]) -> list[float]:
    """Per shape, (max - min) / mean over one side's rounds: how far two processes of the same procedure disagree on
    this machine, the floor below which a difference between the two sides cannot be resolved."""
    return [(max(column) - min(column)) / (sum(column) / len(column)) for column in zip(*rows, strict=True)]


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _mean_rows(rows: list[list[float]]) -> list[float]:
    return [sum(column) / len(column) for column in zip(*rows, strict=True)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", default=DEFAULT_KERNELS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--method", choices=sorted(UPSTREAM_MODE), default="gpumode-benchmark")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("bench/fidelity.py: torch is not installed; nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print("bench/fidelity.py: no CUDA GPU visible; this benchmark needs one (exiting)")
        return 0
    device = torch.cuda.get_device_name(0)
    import triton

    print(f"device {device}, torch {torch.__version__}, triton {triton.__version__}, method {args.method}", flush=True)
    report: dict = {"device": device, "torch": torch.__version__, "triton": triton.__version__,
                    "method": args.method, "rounds": args.rounds, "kernels": {}}  # fmt: skip
    failures: list[str] = []
    for kernel in args.kernels:
        ups, ours, walls = [], [], {"upstream": [], "ksearch": []}
        medians: dict[str, list[list[float]]] = {"upstream": [], "ksearch": []}
        stages: list[dict] = []
        for round_index in range(args.rounds):
            for side in ("upstream", "ksearch") if round_index % 2 == 0 else ("ksearch", "upstream"):
                if side == "upstream":
                    means, wall, mids = upstream_means(kernel, args.method)
                    ups.append(means)
                else:
                    means, wall, env, mids = ksearch_means(kernel, args.method)
                    ours.append(means)
                    stages.append({"stage_seconds": env.get("stage_seconds", "")})
                walls[side].append(round(wall, 2))
                medians[side].append(mids)
        up, ks = _mean_rows(ups), _mean_rows(ours)
        ratios = [k / u for k, u in zip(ks, up, strict=True)]
        g_up, g_ks = geomean(up), geomean(ks)
        entry = {"upstream_ms": up, "ksearch_ms": ks, "ratios": ratios, "geomean_upstream_ms": g_up,
                 "geomean_ksearch_ms": g_ks, "geomean_ratio": g_ks / g_up, "walls_s": walls,
                 "upstream_rounds": ups, "ksearch_rounds": ours, "stages": stages, "medians_ms": medians}  # fmt: skip
        report["kernels"][kernel] = entry
        mid_up, mid_ks = _mean_rows(medians["upstream"]), _mean_rows(medians["ksearch"])
        noise = _spreads(ups)
        entry["upstream_round_spread"] = noise
        print(f"\n{kernel}\n  shape  upstream ms  ksearch ms  ratio   (medians: upstream  ksearch)  upstream's own spread")
        for i, (u, k, r) in enumerate(zip(up, ks, ratios, strict=True)):
            flag = "" if abs(r - 1) <= SHAPE_BAR else "  <-- over 3 %"
            if flag and abs(r - 1) <= noise[i]:
                flag += " (within upstream's own round-to-round spread)"
            print(f"  b{i}     {u:10.4f}  {k:10.4f}  {r:6.3f}   {mid_up[i]:9.4f} {mid_ks[i]:9.4f}   {noise[i] * 100:5.1f} %{flag}")
            if flag:
                failures.append(f"{kernel} b{i}: ratio {r:.3f}")
        flag = "" if abs(g_ks / g_up - 1) <= GEOMEAN_BAR else "  <-- over 2 %"
        print(f"  geomean {g_up:8.4f}  {g_ks:10.4f}  {g_ks / g_up:6.3f}{flag}   walls upstream {walls['upstream']} "
              f"ksearch {walls['ksearch']}", flush=True)
        if flag:
            failures.append(f"{kernel} geomean: ratio {g_ks / g_up:.3f}")
    order_up = sorted(report["kernels"], key=lambda k: report["kernels"][k]["geomean_upstream_ms"])
    order_ks = sorted(report["kernels"], key=lambda k: report["kernels"][k]["geomean_ksearch_ms"])
    report["ranking_upstream"], report["ranking_ksearch"] = order_up, order_ks
    print(f"\nranking upstream: {order_up}\nranking ksearch:  {order_ks}")
    if order_up != order_ks:
        failures.append("ranking differs")
    report["failures"] = failures
    print("PASS: within the bars" if not failures else f"FAIL: {failures}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "fidelity.json").write_text(json.dumps(report, indent=1))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
