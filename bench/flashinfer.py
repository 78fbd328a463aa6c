"""FlashInfer-Bench tasks on a GPU: reference vs ksearch's Triton and CUDA solutions, through ksearch's evaluator.

    python bench/flashinfer.py [--methods robust,flashinfer] [--defs gqa,mla,prefill,moe] [--languages triton,cuda] [--quick]

- GQA paged decode and MLA paged decode: the definition's reference is evaluated (correctness on every synthetic
  workload, then timed on all of them: ``?final=1``) and its latencies written as the baseline JSON; then the
  our solutions (Triton for both; CUDA through load_inline for GQA) are evaluated with ``?baseline=...`` so their
  ``score`` is the task's mean speedup over the reference.
  Per timing method (``robust``; ``flashinfer`` = flashinfer-bench 0.1.2's procedure, for parity).
- MLA prefill and MoE: load, synthesise real-sized workloads and run the reference as a candidate against itself
  (correctness only), which checks synthesis, the reference and the checker end to end on the GPU.

Prints a table and writes ``flashinfer_bench.json`` to ``$OUT`` when set. Synthetic workloads throughout (no dataset).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ksearch.tasks.flashinfer import definitions as defs  # noqa: E402
from ksearch.flows.baselines import measure_flashinfer_baseline as measure_baseline  # noqa: E402
from ksearch.flows.baselines import write_flashinfer_baseline as write_baseline  # noqa: E402
from ksearch.tasks.flashinfer.baseline import reference_candidate  # noqa: E402
from ksearch.tasks.flashinfer.solutions import solution_languages, solution_source  # noqa: E402
from ksearch.tasks.flashinfer.task import canonical_name, headline_ms  # noqa: E402
from ksearch.tasks.registry import resolve_task  # noqa: E402
from ksearch.contracts.candidate import Candidate  # noqa: E402
from ksearch.tools.evaluator import EvalRequest, evaluate  # noqa: E402

SHORT = {"gqa": defs.GQA_DECODE, "mla": defs.MLA_DECODE, "prefill": defs.MLA_PREFILL, "moe": defs.MOE}
TIMED = (defs.GQA_DECODE, defs.MLA_DECODE)


def timed_pair(definition: str, method: str, device: str, folder: Path, quick: bool, languages: list[str]) -> dict[str, Any]:
    search = 4 if quick else None
    ref_task = resolve_task(canonical_name(definition, search=search, final=not quick))
    started = time.monotonic()
    baseline, ref_eval = measure_baseline(ref_task, device, timing_method=method)
    path = write_baseline(folder / f"{definition}-{method}.json", baseline, method=method, device=ref_eval.device)
    ref_s = time.monotonic() - started
    task = resolve_task(canonical_name(definition, search=search, final=not quick, baseline=path))
    result: dict[str, Any] = {"definition": definition, "method": method, "device": ref_eval.device,
                              "reference_verdict": str(ref_eval.verdict), "seconds": {"reference": round(ref_s, 1)},
                              "solutions": []}  # fmt: skip
    for language in [lang for lang in languages if lang in solution_languages(definition)]:
        candidate = Candidate(task=task.name, language=language, code=solution_source(definition, language), entry_point="run")
        started = time.monotonic()
        evaluation = evaluate(EvalRequest(candidate=candidate, device=device, timing=True, timing_method=method))
        timings = {t.config: t for t in evaluation.timings}
        rows = []
        for config, ref_ms in baseline.items():
            t = timings.get(config)
            ms = headline_ms(t) if t else None
            rows.append({"config": config, "reference_ms": ref_ms, "ms": ms, "speedup": ref_ms / ms if ms else None})
        result["solutions"].append({
            "language": language,
            "verdict": str(evaluation.verdict),
            "configs_passed": f"{evaluation.configs_passed}/{evaluation.configs_total}",
            "mean_speedup_score": evaluation.score,
            "rows": rows,
            "log": evaluation.log[:1500] if not evaluation.passed else "",
            "stage_seconds": evaluation.environment.get("stage_seconds", ""),
            "seconds": round(time.monotonic() - started, 1),
        })  # fmt: skip
    return result


def reference_self_check(definition: str, device: str) -> dict[str, Any]:
    task = resolve_task(canonical_name(definition))
    started = time.monotonic()
    evaluation = evaluate(EvalRequest(candidate=reference_candidate(task), device=device, timing=False, run_timeout_s=600.0))
    return {
        "definition": definition,
        "verdict": str(evaluation.verdict),
        "configs_passed": f"{evaluation.configs_passed}/{evaluation.configs_total}",
        "workloads": [c.name for c in task.test_configs(device)],
        "log": evaluation.log[:1500] if not evaluation.passed else "",
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="robust,flashinfer")
    parser.add_argument("--defs", default="gqa,mla,prefill,moe")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="time a spread of 4 workloads instead of all")
    parser.add_argument("--languages", default="triton,cuda", help="our solutions to time, where one exists")
    args = parser.parse_args()
    chosen = [SHORT[d.strip()] for d in args.defs.split(",") if d.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    languages = [x.strip() for x in args.languages.split(",") if x.strip()]
    report: dict[str, Any] = {"timed": [], "reference_checks": [], "synthetic_workloads": True}
    with tempfile.TemporaryDirectory(prefix="ksearch-fib-bench-") as tmp:
        for definition in chosen:
            if definition in TIMED:
                for method in methods:
                    print(f"== {definition} [{method}]", flush=True)
                    try:
                        result = timed_pair(definition, method, args.device, Path(tmp), args.quick, languages)
                    except Exception as exc:  # noqa: BLE001 - report and go on with the next one
                        result = {"definition": definition, "method": method, "error": f"{type(exc).__name__}: {exc}"[:2000]}
                    report["timed"].append(result)
                    _print_timed(result)
            else:
                print(f"== {definition} [reference vs reference, correctness only]", flush=True)
                try:
                    result = reference_self_check(definition, args.device)
                except Exception as exc:  # noqa: BLE001
                    result = {"definition": definition, "error": f"{type(exc).__name__}: {exc}"[:2000]}
                report["reference_checks"].append(result)
                print(json.dumps(result, indent=1), flush=True)
    out = os.environ.get("OUT")
    if out:
        Path(out, "flashinfer_bench.json").write_text(json.dumps(report, indent=2))
        print(f"wrote {Path(out, 'flashinfer_bench.json')}")
    return 0


def _print_timed(result: dict[str, Any]) -> None:
    if "error" in result:
        print("  ERROR:", result["error"], flush=True)
        return
    print(f"  device {result['device']}; reference {result['reference_verdict']} ({result['seconds']['reference']} s)")
    for solution in result["solutions"]:
        print(f"  [{solution['language']}] {solution['verdict']} ({solution['configs_passed']}); mean speedup score "
              f"{solution['mean_speedup_score']}; {solution['seconds']} s ({solution['stage_seconds']})")  # fmt: skip
        print(f"  {'workload':40s} {'reference ms':>13s} {'ours ms':>10s} {'speedup':>8s}")
        for row in solution["rows"]:
            ours = f"{row['ms']:.4f}" if row["ms"] else "-"
            sp = f"{row['speedup']:.2f}" if row["speedup"] else "-"
            print(f"  {row['config']:40s} {row['reference_ms']:13.4f} {ours:>10s} {sp:>8s}")
        if solution["log"]:
            print("  log:", solution["log"])
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
