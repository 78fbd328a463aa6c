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
        out.print(f"  {t.config}: median {t.median_ms:.4f} ms, stdev {t.stdev_ms:.4f} ms, n={t.samples}")
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
    parallel: Annotated[int, typer.Option(help="Actions explored at once (one per GPU).")] = 1,
    max_difficulty: Annotated[int, typer.Option(help="Defer actions harder than this (1-5).")] = 4,
    max_tokens: Annotated[int | None, typer.Option(help="Stop when the run has used this many tokens.")] = None,
    max_cost: Annotated[float | None, typer.Option(help="Stop when the run has cost this many USD (needs prices).")] = None,
    price_input: Annotated[float | None, typer.Option(help="USD per 1M input tokens, for cost accounting.")] = None,
    price_output: Annotated[float | None, typer.Option(help="USD per 1M output tokens, for cost accounting.")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature (provider default if unset).")] = None,
    run_id: Annotated[str | None, typer.Option(help="Name the run (default: TASK-DATE-TIME-XXXX).")] = None,
    run_timeout: Annotated[float, typer.Option(help="Seconds one candidate may run before it is killed.")] = 300.0,
) -> None:
    """Search for a fast, correct kernel for TASK."""
    if device == "auto":
        device = runner.default_device()
    try:
        config = RunConfig(
            run_id=run_id or runner.new_run_id(task),
            task=task,
            language=language,
            model=model,
            base_url=base_url,
            temperature=temperature,
            device=device,
            max_rounds=max_rounds,
            stagnation_window=stagnation_window,
            max_attempts_per_cycle=max_attempts_per_cycle,
            parallel_cycles=parallel,
            max_difficulty=max_difficulty,
            run_timeout_s=run_timeout,
            budget=BudgetConfig(
                max_total_tokens=max_tokens,
                max_cost_usd=max_cost,
                price_input_per_mtok=price_input,
                price_output_per_mtok=price_output,
            ),
        )
    except ValidationError as exc:
        _fail_validation(exc)
    out.print(f"run [bold]{config.run_id}[/bold]: task {task}, model {model}, device {device}, {max_rounds} rounds")
    if device == "cpu":
        out.print("[yellow]device cpu: kernels run under the Triton interpreter, checked for correctness only (not timed)[/yellow]")
    with Progress(config.max_rounds) as progress:
        outcome = runner.start_run(config, workspace=_ws(ctx), on_event=progress)
    _print_outcome(outcome, _ws(ctx))


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
    total = usage["total"]
    out.print(f"LLM usage: {int(total['calls'])} calls, {int(total['input_tokens'])} input + {int(total['output_tokens'])} output tokens"
              + (f", ${total['cost_usd']:.4f}" if total["cost_usd"] else ""))
    if best_eval is not None:
        out.print(f"[bold green]best[/bold green]: {escape(best_eval.summary())}")
        for t in best_eval.timings:
            out.print(f"  {t.config}: median {t.median_ms:.4f} ms, stdev {t.stdev_ms:.4f} ms, n={t.samples}")
    if code and best_code:
        out.print(Syntax(best_code, "python", line_numbers=True))


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
