"""The ``ksearch`` command: parses flags, calls the library (``ksearch.agent.runner``), prints. No search logic here."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table
from rich.tree import Tree

from ksearch.agent import runner
from ksearch.agent.config import BudgetConfig, RunConfig
from ksearch.agent.world_model import ROOT_ID, WorldModel
from ksearch.errors import KsearchError
from ksearch.logs import configure_logging

app = typer.Typer(
    help="LLM-in-the-loop GPU kernel search with a world model of optimisation hypotheses.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

WorkspaceOpt = Annotated[
    Path | None,
    typer.Option("--workspace", "-w", help="Workspace folder holding ksearch.db and logs [env: KSEARCH_WORKSPACE; default ./.ksearch]"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]
RunIdArg = Annotated[str, typer.Argument(help="A run id (a unique prefix is enough); list them with `ksearch runs`.")]
KernelBenchRootOpt = Annotated[
    Path | None,
    typer.Option("--kernelbench-root", help="KernelBench checkout for kernelbench:LEVEL/ID tasks [env: KERNELBENCH_ROOT]."),
]
BaselineOpt = Annotated[
    str, typer.Option("--baseline", help="KernelBench speedups are over PyTorch 'eager' or 'compile' (torch.compile).")
]


@app.callback()
def _main(
    ctx: typer.Context,
    workspace: WorkspaceOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Echo log events to stderr.")] = False,
) -> None:
    ws = runner.workspace_dir(workspace)
    ctx.obj = {"workspace": ws}
    configure_logging(ws / "logs" / "ksearch.log", verbose=verbose)


def _ws(ctx: typer.Context) -> Path:
    return ctx.obj["workspace"]


class Progress:
    """Turns graph events into one line per round and a status line, so long runs show where they are."""

    def __init__(self, max_rounds: int) -> None:
        self.max_rounds = max_rounds
        self.rounds = 0
        self.status = out.status("starting", spinner="dots")

    def __enter__(self) -> "Progress":
        self.status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.status.__exit__(*exc)

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        if event == "plan":
            self.status.update("planning: asking the LLM to update the world model")
        elif event == "plan_rejected":
            out.print(f"[yellow]planner's edit script rejected ({len(data['errors'])} errors); asking it to repair[/yellow]")
        elif event == "selected":
            for node in data["nodes"]:
                out.print(f"[cyan]action {node['node_id']}[/cyan]: {escape(node['title'])}")
        elif event == "write":
            self.status.update(
                f"round {self.rounds + 1}/{self.max_rounds}: cycle {data['cycle_id']} attempt {data['attempt']} "
                f"({data['prompt_kind']}): writing and evaluating a kernel"
            )
        elif event == "round":
            self.rounds += 1
            colour = "green" if data["verdict"] == "passed" else "red"
            stop = f" [dim](cycle ends: {data['stop_reason']})[/dim]" if data.get("stop_reason") else ""
            out.print(
                f"round {self.rounds:>3}/{self.max_rounds} {data['cycle_id']}.{data['attempt']}: "
                f"[{colour}]{escape(_first_line(data.get('summary') or data['verdict']))}[/{colour}]{stop}"
            )
        elif event == "new_best":
            out.print(f"[bold green]new best[/bold green]: node {escape(data['node_id'])}, {escape(data['summary'])}")


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:140]


def _print_outcome(outcome: runner.RunOutcome, ws: Path) -> None:
    out.print(f"\nrun [bold]{outcome.run_id}[/bold] {outcome.status}: {outcome.done_reason}; {outcome.rounds_used} rounds")
    if outcome.best is None:
        out.print("[yellow]no candidate passed[/yellow]")
        return
    store = runner.open_store(ws)
    try:
        evaluation = store.get_evaluation(outcome.best.evaluation_id)
    finally:
        store.close()
    out.print(f"[bold green]best kernel[/bold green] (node {escape(outcome.best.node_id)}): {escape(evaluation.summary())}")
    for t in evaluation.timings:
        out.print(f"  {t.describe()}")
    out.print(f"see it with: ksearch show {outcome.run_id} --code")


@app.command()
def run(
    ctx: typer.Context,
    task: Annotated[str, typer.Argument(help="Task name; list them with `ksearch tasks`.")],
    model: Annotated[str, typer.Option("--model", "-m", help="provider:model (e.g. openai:gpt-5.2), or replay:FILE|RUN")],
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible server URL (vLLM, SGLang, Ollama, gateways).")] = None,
    language: Annotated[str, typer.Option(help="Kernel language.")] = "triton",
    device: Annotated[str, typer.Option(help="auto (a GPU if torch sees one, else cpu), cuda / cuda:N, or cpu (Triton interpreter, correctness only).")] = "auto",
    max_rounds: Annotated[int, typer.Option(help="Rounds budget: one round = one kernel written and evaluated.")] = 20,
    stagnation_window: Annotated[int, typer.Option(help="A cycle ends after this many rounds without improvement.")] = 5,
    max_attempts_per_cycle: Annotated[int | None, typer.Option(help="Cap on rounds per cycle.")] = None,
    parallel: Annotated[int | None, typer.Option(help="Actions explored at once [default: one per GPU in --gpus; 1 on cpu].")] = None,
    gpus: Annotated[str, typer.Option(help="GPUs to lease evaluations on: all, a count (2) or indices (0,1,3); ignored on cpu.")] = "all",
    max_difficulty: Annotated[int, typer.Option(help="Defer actions harder than this (1-5).")] = 4,
    max_tokens: Annotated[int | None, typer.Option(help="Stop when the run has used this many tokens.")] = None,
    max_cost: Annotated[float | None, typer.Option(help="Stop when the run has cost this many USD (needs prices).")] = None,
    price_input: Annotated[float | None, typer.Option(help="USD per 1M input tokens, for cost accounting.")] = None,
    price_output: Annotated[float | None, typer.Option(help="USD per 1M output tokens, for cost accounting.")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature (provider default if unset).")] = None,
    run_id: Annotated[str | None, typer.Option(help="Name the run (default: TASK-DATE-TIME-XXXX).")] = None,
    run_timeout: Annotated[float, typer.Option(help="Seconds one candidate may run before it is killed.")] = 300.0,
    kernelbench_root: KernelBenchRootOpt = None,
    baseline: BaselineOpt = "eager",
    seed_from: Annotated[Path | None, typer.Option("--seed-from", help="Continue from this solution file: it is evaluated first and the first cycles edit it.")] = None,
) -> None:
    """Search for a fast, correct kernel for TASK."""
    if device == "auto":
        device = runner.default_device()
    task_name = task
    task = _canonical_task(task, kernelbench_root, device)
    try:
        config = RunConfig(
            run_id=run_id or runner.new_run_id(_short_task_name(task_name)),
            task=task,
            language=language,
            model=model,
            base_url=base_url,
            temperature=temperature,
            device=device,
            max_rounds=max_rounds,
            stagnation_window=stagnation_window,
            max_attempts_per_cycle=max_attempts_per_cycle,
            parallel_cycles=parallel or runner.default_parallel(device, gpus),
            gpus=gpus,
            max_difficulty=max_difficulty,
            run_timeout_s=run_timeout,
            budget=BudgetConfig(
                max_total_tokens=max_tokens,
                max_cost_usd=max_cost,
                price_input_per_mtok=price_input,
                price_output_per_mtok=price_output,
            ),
            seed_from=str(seed_from) if seed_from is not None else None,
        )
    except ValidationError as exc:
        _fail_validation(exc)
    out.print(f"run [bold]{config.run_id}[/bold]: task {task}, model {model}, device {device}, {max_rounds} rounds")
    if device == "cpu":
        out.print("[yellow]device cpu: kernels run under the Triton interpreter, checked for correctness only (not timed)[/yellow]")
    with Progress(config.max_rounds) as progress:
        outcome = runner.start_run(config, workspace=_ws(ctx), on_event=progress)
    _print_outcome(outcome, _ws(ctx))
    _print_kernelbench_speedup(outcome, config, baseline, _ws(ctx))


@app.command()
def resume(ctx: typer.Context, run_id: RunIdArg) -> None:
    """Continue a run from its last checkpoint (after a crash, a kill or Ctrl-C)."""
    store = runner.open_store(_ws(ctx))
    try:
        run_row = store.get_run(run_id)
    finally:
        store.close()
    max_rounds = run_row["config"].get("max_rounds", 0)
    out.print(f"resuming [bold]{run_row['id']}[/bold] ({run_row['rounds_used']} rounds done before)")
    with Progress(max_rounds) as progress:
        progress.rounds = run_row["rounds_used"] or 0
        outcome = runner.resume_run(run_row["id"], workspace=_ws(ctx), on_event=progress)
    _print_outcome(outcome, _ws(ctx))


@app.command()
def replay(
    ctx: typer.Context,
    run_id: RunIdArg,
    device: Annotated[str | None, typer.Option(help="Re-evaluate on this device (default: the recorded one).")] = None,
) -> None:
    """Re-execute a past run with its recorded LLM replies, re-evaluating every kernel on this machine."""
    config = runner.replay_config(run_id, workspace=_ws(ctx), device=device)
    out.print(f"replaying [bold]{config.replay_of}[/bold] as new run [bold]{config.run_id}[/bold] on {config.device}")
    with Progress(config.max_rounds) as progress:
        outcome = runner.start_run(config, workspace=_ws(ctx), on_event=progress)
    _print_outcome(outcome, _ws(ctx))


@app.command()
def runs(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List the runs in the workspace with their status and best result."""
    store = runner.open_store(_ws(ctx))
    try:
        rows = store.list_runs()
        usage = {r["id"]: store.usage(r["id"])["total"] for r in rows}
    finally:
        store.close()
    if as_json:
        print(json.dumps([{**r, "usage": usage[r["id"]]} for r in rows], indent=2, default=str))
        return
    table = Table("run", "task", "model", "device", "status", "rounds", "best score", "tokens")
    for r in rows:
        tokens = int(usage[r["id"]]["input_tokens"] + usage[r["id"]]["output_tokens"])
        best = f"{r['best_score']:.6g}" if r["best_score"] is not None else ("passed (untimed)" if r["best_candidate_id"] else "-")
        status = r["status"] + (f" ({r['done_reason']})" if r.get("done_reason") else "")
        table.add_row(r["id"], r["task"], r["model"], r["device"], status, str(r["rounds_used"] or 0), best, str(tokens))
    out.print(table)


@app.command()
def show(
    ctx: typer.Context,
    run_id: RunIdArg,
    code: Annotated[bool, typer.Option("--code", help="Print the best kernel's source.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show a run: its world-model tree, its rounds and its best kernel."""
    ws = _ws(ctx)
    store = runner.open_store(ws)
    try:
        run_row = store.get_run(run_id)
        attempts = store.list_attempts(run_row["id"])
        snapshots = store.list_snapshots(run_row["id"])
        usage = store.usage(run_row["id"])
        best_code = store.get_candidate(run_row["best_candidate_id"]).code if run_row["best_candidate_id"] else None
        best_eval = store.get_evaluation(run_row["best_evaluation_id"]) if run_row["best_evaluation_id"] else None
    finally:
        store.close()
    wm = WorldModel.model_validate_json(snapshots[-1]["world_model"]) if snapshots else WorldModel()
    if as_json:
        print(json.dumps({"run": run_row, "world_model": wm.model_dump(mode="json"), "attempts": attempts,
                          "usage": usage, "best_evaluation": best_eval.model_dump(mode="json") if best_eval else None,
                          "best_code": best_code}, indent=2, default=str))
        return
    status = run_row["status"] + (f" ({run_row['done_reason']})" if run_row.get("done_reason") else "")
    out.print(f"[bold]{run_row['id']}[/bold]: task {run_row['task']}, model {run_row['model']}, device {run_row['device']}, {status}")
    if run_row.get("error") and run_row["status"] != "finished":
        out.print(f"[red]last error: {escape(run_row['error'])}[/red]  (continue with: ksearch resume {run_row['id']})")
    if wm.kernel_summary:
        out.print(f"\n[bold]kernel summary[/bold]: {escape(wm.kernel_summary)}")
    out.print(render_tree(wm))
    table = Table("round", "cycle", "attempt", "node", "prompt", "verdict", "score", "candidate")
    for a in attempts:
        score = f"{a['score']:.6g}" if a["score"] is not None else "-"
        table.add_row(str(a["round_index"]), a["cycle_id"], str(a["attempt"]), a["node_id"], a["prompt_kind"] or "",
                      a["verdict"], score, (a["candidate_id"] or "-")[-12:])
    out.print(table)
    out.print(best_candidates_table(attempts))
    total = usage["total"]
    out.print(f"LLM usage: {int(total['calls'])} calls, {int(total['input_tokens'])} input + {int(total['output_tokens'])} output tokens"
              + (f", ${total['cost_usd']:.4f}" if total["cost_usd"] else ""))
    if best_eval is not None:
        out.print(f"[bold green]best[/bold green]: {escape(best_eval.summary())}")
        for t in best_eval.timings:
            out.print(f"  {t.describe()}")
    if code and best_code:
        out.print(Syntax(best_code, "python", line_numbers=True))


def best_candidates_table(attempts: list[dict[str, Any]], limit: int = 5) -> Table:
    """The distinct passing candidates, fastest first (untimed passes last, in the order they were found)."""
    seen: dict[str, dict[str, Any]] = {}
    for a in attempts:
        if a["verdict"] == "passed" and a["candidate_id"] not in seen:
            seen[a["candidate_id"]] = a
    ranked = sorted(seen.values(), key=lambda a: (a["score"] is None, -(a["score"] or 0.0), a["round_index"]))
    table = Table("rank", "candidate", "node", "round", "score", title="best candidates")
    for rank, a in enumerate(ranked[:limit], start=1):
        score = f"{a['score']:.6g}" if a["score"] is not None else "untimed"
        table.add_row(str(rank), a["candidate_id"][-12:], a["node_id"], str(a["round_index"]), score)
    return table


def render_tree(wm: WorldModel) -> Tree:
    def label(node_id: str) -> str:
        node = wm.nodes[node_id]
        colour = {"solved": "green", "failed": "red", "open": "white"}[node.status.value]
        text = f"[{colour}]{escape(node.id)} ({node.status.value})[/{colour}]"
        if node.action:
            text += f" {escape(node.action.title)} (d{node.action.difficulty}, s{node.action.score:.2f})"
        if node.solution:
            perf = f"{node.solution.latency_ms:.4f} ms" if node.solution.latency_ms is not None else "correct, untimed"
            text += f" -> {perf}"
        return text

    tree = Tree(label(ROOT_ID))

    def walk(node_id: str, branch: Tree) -> None:
        for child in wm.children(node_id):
            walk(child.id, branch.add(label(child.id)))

    walk(ROOT_ID, tree)
    return tree


@app.command()
def tasks(as_json: JsonOpt = False) -> None:
    """List the built-in tasks and those registered by installed packages."""
    from ksearch.tasks.registry import list_tasks

    infos = list_tasks()
    if as_json:
        print(json.dumps([i.model_dump() if hasattr(i, "model_dump") else vars(i) for i in infos], indent=2))
        return
    table = Table("task", "title", "source")
    for info in infos:
        table.add_row(info.name, info.title, info.source)
    out.print(table)


def _solution_module(task: Any, text: str, language: str) -> tuple[str, str]:
    """A FlashInfer-Bench Solution JSON becomes the Python module it describes; any other file is used as it is."""
    definition = getattr(task, "definition", None)
    if definition is None:
        return text, language
    from ksearch.tasks.flashinfer.solution import candidate_code_from_solution, looks_like_solution_json

    if not looks_like_solution_json(text):
        return text, language
    code, solution_language = candidate_code_from_solution(text, definition)
    return code, solution_language if solution_language in ("triton", "cuda") else language


def _canonical_task(task: str, kernelbench_root: Path | None, device: str) -> str:
    """The name a run carries (absolute paths for KernelBench problems and operator files), validated on ``device``."""
    from ksearch.tasks.registry import prepare_task

    return prepare_task(task, kernelbench_root=kernelbench_root, device=device).name


def _short_task_name(task: str) -> str:
    """A readable stem for run ids: 'kernelbench:1/19' -> 'kb1-19', 'path/to/my_op.py' -> 'my_op'."""
    if task.startswith("kernelbench:"):
        rest = task.removeprefix("kernelbench:")
        return "kb-" + (Path(rest).stem if rest.endswith(".py") else rest.replace("/", "-"))
    return Path(task).stem if task.endswith(".py") else task


def _print_kernelbench_speedup(outcome: runner.RunOutcome, config: RunConfig, mode: str, ws: Path) -> None:
    """For KernelBench tasks on a GPU: the best kernel's speedup over the (cached) PyTorch baseline."""
    if not config.task.startswith("kernelbench:") or outcome.best is None or config.device == "cpu":
        return
    from ksearch.tasks.kernelbench import KernelBenchTask
    from ksearch.tasks.kernelbench.baseline import measure_baseline, speedup

    store = runner.open_store(ws)
    try:
        evaluation = store.get_evaluation(outcome.best.evaluation_id)
    finally:
        store.close()
    out.print(f"measuring the PyTorch {mode} baseline (cached per problem and GPU)...")
    base = measure_baseline(KernelBenchTask(config.task.removeprefix("kernelbench:")), device=config.device, mode=mode, workspace=ws)
    ratio = speedup(base, evaluation)
    if ratio is None:
        out.print(f"[yellow]no speedup: baseline {base.verdict}[/yellow] {escape(base.log[:200])}")
        return
    out.print(f"speedup over PyTorch {mode}: [bold]{ratio:.3f}x[/bold] ({base.latency_ms:.4f} ms -> {evaluation.latency_ms:.4f} ms)")


@app.command()
def sweep(
    ctx: typer.Context,
    suite: Annotated[str, typer.Argument(help="kernelbench:LEVEL, e.g. kernelbench:1")],
    model: Annotated[str, typer.Option("--model", "-m", help="provider:model or replay:FILE; {problem} and {level} are replaced per problem.")],
    problems: Annotated[str | None, typer.Option(help="Problem ids and ranges, e.g. 1-20,25 (default: all of the level).")] = None,
    max_rounds: Annotated[int, typer.Option(help="Rounds budget per problem.")] = 20,
    device: Annotated[str, typer.Option(help="auto, cuda / cuda:N, or cpu (correctness only: fast_0).")] = "auto",
    baseline: BaselineOpt = "eager",
    kernelbench_root: KernelBenchRootOpt = None,
    name: Annotated[str | None, typer.Option(help="Sweep name (default from level, model, device, rounds); its manifest is WORKSPACE/sweeps/NAME.json.")] = None,
    stagnation_window: Annotated[int, typer.Option(help="A cycle ends after this many rounds without improvement.")] = 5,
    run_timeout: Annotated[float, typer.Option(help="Seconds one candidate may run before it is killed.")] = 300.0,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible server URL.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Search every problem of a KernelBench level (resumable) and report fast_p and the geomean speedup."""
    from ksearch.sweep import SweepSpec, report_json, run_sweep

    if device == "auto":
        device = runner.default_device()
    try:
        spec = SweepSpec(
            suite=suite, model=model, problems=problems, max_rounds=max_rounds, device=device, baseline=baseline,
            kernelbench_root=str(kernelbench_root) if kernelbench_root else None, name=name,
            stagnation_window=stagnation_window, run_timeout_s=run_timeout, base_url=base_url,
        )  # fmt: skip
    except ValidationError as exc:
        _fail_validation(exc)
    console = err if as_json else out

    def on_problem(event: str, entry: Any) -> None:
        what = {
            "skip": "[dim]finished before, skipped[/dim]",
            "start": "starting",
            "resume": "resuming",
            "error": f"[red]error[/red]: {escape(entry.error or '')}",
            "done": _sweep_result_text(entry),
        }[event]
        console.print(f"problem {entry.problem_id} ({escape(entry.title)}), run {entry.run_id}: {what}")

    rep = run_sweep(spec, workspace=_ws(ctx), on_problem=on_problem)
    if as_json:
        print(report_json(rep))
        return
    out.print(sweep_table(rep))
    summary = rep.summary
    fast = "  ".join(f"fast_{p} = {v:.3f}" for p, v in summary["fast_p"].items())
    geo = summary["geomean_speedup"]
    out.print(f"{summary['correct']}/{summary['n']} correct;  {fast};  geomean speedup (correct) = "
              + (f"{geo:.3f}x" if geo is not None else "- (untimed)"))
    if device == "cpu":
        out.print("[yellow]device cpu: nothing is timed, so only fast_0 (correctness) is meaningful[/yellow]")
    out.print(f"manifest: {rep.manifest}")


def _sweep_result_text(entry: Any) -> str:
    if not entry.correct:
        return "[red]no correct kernel[/red]"
    if entry.speedup is not None:
        return f"[green]correct[/green], {entry.speedup:.3f}x ({entry.baseline_ms:.4f} -> {entry.latency_ms:.4f} ms)"
    return "[green]correct[/green] (untimed)"


def sweep_table(rep: Any) -> Table:
    table = Table("problem", "title", "status", "correct", "ours ms", "baseline ms", "speedup", "run", title=f"sweep {rep.name}")
    for e in rep.problems:
        table.add_row(
            str(e.problem_id), e.title, e.status + (f" ({e.error[:60]})" if e.error else ""), "yes" if e.correct else "no",
            f"{e.latency_ms:.4f}" if e.latency_ms is not None else "-",
            f"{e.baseline_ms:.4f}" if e.baseline_ms is not None else "-",
            f"{e.speedup:.3f}x" if e.speedup is not None else "-", e.run_id,
        )  # fmt: skip
    return table


@app.command("export")
def export_cmd(
    ctx: typer.Context,
    run_id: RunIdArg,
    format_name: Annotated[str, typer.Option("--format", "-f", help="module (the plain module, any task), gpumode (a GPU MODE submission.py) or flashinfer (a Solution JSON).")] = "module",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File to write (default: submission.py for gpumode, RUN.py for module); '-' prints it.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing output file.")] = False,
) -> None:
    """Write a run's best candidate in a format another system accepts."""
    from ksearch.export import export_run

    store = runner.open_store(_ws(ctx))
    try:
        exported = export_run(store, run_id, format_name, output, overwrite=force)
    finally:
        store.close()
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
    device: Annotated[str, typer.Option("--device", help="auto, cpu (Triton interpreter, correctness only), cuda or cuda:N.")] = "auto",
    timing_method: Annotated[
        str | None, typer.Option("--timing-method", help="robust, gpumode, gpumode-benchmark or flashinfer [default: the task's].")
    ] = None,
    language: Annotated[str, typer.Option("--language", help="The kernel's language.")] = "triton",
    kernelbench_root: KernelBenchRootOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the hardened evaluator on one kernel file: correctness, timing and the verdict with its evidence.

    Exits 0 when the kernel passed, 1 otherwise."""
    from ksearch.errors import UserError
    from ksearch.tasks.registry import prepare_task
    from ksearch.tools.candidate import Candidate
    from ksearch.tools.evaluator import EvalRequest, evaluate

    chosen = runner.default_device() if device == "auto" else device
    # Canonical (absolute) task names: the worker resolves the task again in its own private directory.
    resolved = prepare_task(task, kernelbench_root=kernelbench_root, device=chosen)
    try:
        code = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{file} is not a UTF-8 text file: {exc}") from None
    code, language = _solution_module(resolved, code, language)
    try:
        candidate = Candidate(task=resolved.name, language=language, code=code, entry_point=resolved.entry_point)
        request = EvalRequest(candidate=candidate, device=chosen, timing_method=timing_method)
    except ValidationError as exc:
        _fail_validation(exc)
        return
    evaluation = evaluate(request)
    if as_json:
        print(evaluation.model_dump_json(indent=2))
    else:
        if evaluation.timings:
            table = Table("config", "median ms", "mean ms", "stdev ms", "samples", "method")
            for t in evaluation.timings:
                table.add_row(t.config, f"{t.median_ms:.5f}", f"{t.mean_ms:.5f}", f"{t.stdev_ms:.5f}", str(t.samples),
                              f"{t.method} (reports {t.headline})")  # fmt: skip
            out.print(table)
        colour = "green" if evaluation.passed else "red"
        out.print(f"[{colour}]{escape(evaluation.verdict.value)}[/{colour}]: {escape(evaluation.summary())}")
        if evaluation.rejection is not None:
            out.print(f"rule {escape(evaluation.rejection.rule)}: {escape(evaluation.rejection.evidence)}")
        if evaluation.log.strip() and not evaluation.passed:
            out.print(escape(evaluation.log))
        elif evaluation.log.strip():
            out.print(f"[dim]{escape(evaluation.log)}[/dim]")
    raise typer.Exit(0 if evaluation.passed else 1)


def _fail_validation(exc: ValidationError) -> None:
    err.print("[red]invalid options:[/red]")
    for e in exc.errors():
        field = ".".join(str(p) for p in e["loc"]) or "options"
        err.print(f"  - {field}: {e['msg']}")
    raise typer.Exit(2)


def main() -> None:
    """Entry point: expected failures print one line and a hint; tracebacks only with KSEARCH_DEBUG=1."""
    try:
        app()
    except KsearchError as exc:
        if os.environ.get("KSEARCH_DEBUG"):
            raise
        err.print(f"[red]error:[/red] {exc}")
        if exc.hint:
            err.print(f"hint: {exc.hint}")
        sys.exit(1)
    except KeyboardInterrupt:
        err.print("\ninterrupted; continue with: ksearch resume RUN (see `ksearch runs`)")
        sys.exit(130)


if __name__ == "__main__":
    main()
