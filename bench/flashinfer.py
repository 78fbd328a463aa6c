"""FlashInfer-Bench definitions on a GPU: ksearch's shipped solutions against the definition's reference, on the same
synthetic workloads, with the `robust` and `flashinfer` timing methods side by side.

    python3 bench/flashinfer.py [--defs gqa,mla,prefill,moe] [--methods robust,flashinfer] [--languages triton,cuda]
                                [--workloads N]

Per definition and timing method, the definition's reference (the flashinfer-bench reference, loop-based PyTorch) is
evaluated first as the harness's own baseline and its per-workload latencies written as the baseline JSON; then each
shipped solution (``ksearch/tasks/flashinfer/solutions/``: GQA decode Triton and CUDA, MLA decode Triton, MoE plain
PyTorch; MLA prefill has none, so only its reference is timed) is evaluated with ``?baseline=`` so its score is the
task's mean speedup over the reference. ``--workloads N`` times a spread of N workloads (``?search=N``) instead of all
of them (``?final=1``); correctness always covers every workload. Prints one Markdown table per definition
(milliseconds: robust's median, the flashinfer method's mean, as 0.1.2 reports) and writes ``flashinfer_bench.json``
to ``$OUT`` when set.

The FlashInfer library's own kernels as a baseline (what a user compares against in production) are not measured:
that needs the flashinfer-python wheel (~62 MB) and its dependencies on the GPU node (no network there), carried in a
device call of their own (the whole payload of a call is 64 MiB: the wheel fits beside this 2.5 MB repository only
alone, its dependencies in a second call) and installed into a folder that lives as long as the warm machine; then
its kernels JIT-compile with nvcc on first use (minutes per kernel family, each paid again on a fresh machine), and
a baseline module per definition calls its wrappers (``BatchDecodeWithPagedKVCacheWrapper`` for GQA,
``BatchMLAPagedAttentionWrapper`` for MLA: ``plan`` on the page table, then ``run``; the fp8 block-scale MoE through
its fused MoE entry point) as a harness baseline. Not done yet; see bench/RESULTS.md.
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
from ksearch.flows.baselines import measure_flashinfer_baseline, write_flashinfer_baseline  # noqa: E402
from ksearch.tasks.flashinfer import definitions as defs  # noqa: E402
from ksearch.tasks.flashinfer.solutions import solution_languages, solution_source  # noqa: E402
from ksearch.tasks.flashinfer.task import canonical_name  # noqa: E402
from ksearch.tasks.registry import resolve_task  # noqa: E402
from ksearch.tools.evaluator import EvalRequest, evaluate  # noqa: E402

SHORT = {"gqa": defs.GQA_DECODE, "mla": defs.MLA_DECODE, "prefill": defs.MLA_PREFILL, "moe": defs.MOE}
LABEL = {"triton": "ours (Triton)", "cuda": "ours (CUDA)"}
MOE_LABEL = {"triton": "ours (PyTorch)"}


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
    definition: str, method: str, device: str, folder: Path, workloads: int | None, languages: list[str]
) -> list[Column]:
    """The reference's column, then one per shipped solution, for one timing method."""
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
    return columns


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
    for name in workloads:
        cells = [f"{c.ms[name]:.4f}" if name in c.ms else "-" for c in columns]
        lines.append(f"| {name.removeprefix('synthetic-')} | " + " | ".join(cells) + " |")
    speedups = ["" if c.kernel == "reference" else f"{c.mean_speedup:.2f}x" if c.mean_speedup else "-" for c in columns]
    lines.append("| mean speedup over the reference | " + " | ".join(speedups) + " |")
    verdicts = [f"{c.verdict} {c.configs}" if c.verdict else "error" for c in columns]
    lines.append("| verdict (workloads passed) | " + " | ".join(verdicts) + " |")
    lines.append("| wall time of the evaluation, s | " + " | ".join(f"{c.seconds:.0f}" for c in columns) + " |")
    errors = [f"- {labels.get(c.kernel, c.kernel)} {c.method}: {c.error}" for c in columns if c.error]
    return "\n".join(lines + ([""] + errors if errors else []))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--defs", default="gqa,mla,prefill,moe", help=f"comma-separated, of {', '.join(SHORT)}")
    parser.add_argument("--methods", default="robust,flashinfer")
    parser.add_argument("--languages", default="triton,cuda", help="which shipped solutions to time, where one exists")
    parser.add_argument("--workloads", type=int, default=0, help="time a spread of N workloads (default: all)")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    chosen = [SHORT[d.strip()] for d in args.defs.split(",") if d.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    languages = [x.strip() for x in args.languages.split(",") if x.strip()]
    report: dict[str, Any] = {"synthetic_workloads": True, "definitions": {}}
    with tempfile.TemporaryDirectory(prefix="ksearch-fib-bench-") as tmp:
        for definition in chosen:
            columns: list[Column] = []
            for method in methods:
                print(f"== {definition} [{method}]", flush=True)
                columns += measure(definition, method, args.device, Path(tmp), args.workloads or None, languages)
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
