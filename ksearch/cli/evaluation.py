"""Commands around single kernels and suites: ``eval``, ``export`` and ``sweep``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from ksearch.cli._common import (
    BaselineOpt,
    JsonOpt,
    KernelBenchRootOpt,
    LatestRunIdArg,
    err,
    json_mode,
    out,
    pick_run,
    workspace_of,
)
from ksearch.cli.errors import ExitCode, fail
from ksearch.cli.options import BaseUrlOpt, DeviceOpt, MaxRoundsOpt, RunTimeoutOpt, StagnationWindowOpt

if TYPE_CHECKING:
    from ksearch.contracts.evaluation import Evaluation

app = typer.Typer()


@app.command()
def sweep(
    ctx: typer.Context,
    suite: Annotated[str, typer.Argument(help="kernelbench:LEVEL, e.g. kernelbench:1")],
    model: Annotated[
        str,
        typer.Option(
            "--model", "-m", help="provider:model or replay:FILE; {problem} and {level} are replaced per problem."
        ),
    ],
    problems: Annotated[
        str | None, typer.Option(help="Problem ids and ranges, e.g. 1-20,25 (default: all of the level).")
    ] = None,
    max_rounds: MaxRoundsOpt = 20,
    device: DeviceOpt = "auto",
    baseline: BaselineOpt = "eager",
    kernelbench_root: KernelBenchRootOpt = None,
    name: Annotated[
        str | None,
        typer.Option(
            help="Sweep name (default from level, model, device, rounds); its manifest is WORKSPACE/sweeps/NAME.json."
        ),
    ] = None,
    stagnation_window: StagnationWindowOpt = 5,
    run_timeout: RunTimeoutOpt = 300.0,
    base_url: BaseUrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search every problem of a KernelBench level (resumable) and report fast_p and the geomean speedup.

    One run per problem, each with --max-rounds rounds; on cpu nothing is timed (only fast_0, correctness)."""
    from ksearch.flows.placement import resolve_device
    from ksearch.flows.sweep import SweepSpec, report_json, run_sweep

    device = resolve_device(device)
    try:
        spec = SweepSpec(
            suite=suite,
            model=model,
            problems=problems,
            max_rounds=max_rounds,
            device=device,
            baseline=baseline,
            kernelbench_root=str(kernelbench_root) if kernelbench_root else None,
            name=name,
            stagnation_window=stagnation_window,
            run_timeout_s=run_timeout,
            base_url=base_url,
        )
    except ValidationError as exc:
        fail(exc)
    console = json_mode(as_json)

    def on_problem(event: str, entry: Any) -> None:
        what = {
            "skip": "[dim]finished before, skipped[/dim]",
            "start": "starting",
            "resume": "resuming",
            "error": f"[red]error[/red]: {escape(entry.error or '')}",
            "unjudgeable": f"[yellow]unjudgeable, not searched[/yellow]: {escape(entry.error or '')}",
            "done": _sweep_result_text(entry),
        }[event]
        console.print(f"problem {entry.problem_id} ({escape(entry.title)}), run {entry.run_id}: {what}")

    rep = run_sweep(spec, workspace=workspace_of(ctx), on_problem=on_problem)
    if as_json:
        print(report_json(rep))
        return
    out.print(sweep_table(rep))
    summary = rep.summary
    fast = "  ".join(f"fast_{p} = {v:.3f}" for p, v in summary["fast_p"].items())
    geo = summary["geomean_speedup"]
    out.print(
        f"{summary['correct']}/{summary['n']} correct;  {fast};  geomean speedup (correct) = "
        + (f"{geo:.3f}x" if geo is not None else "- (untimed)")
    )
    out.print(sweep_checks_text(summary))
    if device == "cpu":
        out.print("[yellow]device cpu: nothing is timed, so only fast_0 (correctness) is meaningful[/yellow]")
    out.print(f"manifest: {rep.manifest}")


def sweep_checks_text(summary: dict[str, Any]) -> str:
    """The KernelBench checks' part of a sweep's summary, in one line each."""
    checks = ", ".join(f"{c} {n}" for c, n in summary.get("checks", {}).items()) or "none"
    lines = [f"problems each KernelBench check failed a kernel of: {checks}"]
    if summary.get("waived"):
        rules = ", ".join(f"{r} {n}" for r, n in summary["waived"].items())
        lines.append(f"correct kernels that rely on an allowed rule (their speedup is partly PyTorch's): {rules}")
    if summary.get("unjudgeable"):
        ids = ", ".join(str(i) for i in summary["unjudgeable"])
        lines.append(f"unjudgeable problems (reference not deterministic; counted as not correct): {ids}")
    return "\n".join(escape(line) for line in lines)


def _sweep_result_text(entry: Any) -> str:
    if not entry.correct:
        return "[red]no correct kernel[/red]"
    uses = f" [yellow](uses {', '.join(entry.waived)}, allowed)[/yellow]" if entry.waived else ""
    if entry.speedup is not None:
        return (
            f"[green]correct[/green], {entry.speedup:.3f}x ({entry.baseline_ms:.4f} -> {entry.latency_ms:.4f} ms)"
            + uses
        )
    return "[green]correct[/green] (untimed)" + uses


def sweep_table(rep: Any) -> Table:
    table = Table(
        "problem", "title", "status", "correct", "ours ms", "baseline ms", "speedup", "run", title=f"sweep {rep.name}"
    )
    for e in rep.problems:
        table.add_row(
            str(e.problem_id),
            e.title,
            e.status + (f" ({e.error[:60]})" if e.error else ""),
            "yes" if e.correct else "no",
            f"{e.latency_ms:.4f}" if e.latency_ms is not None else "-",
            f"{e.baseline_ms:.4f}" if e.baseline_ms is not None else "-",
            (f"{e.speedup:.3f}x" if e.speedup is not None else "-") + (f" ({'+'.join(e.waived)})" if e.waived else ""),
            e.run_id,
        )
    return table


@app.command("export")
def export_cmd(
    ctx: typer.Context,
    run_id: LatestRunIdArg = None,
    format_name: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help=(
                "module (the plain module, any task), gpumode (a GPU MODE submission.py) or flashinfer (a Solution "
                "JSON)."
            ),
        ),
    ] = "module",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="File to write (default: submission.py for gpumode, RUN.py for module); '-' prints it.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing output file.")] = False,
) -> None:
    """Write a run's best candidate in a format another system accepts."""
    from ksearch.flows.export import export_run_in

    run_id = pick_run(ctx, run_id)
    exported = export_run_in(workspace_of(ctx), run_id, format_name, output, overwrite=force)
    for warning in exported.warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    if exported.path is None:
        sys.stdout.write(exported.text)
    else:
        out.print(f"wrote {exported.format} export of run {run_id} to {exported.path}")


@app.command("eval")
def eval_cmd(
    task: Annotated[str, typer.Argument(help="Task name (see `ksearch tasks`).")],
    file: Annotated[Path, typer.Argument(help="The kernel module to evaluate.", exists=True, dir_okay=False)],
    device: Annotated[
        str, typer.Option("--device", help="auto, cpu (Triton interpreter, correctness only), cuda or cuda:N.")
    ] = "auto",
    timing_method: Annotated[
        str | None,
        typer.Option(
            "--timing-method",
            help=(
                "robust, gpumode, gpumode-benchmark, flashinfer, or confirm (GPU MODE's leaderboard procedure for "
                "any task: what a new best must pass) [default: the task's]."
            ),
        ),
    ] = None,
    language: Annotated[str, typer.Option("--language", help="The kernel's language.")] = "triton",
    kernelbench_root: KernelBenchRootOpt = None,
    yardstick: Annotated[
        int,
        typer.Option(
            "--yardstick",
            min=0,
            max=20,
            help="Audit the timing: after it, per shape, "
            "N rounds of a bare GPU MODE benchmark loop against gpumode-benchmark in the kernel's own process (their "
            "ratio "
            "shows what ksearch's procedure changes; a diagnostic, never the score).",
        ),
    ] = 0,
    target_gpu: Annotated[
        str | None,
        typer.Option(
            "--target-gpu",
            help="On the CPU: the GPU the kernel is written "
            "for (h100, h200, b200, a100, ...); its Triton kernels are compiled for it ahead of time and one over its "
            "limits (shared memory, registers, threads) is a compile error.",
        ),
    ] = None,
    counters: Annotated[
        bool,
        typer.Option(
            "--counters",
            help="After a passed timing on a GPU: Nsight Compute's hardware counters of the longest shapes "
            "(speed of light, occupancy and its limiter, DRAM/L2, tensor pipes, warp stalls), read by ncu outside "
            "the kernel's process.",
        ),
    ] = False,
    counter_shapes: Annotated[
        int, typer.Option("--counter-shapes", min=1, max=8, help="How many shapes (the longest) --counters profiles.")
    ] = 2,
    as_json: JsonOpt = False,
) -> None:
    """Run the hardened evaluator on one kernel file: correctness, timing and the verdict with its evidence.

    Exits 0 when the kernel passed, 3 when it did not, 1 when it could not be evaluated (a bad task or device)."""
    from ksearch.flows.evaluate import evaluate_file

    json_mode(as_json)
    try:
        evaluation = evaluate_file(
            task,
            file,
            device=device,
            timing_method=timing_method,
            language=language,
            kernelbench_root=kernelbench_root,
            yardstick_rounds=yardstick,
            target_gpu=target_gpu,
            counters=counters,
            counter_shapes=counter_shapes,
        )
    except ValidationError as exc:
        fail(exc)
    if as_json:
        print(evaluation.model_dump_json(indent=2))
    else:
        if evaluation.timings:
            points = {p.config: p for p in evaluation.roofline}
            table = Table("config", "median ms", "mean ms", "stdev ms", "samples", "method", "floor ms", "of roofline")
            for t in evaluation.timings:
                point = points.get(t.config)
                table.add_row(
                    t.config,
                    f"{t.median_ms:.5f}",
                    f"{t.mean_ms:.5f}",
                    f"{t.stdev_ms:.5f}",
                    str(t.samples),
                    f"{t.method} (reports {t.headline})",
                    f"{point.floor_ms:.4g} ({point.bound})" if point else "-",
                    f"{point.fraction:.0%}" if point else "-",
                )
            out.print(table)
        for profile in evaluation.profile:
            out.print(escape(profile.describe()))
        if evaluation.resources:
            where = evaluation.environment.get("target_gpu") or evaluation.device
            table = Table(
                "kernel",
                "shared bytes",
                "registers",
                "spilled bytes",
                "warps",
                "stages",
                title=f"compiled kernels ({where})",
            )
            for r in evaluation.resources:
                table.add_row(
                    r.name + (" (autotune config)" if r.tuned else ""),
                    str(r.shared_bytes),
                    "-" if r.registers is None else str(r.registers),
                    "-" if r.spilled_bytes is None else str(r.spilled_bytes),
                    str(r.num_warps),
                    str(r.num_stages),
                )
            out.print(table)
        if evaluation.yardstick:
            table = Table(
                "config",
                "bare GPU MODE loop ms",
                "gpumode-benchmark ms",
                "ratio",
                "rounds",
                title="yardstick: the same process, rounds alternating",
            )
            for y in evaluation.yardstick:
                table.add_row(
                    y.config, f"{y.bare_mean_ms:.5f}", f"{y.ksearch_mean_ms:.5f}", f"{y.ratio:.3f}", str(len(y.bare_ms))
                )
            out.print(table)
        if evaluation.counters is not None:
            from ksearch.agent.counters_text import counters_text

            out.print(escape(counters_text(evaluation.counters, detail=True)))
            out.print(f"[dim]counters took {evaluation.counters.wall_s:.1f} s[/dim]")
        colour = "green" if evaluation.passed else "red"
        out.print(f"[{colour}]{escape(evaluation.summary())}[/{colour}]")  # it starts with the verdict
        if evaluation.rejection is not None:
            out.print(f"rule {escape(evaluation.rejection.rule)}: {escape(evaluation.rejection.evidence)}")
        log = log_beyond_summary(evaluation)
        if log and not evaluation.passed:
            out.print(escape(log))
        elif log:
            out.print(f"[dim]{escape(log)}[/dim]")
    raise typer.Exit(ExitCode.OK if evaluation.passed else ExitCode.NO_KERNEL_PASSED)


def log_beyond_summary(evaluation: Evaluation) -> str:
    """The evaluation's log without what the lines above it said already: its first line when the summary quotes
    it, all of it when it only restates a rejection's rule and evidence."""
    lines = evaluation.log.strip().splitlines()
    if evaluation.rejection is not None and evaluation.rejection.evidence in evaluation.log and len(lines) == 1:
        return ""
    if lines and evaluation.summary().endswith(f": {lines[0].strip()[:160]}"):
        lines = lines[1:]
    return "\n".join(lines).strip()
