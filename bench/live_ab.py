"""One evaluator switch on and off, side by side in one live session: what it does to a TriMul verdict.

After a warm-up evaluation, ``--rounds`` pairs of evaluations of KERNEL (``gpumode-benchmark``, the default) alternate
the evaluator as it is (``on``) and with ``--variable`` set to 0 in the parent (``off``), the order swapped every
round so drift reaches both alike. Each evaluation dumps its timing ledger; printed per evaluation and as medians:
verdict wall time, its stages, the score, and the audit gaps read from the ledgers (``bench/audit_share.py``).
``--device cpu`` (with ``KSEARCH_CPU_TIMING=1``) checks the script itself on the CPU's small TriMul shapes.

    python bench/live_ab.py KERNEL --variable KSEARCH_NEW_SWITCH [--rounds 2]

The variable must be one the parent reads at each evaluation (not one read when a process starts): a switch added to
``ksearch/settings.py`` for the experiment and removed once bench/RESULTS.md records its answer (the switches measured
so far, ``KSEARCH_SAMPLED_AUDITS``, ``KSEARCH_PREPARED_AUDITS``, ``KSEARCH_PROFILE_PROCESS`` and
``KSEARCH_WINNOWED_TUNING``, are gone: see git history). Needs a CUDA GPU.
Writes ``$OUT/bench_live_ab_<variable>.json`` and the ledgers under ``$OUT/ledgers_<variable>`` when ``OUT`` is set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def stage_seconds(stages: str) -> dict[str, float]:
    """``name=1.23s name2=4.5s`` (an evaluation's ``stage_seconds``) as a dict."""
    found = {}
    for part in stages.split():
        name, _, value = part.partition("=")
        try:
            found[name] = float(value.rstrip("s"))
        except ValueError:
            continue
    return found


def run(kernel: Path, variable: str, rounds: int, device: str = "cuda") -> dict[str, Any]:
    from audit_share import shares

    from ksearch.contracts.candidate import Candidate
    from ksearch.settings import LEDGER_DUMP
    from ksearch.tasks.registry import resolve_task
    from ksearch.tools.evaluator import EvalRequest
    from ksearch.tools.executors.local import LocalExecutor

    code = kernel.read_text(encoding="utf-8")
    entry_point = resolve_task("trimul").entry_point
    out = os.environ.get("OUT")  # the ledgers come back with the report (bench/audit_share.py reads them)
    ledgers = Path(out) / f"ledgers_{variable}" if out else Path(tempfile.mkdtemp(prefix="live-ab-"))
    runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    with LocalExecutor() as executor:

        def evaluate(tag: str, env: dict[str, str]) -> tuple[Any, float]:
            candidate = Candidate(task="trimul", language="triton", code=f"{code}\n# {tag}\n", entry_point=entry_point)
            with mock.patch.dict(os.environ, env):
                started = time.perf_counter()
                evaluation = executor.evaluate(
                    EvalRequest(candidate=candidate, device=device, timing_method="gpumode-benchmark")
                )
                seconds = time.perf_counter() - started
            executor.wait_ready(device)  # the next evaluation starts as warm (a search has the LLM's call for this)
            return evaluation, seconds

        evaluate("warm-up", {})
        for index in range(rounds):
            for side in ("on", "off") if index % 2 == 0 else ("off", "on"):
                folder = ledgers / f"{side}-{index}"
                env = {LEDGER_DUMP.name: str(folder), **({variable: "0"} if side == "off" else {})}
                evaluation, seconds = evaluate(f"{side} {index}", env)
                rows = [
                    r
                    for path in sorted(folder.glob("ledger-*.json"))
                    for r in shares(json.loads(path.read_text(encoding="utf-8")), path.name)
                ]
                stages = evaluation.environment.get("stage_seconds", "")
                record = {
                    "round": index,
                    "verdict": evaluation.verdict.value,
                    "wall_s": round(seconds, 2),
                    "latency_ms": evaluation.latency_ms,
                    "stages": stage_seconds(stages),
                    "means_ms": {t.config: t.mean_ms for t in evaluation.timings},
                    "audit_gaps_s": round(sum(r.audit_gaps_s for r in rows), 3),
                    "fresh_audits": sum(r.fresh_audits for r in rows),
                    "fresh_gap_ms": {r.config: r.fresh_gap_ms for r in rows},
                    "problem": evaluation.environment.get("profile", ""),
                }
                runs[side].append(record)
                print(
                    f"{variable} {side:>3} round {index}: {record['verdict']} in {seconds:.2f} s, "
                    f"{evaluation.latency_ms} ms, audit gaps {record['audit_gaps_s']:.2f} s over "
                    f"{record['fresh_audits']} fresh audits; {stages}",
                    flush=True,
                )
    medians = {}
    for side, records in runs.items():
        names = sorted({name for r in records for name in r["stages"]})
        medians[side] = {
            "wall_s": statistics.median(r["wall_s"] for r in records),
            "latency_ms": statistics.median(r["latency_ms"] or 0.0 for r in records),
            "audit_gaps_s": statistics.median(r["audit_gaps_s"] for r in records),
            "stages": {n: statistics.median(r["stages"].get(n, 0.0) for r in records) for n in names},
        }
        m = medians[side]
        staged = " ".join(f"{n}={v:g}" for n, v in m["stages"].items())
        print(
            f"median {side:>3}: verdict {m['wall_s']:.2f} s, latency {m['latency_ms']} ms, audit gaps "
            f"{m['audit_gaps_s']:.2f} s; {staged}"
        )
    shapes = [name for name in (runs["on"][0]["means_ms"] if runs["on"] else {})]
    if runs["on"] and runs["off"]:
        print("per shape, geometric mean over rounds of each side's mean (ms), off / on:")
        for name in shapes:
            on = statistics.geometric_mean([r["means_ms"][name] for r in runs["on"] if name in r["means_ms"]])
            off = statistics.geometric_mean([r["means_ms"][name] for r in runs["off"] if name in r["means_ms"]])
            medians.setdefault("shapes", {})[name] = {"on_ms": on, "off_ms": off, "off_over_on": off / on}
            print(f"  {name}: on {on:.4f}  off {off:.4f}  ratio {off / on:.3f}")
    return {"variable": variable, "kernel": str(kernel), "runs": runs, "median": medians}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", type=Path)
    parser.add_argument("--variable", required=True, help="the evaluator's switch, set to 0 on the 'off' side")
    parser.add_argument("--rounds", type=int, default=2, help="pairs of evaluations (on, off)")
    parser.add_argument("--device", default="cuda", help="cpu: a check of this script (KSEARCH_CPU_TIMING=1)")
    args = parser.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("needs a CUDA GPU (or --device cpu)")
        return 1
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    print(f"device {name}, torch {torch.__version__}, kernel {args.kernel}", flush=True)
    report = {"device": name, "torch": torch.__version__, **run(args.kernel, args.variable, args.rounds, args.device)}
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"bench_live_ab_{args.variable}.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
