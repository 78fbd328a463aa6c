"""Commands that read a workspace: ``runs``, ``show`` and ``tasks``."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.padding import Padding
from rich.syntax import Syntax
from rich.table import Table
from rich.tree import Tree

from ksearch.cli._common import JsonOpt, LatestRunIdArg, json_mode, out, pick_run, workspace_of
from ksearch.errors import UserError

if TYPE_CHECKING:
    from ksearch.agent.world_model import WorldModel

app = typer.Typer()


@app.command()
def runs(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List the runs in the workspace with their status and best result."""
    json_mode(as_json)
    from ksearch.flows import inspect as inspect_flow

    rows = inspect_flow.list_runs(workspace_of(ctx))
    usage = {r["id"]: r["usage"] for r in rows}
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    if not rows:
        out.print(f"no runs in {workspace_of(ctx)}; start one with: ksearch run TASK --model PROVIDER:MODEL")
        return
    # Ids are what `show`, `resume`, `replay` and `export` take: their column never shrinks, wraps or truncates;
    # the long free-text columns (task, model) give way first.
    # PASSED counts rounds as they are stored; BEST is the run's best, promoted when the cycle that found it ends.
    headers = ["run", "status", "rounds", "passed", "best", "tokens", "device", "task", "model"]
    cells = []
    for r in rows:
        tokens = int(usage[r["id"]]["input_tokens"] + usage[r["id"]]["output_tokens"])
        best = (
            f"{r['best_score']:.6g}" if r["best_score"] is not None else ("passed" if r["best_candidate_id"] else "-")
        )
        cells.append(
            [
                r["id"],
                run_status(r),
                str(r["rounds_used"] or 0),
                str(r.get("rounds_passed") or 0),
                best,
                str(tokens),
                r["device"],
                r["task"],
                r["model"],
            ]
        )
    for line in fit_columns(headers, cells, out.width, shrinkable=("model", "task")):
        out.print(line, soft_wrap=True, highlight=False, markup=False)
    out.print("[dim]details: ksearch show RUN (a unique prefix of the id is enough; without RUN, the latest run)[/dim]")


def fit_columns(headers: list[str], rows: list[list[str]], width: int, *, shrinkable: tuple[str, ...]) -> list[str]:
    """Plain aligned columns in ``width``: only the ``shrinkable`` ones (free text, last) are cut with '...', then
    dropped, when the line is too long; the others, the run id first, are always printed whole."""
    widths = {h: max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)}
    shown = list(headers)

    def total() -> int:
        return sum(widths[h] for h in shown) + 2 * (len(shown) - 1)

    for name in shrinkable:  # shrink to a floor of 10 characters, then drop the column
        if total() > width:
            widths[name] = max(10, widths[name] - (total() - width))
        if total() > width:
            shown.remove(name)

    def cell(text: str, h: str) -> str:
        return (text if len(text) <= widths[h] else text[: widths[h] - 3] + "...").ljust(widths[h])

    lines = ["  ".join(cell(h.upper(), h) for h in shown).rstrip()]
    for r in rows:
        lines.append("  ".join(cell(r[headers.index(h)], h) for h in shown).rstrip())
    return lines


def run_status(run: dict[str, Any]) -> str:
    """The status word: a 'running' run that no process drives any more has crashed (or was killed)."""
    if run["status"] == "running" and run.get("driven") is False:
        return "crashed"
    return run["status"]


@app.command()
def show(
    ctx: typer.Context,
    run_id: LatestRunIdArg = None,
    code: Annotated[
        bool, typer.Option("--code", help="Print the best kernel's source alone (ksearch show --code > kernel.py).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show a run: its world-model tree, its rounds and its best kernel."""
    json_mode(as_json)
    from ksearch.flows import inspect as inspect_flow

    view = inspect_flow.run_view(pick_run(ctx, run_id), workspace_of(ctx))
    run_row, attempts, usage, wm = view.run, view.attempts, view.usage, view.world_model
    best_code, best_eval = view.best_code, view.best_evaluation
    if as_json:
        print(json.dumps(view.as_json(), indent=2, default=str))
        return
    if code:
        print_code(run_row["id"], best_code)
        return
    status = run_row["status"] + (f" ({run_row['done_reason']})" if run_row.get("done_reason") else "")
    out.print(
        f"[bold]{run_row['id']}[/bold]: task {run_row['task']}, model {run_row['model']}, device "
        f"{run_row['device']}, {status}"
    )
    config = run_row["config"]
    if config.get("fork_of"):
        out.print(f"forked from {config['fork_of']} at round {config.get('fork_round')}")
    elif config.get("replay_of"):
        out.print(f"replay of {config['replay_of']}")
    if run_row.get("error") and run_row["status"] != "finished":
        out.print(f"[red]last error: {escape(run_row['error'])}[/red]  (continue with: ksearch resume {run_row['id']})")
    elif run_row["status"] not in ("finished", "waiting"):
        out.print(f"not finished; continue with: ksearch resume {run_row['id']}")
    for w in view.pending:
        state = "answered, taken when the run is driven next" if w.answered else "waiting"
        out.print(
            f"[yellow]pending[/yellow] {w.prompt.kind} {escape(w.prompt.key)} ({w.prompt.role}): {state}"
            f"  (ksearch pending {run_row['id']})"
        )
    if wm.kernel_summary:
        out.print(f"\n[bold]kernel summary[/bold]: {escape(wm.kernel_summary)}")
    out.print(render_tree(wm))
    table = Table("round", "cycle", "attempt", "node", "prompt", "verdict", "score", "candidate")
    for a in attempts:
        score = f"{a['score']:.6g}" if a["score"] is not None else "-"
        table.add_row(
            str(a["round_index"]),
            a["cycle_id"],
            str(a["attempt"]),
            a["node_id"],
            a["prompt_kind"] or "",
            a["verdict"],
            score,
            (a["candidate_id"] or "-")[-12:],
        )
    out.print(table)
    out.print(best_candidates_table(attempts))
    if view.steering:
        out.print(steering_table(view.steering))
    people = sum(1 for c in view.llm_calls if c["model"] == "interactive")
    if people:
        out.print(f"{people} of the LLM calls were answered by a person or an agent (`respond`; counted as 0 tokens)")
    total = usage["total"]
    out.print(
        (
            f"LLM usage: {int(total['calls'])} calls, {int(total['input_tokens'])} input + "
            f"{int(total['output_tokens'])} output tokens"
        )
        + (f", ${total['cost_usd']:.4f}" if total["cost_usd"] else "")
    )
    if view.cost is not None:
        out.print(f"run cost: {escape(view.cost.describe())}")
    if best_eval is not None:
        out.print(f"[bold green]best[/bold green]: {escape(best_eval.summary())}")
        for t in best_eval.timings:
            out.print(f"  {t.describe()}")
        if view.best_evidence:
            out.print(escape(view.best_evidence))


def print_code(run_id: str, code: str | None) -> None:
    """The best kernel's source and nothing else: highlighted on a terminal, as it is in a pipe or a file."""
    if code is None:
        raise UserError(f"run {run_id} has no best kernel yet", hint=f"see its rounds with: ksearch show {run_id}")
    if out.is_terminal:
        out.print(Syntax(code, "python", word_wrap=True))
    else:
        sys.stdout.write(code if code.endswith("\n") else code + "\n")


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


def steering_table(acts: list[dict[str, Any]]) -> Table:
    """The act log: what people asked, when it took effect (step, round) and what it did."""
    table = Table("#", "act", "arguments", "author", "status", "step", "round", "result", title="steering")
    for a in acts:
        args = ", ".join(f"{k}={v}" for k, v in a["args"].items() if v not in (None, "", False))
        source = f" (copied from {a['copied_from']})" if a.get("copied_from") else ""
        table.add_row(
            str(a["id"]),
            a["act"],
            escape(args),
            escape(a["author"] or ""),
            a["status"],
            "" if a["applied_step"] is None else str(a["applied_step"]),
            "" if a["applied_round"] is None else str(a["applied_round"]),
            escape((a["result"] or "") + source),
        )
    return table


def render_tree(wm: WorldModel) -> Tree:
    from ksearch.agent.world_model import ROOT_ID

    def label(node_id: str) -> str:
        node = wm.nodes[node_id]
        colour = {"solved": "green", "failed": "red", "open": "white"}[node.status.value]
        text = f"[{colour}]{escape(node.id)} ({node.status.value})[/{colour}]"
        if node.action:
            text += f" {escape(node.action.title)} (d{node.action.difficulty}, s{node.action.score:.2f})"
        if node.solution:
            perf = f"{node.solution.latency_ms:.4f} ms" if node.solution.latency_ms is not None else "correct, untimed"
            text += f" -> {perf}"
        marks = [
            m
            for m, on in (("added by a person", node.by_person), ("pinned", node.pinned), ("pruned", node.pruned))
            if on
        ]
        if marks:
            text += f" [magenta]({', '.join(marks)})[/magenta]"
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
    json_mode(as_json)
    from ksearch.flows import inspect as inspect_flow

    infos = inspect_flow.list_tasks()
    if as_json:
        print(json.dumps([i.model_dump() if hasattr(i, "model_dump") else vars(i) for i in infos], indent=2))
        return
    # One name per line, never wrapped or cut (they are what `ksearch run TASK` takes), its description below it.
    named = [i for i in infos if "pattern" not in i.source]
    patterns = [i for i in infos if "pattern" in i.source]
    for heading, group in (("tasks", named), ("names that take a file, a checkout or a dataset", patterns)):
        out.print(f"[bold]{heading}[/bold]")
        for info in group:
            out.print(f"  {escape(info.name)}", soft_wrap=True, highlight=False)
            source = "" if info.source.startswith("built-in") else f" [dim](from {escape(info.source)})[/dim]"
            missing = "" if info.available else f" [yellow](not installed: {escape(info.hint)})[/yellow]"
            out.print(Padding(f"{escape(info.title)}{source}{missing}", (0, 0, 0, 6), expand=False), highlight=False)
