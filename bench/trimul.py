"""GPU MODE TriMul on a GPU: ksearch's Triton kernel against the float32 reference, through ksearch's evaluator.

Usage (on a GPU machine, from the repository root):

    python bench/trimul.py                                  # reference + Triton kernel, gpumode and robust timing
    python bench/trimul.py --modes gpumode --solutions triton
    python bench/trimul.py --solutions reference,triton,pytorch

Solutions: ``reference`` is the task's own reference packaged as a GPU MODE submission (float32, TF32 off),
``triton`` is examples/trimul_triton.py, ``pytorch`` is examples/trimul_submission.py; any other name ending in
``.py`` is read as a submission file (``--solutions pytorch,examples/trimul_triton_fast.py,submission.py`` puts a
search's exported best beside both in one run). Each (solution, timing method)
pair is one ``evaluate()``: a fresh sandboxed worker runs all 18 GPU MODE tests (masks really applied), then times the
7 benchmarks with the method. Prints a table per method (per-shape latency, geometric mean, speedup over the
reference) and writes trimul.json to $OUT when it is set (rewritten after every evaluation, so a partial run still
leaves its numbers). Meant to finish in about 5 minutes on an H100.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ksearch.contracts.candidate import Candidate  # noqa: E402
from ksearch.tasks.trimul import TrimulTask  # noqa: E402
from ksearch.tools.evaluator import EvalRequest, evaluate  # noqa: E402

SOLUTIONS = {
    "reference": lambda task: task.reference_submission_source(),
    "triton": lambda task: (REPO / "examples" / "trimul_triton.py").read_text(),
    "pytorch": lambda task: (REPO / "examples" / "trimul_submission.py").read_text(),
    "cuda": lambda task: (REPO / "examples" / "trimul_cuda.py").read_text(),
}
LANGUAGE = {"cuda": "cuda"}  # the others are plain Python / Triton modules


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values and all(v > 0 for v in values) else None


def versions() -> dict[str, str | None]:
    info: dict[str, str | None] = {"python": sys.version.split()[0]}
    try:
        import torch
        import triton

        info.update(
            torch=torch.__version__,
            triton=triton.__version__,
            gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        )
    except Exception:  # noqa: BLE001 - versions are a courtesy
        pass
    return info


def solution_source(name: str, task: TrimulTask) -> str:
    """A named solution's code, or a submission file's when the name is a path."""
    return SOLUTIONS[name](task) if name in SOLUTIONS else Path(name).read_text(encoding="utf-8")


def write_json(result: dict) -> None:
    if os.environ.get("OUT"):
        out = Path(os.environ["OUT"]) / "trimul.json"
        out.write_text(json.dumps(result, indent=2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--solutions",
        default="reference,triton",
        help=f"comma-separated, of {', '.join(SOLUTIONS)} or paths to submission files (*.py)",
    )
    parser.add_argument("--modes", default="gpumode,robust", help="timing methods (gpumode, robust, gpumode-benchmark)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--run-timeout", type=float, default=600.0, help="seconds per worker pass")
    args = parser.parse_args()
    task = TrimulTask()
    solutions = args.solutions.split(",")
    unknown = [name for name in solutions if name not in SOLUTIONS and not name.endswith(".py")]
    if unknown:
        parser.error(f"unknown solution(s) {', '.join(unknown)}: use {', '.join(SOLUTIONS)} or a path ending in .py")
    modes = args.modes.split(",")
    bench_names = [c.name for c in task.benchmark_configs(args.device)]
    result: dict = {"versions": versions(), "benchmarks": bench_names, "runs": []}

    for mode in modes:
        for name in solutions:
            started = time.monotonic()
            evaluation = evaluate(
                EvalRequest(
                    candidate=Candidate(
                        task="trimul",
                        language=LANGUAGE.get(name, "triton"),
                        code=solution_source(name, task),
                        entry_point="custom_kernel",
                    ),
                    device=args.device,
                    timing=True,
                    timing_method=mode,
                    run_timeout_s=args.run_timeout,
                )
            )
            run = {
                "solution": name,
                "mode": mode,
                "verdict": evaluation.verdict.value,
                "configs_passed": evaluation.configs_passed,
                "configs_total": evaluation.configs_total,
                "device": evaluation.device,
                "latency_ms": evaluation.latency_ms,
                "geomean_mean_ms": geomean([t.mean_ms for t in evaluation.timings]) if evaluation.timings else None,
                "timings": [t.model_dump() for t in evaluation.timings],
                "log": "" if evaluation.passed else evaluation.log[:2000],
                "wall_s": round(time.monotonic() - started, 1),
            }
            result["runs"].append(run)
            write_json(result)
            print(
                json.dumps(
                    {
                        k: run[k]
                        for k in (
                            "solution",
                            "mode",
                            "verdict",
                            "configs_passed",
                            "latency_ms",
                            "geomean_mean_ms",
                            "wall_s",
                        )
                    }
                ),
                flush=True,
            )
            if run["log"]:
                print("    " + run["log"][:600].replace("\n", "\n    "), flush=True)

    for mode in modes:
        runs = {r["solution"]: r for r in result["runs"] if r["mode"] == mode}
        ref = {t["config"]: t for t in runs.get("reference", {}).get("timings", [])}
        stat = "mean_ms" if mode.startswith("gpumode") else "median_ms"
        print(f"\n== timing method {mode}: per-shape {stat.removesuffix('_ms')} in ms (speedup over the reference) ==")
        header = f"{'benchmark':32}" + "".join(f"{s:>24}" for s in runs)
        print(header + "\n" + "-" * len(header))
        for bench in bench_names:
            cells = []
            for r in runs.values():
                t = next((t for t in r["timings"] if t["config"] == bench), None)
                if t is None:
                    cells.append(f"{'-':>24}")
                    continue
                sp = f" ({ref[bench][stat] / t[stat]:.2f}x)" if bench in ref and t[stat] > 0 else ""
                cells.append(f"{t[stat]:>14.4f}{sp:>10}")
            print(f"{bench:32}" + "".join(cells))
        ref_geo = geomean([t[stat] for t in ref.values()]) if ref else None
        cells = []
        for r in runs.values():
            geo = geomean([t[stat] for t in r["timings"]])
            sp = f" ({ref_geo / geo:.2f}x)" if geo and ref_geo else ""
            cells.append(f"{'-':>24}" if geo is None else f"{geo:>14.4f}{sp:>10}")
        print(f"{'geomean':32}" + "".join(cells))
        verdicts = [f"{r['verdict']} {r['configs_passed']}/{r['configs_total']}" for r in runs.values()]
        print(f"{'verdict':32}" + "".join(f"{v:>24}" for v in verdicts))
    write_json(result)
    if os.environ.get("OUT"):
        print(f"wrote {Path(os.environ['OUT']) / 'trimul.json'}")
    return 0 if all(r["verdict"] == "passed" for r in result["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
