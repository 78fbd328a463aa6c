"""FlashInfer-Bench definitions on a GPU: ksearch's shipped solutions and FlashInfer's own production kernels against
the definition's reference, on the same synthetic workloads, with the `robust` and `flashinfer` timing methods side by
side.

    python3 bench/flashinfer.py [--defs gqa,mla,prefill,moe] [--methods robust,flashinfer] [--languages triton,cuda]
                                [--workloads N] [--production]

Per definition and timing method, the definition's reference (the flashinfer-bench reference, loop-based PyTorch) is
evaluated first as the harness's own baseline and its per-workload latencies written as the baseline JSON; then each
shipped solution (``ksearch/tasks/flashinfer/solutions/``: GQA decode Triton and CUDA, MLA decode Triton, MoE plain
PyTorch; MLA prefill has none, so only its reference is timed) is evaluated with ``?baseline=`` so its score is the
task's mean speedup over the reference. ``--workloads N`` times a spread of N workloads (``?search=N``) instead of all
of them (``?final=1``); correctness always covers every workload. Prints one Markdown table per definition
(milliseconds: robust's median, the `flashinfer` method's mean, as 0.1.2 reports; beside each kernel's, its speedup
over the reference timed the same way) and writes ``flashinfer_bench.json`` to ``$OUT`` when set.

``--production`` also evaluates FlashInfer's own kernel (flashinfer-python 0.7.4, ``ksearch/tasks/flashinfer/
production/``: ``BatchDecodeWithPagedKVCacheWrapper`` for GQA, ``BatchMLAPagedAttentionWrapper`` for MLA decode, the
FP8 block-scale fused MoE; none for MLA prefill) as the harness's own baseline, through the reference's door
(``measure_flashinfer_production``): checked against the reference on every workload and timed like a solution, its
column and speedups beside ours, then one line per solution naming the workloads where FlashInfer's kernel is faster.
Its ``plan`` (host-side scheduling with a device-to-host copy of the page table) is inside every timed call, as the
definition's call is one batch step; a server plans once per step for all its layers, so at microsecond workloads
FlashInfer's kernel alone is faster than its column says. Where flashinfer does not import, the bench says why in
one line and times the rest; where an evaluation fails (its JIT build, an API it lacks, a wrong answer), its error is
one line under the table. Each evaluation JIT-compiles FlashInfer's kernels in the worker's private cache (nvcc, about
a minute or more per kernel family, paid again per evaluation and per timing method); the MoE on an H100 goes through
``cutlass_fused_moe``'s SM90 module, a large CUTLASS build (``--defs gqa,mla`` leaves it out). The wheel (101 MB) and
its dependencies reach an offline GPU machine in two device calls: ``scripts/build_wheelhouse.sh --flashinfer`` here,
``scripts/install_flashinfer.sh`` there (see it for the steps).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ksearch.contracts.candidate import Candidate  # noqa: E402
from ksearch.flows.baselines import (  # noqa: E402
    measure_flashinfer_baseline,
    measure_flashinfer_production,
    write_flashinfer_baseline,
)
from ksearch.tasks.flashinfer import definitions as defs  # noqa: E402
from ksearch.tasks.flashinfer.production import FLASHINFER_VERSION, flashinfer_unavailable, has_production  # noqa: E402
from ksearch.tasks.flashinfer.solutions import solution_languages, solution_source  # noqa: E402
from ksearch.tasks.flashinfer.task import canonical_name  # noqa: E402
from ksearch.tasks.registry import resolve_task  # noqa: E402
from ksearch.tools.evaluator import EvalRequest, evaluate  # noqa: E402

SHORT = {"gqa": defs.GQA_DECODE, "mla": defs.MLA_DECODE, "prefill": defs.MLA_PREFILL, "moe": defs.MOE}
PRODUCTION = "production"
LABEL = {"triton": "ours (Triton)", "cuda": "ours (CUDA)", PRODUCTION: f"FlashInfer {FLASHINFER_VERSION}"}
MOE_LABEL = {"triton": "ours (PyTorch)", PRODUCTION: f"FlashInfer {FLASHINFER_VERSION}"}


@dataclass
class Column:
    """One kernel timed with one method on one definition's workloads."""

    kernel: str
    method: str
    verdict: str = ""
    configs: str = ""
    ms: dict[str, float] = field(default_factory=dict)
    mean_speedup: float | None = None
    seconds: float = 0.0
    device: str = ""
    error: str = ""


def measure(
    definition: str,
    method: str,
    device: str,
    folder: Path,
    workloads: int | None,
    languages: list[str],
    production: bool = False,
) -> list[Column]:
    """The reference's column, then one per shipped solution, then (``production``) FlashInfer's own kernel, for one
    timing method."""
    search, final = (workloads, False) if workloads else (None, True)
    reference = Column("reference", method)
    started = time.monotonic()
    try:
        baseline, ref_eval = measure_flashinfer_baseline(
            resolve_task(canonical_name(definition, search=search, final=final)), device, timing_method=method
        )
    except Exception as exc:  # noqa: BLE001 - report it in the table and go on
        reference.error = f"{type(exc).__name__}: {exc}"[:1500]
        return [reference]
    reference.verdict, reference.configs = str(ref_eval.verdict), f"{ref_eval.configs_passed}/{ref_eval.configs_total}"
    reference.ms, reference.device = baseline, ref_eval.device
    reference.seconds = round(time.monotonic() - started, 1)
    path = write_flashinfer_baseline(
        folder / f"{definition}-{method}.json", baseline, method=method, device=ref_eval.device
    )
    task = resolve_task(canonical_name(definition, search=search, final=final, baseline=path))
    columns = [reference]
    for language in [lang for lang in solution_languages(definition) if lang in languages]:
        column = Column(language, method)
        started = time.monotonic()
        candidate = Candidate(
            task=task.name, language=language, code=solution_source(definition, language), entry_point="run"
        )
        try:
            evaluation = evaluate(
                EvalRequest(candidate=candidate, device=device, timing=True, timing_method=method, run_timeout_s=600.0)
            )
        except Exception as exc:  # noqa: BLE001
            column.error = f"{type(exc).__name__}: {exc}"[:1500]
        else:
            column.verdict, column.device = str(evaluation.verdict), evaluation.device
            column.configs = f"{evaluation.configs_passed}/{evaluation.configs_total}"
            column.ms = {t.config: t.headline_ms for t in evaluation.timings}
            column.mean_speedup = evaluation.score if evaluation.passed else None
            if not evaluation.passed:
                column.error = evaluation.log[-1500:]
        column.seconds = round(time.monotonic() - started, 1)
        columns.append(column)
    if production and has_production(definition):
        columns.append(measure_production(task, method, device))
    return columns


def measure_production(task: Any, method: str, device: str) -> Column:
    """FlashInfer's production kernel as the harness's own baseline; a failure (its JIT, a missing API): one line."""
    column = Column(PRODUCTION, method)
    started = time.monotonic()
    try:
        evaluation = measure_flashinfer_production(task, device, method)
    except Exception as exc:  # noqa: BLE001 - one line in the table, and the bench goes on
        column.error = one_line(f"{type(exc).__name__}: {exc}")
    else:
        column.verdict, column.device = str(evaluation.verdict), evaluation.device
        column.configs = f"{evaluation.configs_passed}/{evaluation.configs_total}"
        column.ms = {t.config: t.headline_ms for t in evaluation.timings}
        column.mean_speedup = evaluation.score if evaluation.passed else None
        if not evaluation.passed:
            column.error = one_line(evaluation.log)
    column.seconds = round(time.monotonic() - started, 1)
    return column


def one_line(text: str) -> str:
    """The line of a failure's log that says why: its last exception line, else its last line (300 characters)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error:" in line or "Exception" in line]
    return ((errors or lines or ["no log"])[-1])[:300]


def losses(definition: str, columns: list[Column]) -> list[str]:
    """Per timing method, the workloads where FlashInfer's kernel beats each of ours (same method, both passed)."""
    labels = MOE_LABEL if definition == defs.MOE else LABEL
    out = []
    for fi in [c for c in columns if c.kernel == PRODUCTION and c.ms]:
        for ours in [c for c in columns if c.method == fi.method and c.kernel not in ("reference", PRODUCTION)]:
            lost = [w.removeprefix("synthetic-") for w in fi.ms if w in ours.ms and ours.ms[w] > fi.ms[w]]
            name = f"{labels.get(ours.kernel, ours.kernel)} {ours.method}"
            out.append(f"- {name} is slower than {labels[PRODUCTION]} on {', '.join(lost) if lost else 'no workload'}")
    return out


def table(definition: str, columns: list[Column]) -> str:
    """A Markdown table: one row per timed workload, one column per (kernel, method), then speedups and verdicts."""
    labels = MOE_LABEL if definition == defs.MOE else LABEL
    heads = [f"{labels.get(c.kernel, c.kernel)} {c.method}" for c in columns]
    workloads = list(dict.fromkeys(name for c in columns for name in c.ms))
    devices = sorted({c.device for c in columns if c.device})
    lines = [
        f"### {definition} ({', '.join(devices) or 'no device'})",
        "",
        "| workload | " + " | ".join(heads) + " |",
        "|---" * (len(heads) + 1) + "|",
    ]
    references = {c.method: c.ms for c in columns if c.kernel == "reference"}
    for name in workloads:
        cells = [cell(c, name, references.get(c.method, {})) for c in columns]
        lines.append(f"| {name.removeprefix('synthetic-')} | " + " | ".join(cells) + " |")
    speedups = ["" if c.kernel == "reference" else f"{c.mean_speedup:.2f}x" if c.mean_speedup else "-" for c in columns]
    lines.append("| mean speedup over the reference | " + " | ".join(speedups) + " |")
    verdicts = [f"{c.verdict} {c.configs}" if c.verdict else "error" for c in columns]
    lines.append("| verdict (workloads passed) | " + " | ".join(verdicts) + " |")
    lines.append("| wall time of the evaluation, s | " + " | ".join(f"{c.seconds:.0f}" for c in columns) + " |")
    errors = [f"- {labels.get(c.kernel, c.kernel)} {c.method}: {c.error}" for c in columns if c.error]
    lost = losses(definition, columns)
    return "\n".join(lines + ([""] + errors if errors else []) + ([""] + lost if lost else []))


def cell(column: Column, workload: str, reference: dict[str, float]) -> str:
    """Milliseconds, and beside a kernel's own the speedup over the reference timed the same way."""
    if workload not in column.ms:
        return "-"
    ms = column.ms[workload]
    if column.kernel == "reference" or workload not in reference or ms <= 0:
        return f"{ms:.4f}"
    return f"{ms:.4f} ({reference[workload] / ms:.1f}x)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--defs", default="gqa,mla,prefill,moe", help=f"comma-separated, of {', '.join(SHORT)}")
    parser.add_argument("--methods", default="robust,flashinfer")
    parser.add_argument("--languages", default="triton,cuda", help="which shipped solutions to time, where one exists")
    parser.add_argument("--workloads", type=int, default=0, help="time a spread of N workloads (default: all)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--production",
        action="store_true",
        help=f"also time FlashInfer {FLASHINFER_VERSION}'s own kernels (GQA, MLA decode, MoE) as a baseline",
    )
    args = parser.parse_args()
    chosen = [SHORT[d.strip()] for d in args.defs.split(",") if d.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    languages = [x.strip() for x in args.languages.split(",") if x.strip()]
    report: dict[str, Any] = {"synthetic_workloads": True, "definitions": {}}
    production = args.production
    if production:
        reason = flashinfer_unavailable()
        print(f"FlashInfer {FLASHINFER_VERSION} production baseline: {reason or 'flashinfer imports'}", flush=True)
        production = reason is None
        report["production"] = reason or "measured"
    with tempfile.TemporaryDirectory(prefix="ksearch-fib-bench-") as tmp:
        for definition in chosen:
            columns: list[Column] = []
            for method in methods:
                print(f"== {definition} [{method}]", flush=True)
                columns += measure(
                    definition, method, args.device, Path(tmp), args.workloads or None, languages, production
                )
            # Side by side: every kernel's robust column, then every kernel's flashinfer column.
            report["definitions"][definition] = [asdict(c) for c in columns]
            print("\n" + table(definition, columns) + "\n", flush=True)
    out = os.environ.get("OUT")
    if out:
        Path(out, "flashinfer_bench.json").write_text(json.dumps(report, indent=2))
        print(f"wrote {Path(out, 'flashinfer_bench.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
