"""What every command shares: the consoles, the option declarations and progress lines (errors: ``errors``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from ksearch.flows.run import RunOutcome

PIPE_WIDTH = 100_000
"""Console width when the stream is no terminal: wide enough that no line is wrapped and no table cell is cut."""


def console_for(stream: TextIO, *, stderr: bool = False) -> Console:
    """A console for stdout or stderr: sized to the terminal when ``stream`` is one; else plain, unwrapped text (a
    pipe, a file, a log: no colour, lines as long as they are, tables as wide as their cells)."""
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, soft_wrap=True, width=PIPE_WIDTH)


out = console_for(sys.stdout)
err = console_for(sys.stderr, stderr=True)

PIPE_RULE = 100
"""A section rule's width in a pipe, where the console's width is unbounded (a rule there was 100,000 characters)."""


def rule(title: str = "") -> None:
    """A section rule on stdout: the terminal's width, or ``PIPE_RULE`` characters of plain text in a pipe."""
    if out.width < PIPE_WIDTH:
        out.rule(escape(title))
        return
    head = f"── {title} " if title else ""
    print(head + "─" * max(3, PIPE_RULE - len(head)), flush=True)


WorkspaceOpt = Annotated[
    Path | None,
    typer.Option(
        "--workspace",
        "-w",
        help="Workspace folder holding ksearch.db and logs [env: KSEARCH_WORKSPACE; default ./.ksearch]",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]
RunIdArg = Annotated[str, typer.Argument(help="A run id (a unique prefix is enough); list them with `ksearch runs`.")]
LatestRunIdArg = Annotated[
    str | None,
    typer.Argument(
        help="A run id (a unique prefix is enough) [default: the latest run]; list them with `ksearch runs`."
    ),
]
"""RUN of the commands that default to the latest run (show, resume, replay, export); those that change a run
(respond, steer, fork) take it explicitly."""
KernelBenchRootOpt = Annotated[
    Path | None,
    typer.Option(
        "--kernelbench-root", help="KernelBench checkout for kernelbench:LEVEL/ID tasks [env: KERNELBENCH_ROOT]."
    ),
]
BaselineOpt = Annotated[
    str, typer.Option("--baseline", help="KernelBench speedups are over PyTorch 'eager' or 'compile' (torch.compile).")
]
SchedulerOpt = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        help=(
            "With --executor dask: the Dask scheduler's address, e.g. tcp://host:8786 (through an SSH tunnel: "
            "tcp://localhost:8786)."
        ),
    ),
]


def workspace_of(ctx: typer.Context) -> Path:
    return ctx.obj["workspace"]


def pick_run(ctx: typer.Context, run_id: str | None, *, unfinished: bool = False) -> str:
    """The full id of RUN (a unique prefix is enough); without RUN, the latest run (``unfinished``: the latest one
    not finished), said on stderr so that the user knows which run the command acts on."""
    from ksearch.flows import inspect as inspect_flow

    full_id = inspect_flow.resolve_run_id(run_id, workspace_of(ctx), unfinished=unfinished)
    if run_id is None:
        err.print(f"using the latest {'unfinished ' if unfinished else ''}run: {full_id}")
    return full_id


class Progress:
    """Turns graph events into one line per round and a status line, so long runs show where they are."""

    def __init__(self, max_rounds: int, *, announce_resume: bool = False, banner: list[str] | None = None) -> None:
        self.max_rounds = max_rounds
        self.banner = banner or []
        """Lines printed when a new run starts: after its task, model and device were checked, never before."""
        self.rounds = 0
        """The store's number of the last round shown (on resume, of the last round recorded before)."""
        self.announce_resume = announce_resume
        """Print "resuming RUN" once the run really goes on (after every check that could refuse it)."""
        self.status = out.status("starting", spinner="dots")

    def __enter__(self) -> Progress:
        self.status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.status.__exit__(*exc)

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        if event == "starting":
            for line in self.banner:
                out.print(line)
        elif event == "resumed":
            self.rounds = data["rounds_used"]
            if self.announce_resume:
                out.print(f"resuming [bold]{data['run_id']}[/bold] ({self.rounds} rounds done before)")
        elif event == "plan":
            self.status.update("planning: asking the LLM to update the world model")
        elif event == "plan_rejected":
            out.print(
                f"[yellow]planner's edit script rejected ({len(data['errors'])} errors); asking it to repair[/yellow]"
            )
        elif event == "selected":
            for node in data["nodes"]:
                out.print(f"[cyan]action {node['node_id']}[/cyan]: {escape(node['title'])}")
        elif event == "write":
            self.status.update(
                f"round {self.rounds + 1}/{self.max_rounds}: cycle {data['cycle_id']} attempt {data['attempt']} "
                f"({data['prompt_kind']}): writing and evaluating a kernel"
            )
        elif event == "round":
            self.rounds = data["round_number"]  # the round's number in the store: right after a resume too
            colour = "green" if data["verdict"] == "passed" else "red"
            stop = f" [dim](cycle ends: {data['stop_reason']})[/dim]" if data.get("stop_reason") else ""
            out.print(
                f"round {self.rounds:>3}/{self.max_rounds} {data['cycle_id']}.{data['attempt']}: "
                f"[{colour}]{escape(first_line(data.get('summary') or data['verdict']))}[/{colour}]{stop}"
            )
        elif event == "new_best":
            out.print(f"[bold green]new best[/bold green]: node {escape(data['node_id'])}, {escape(data['summary'])}")
        elif event == "steered":
            colour = "magenta" if data["ok"] else "yellow"
            verdict = "" if data["ok"] else " (rejected)"
            out.print(f"[{colour}]steering by {escape(data['author'])}{verdict}[/{colour}]: {escape(data['message'])}")
        elif event == "counters":
            colour = "blue" if data["status"] == "collected" else "yellow"
            out.print(
                f"[{colour}]hardware counters[/{colour}] of {escape(data['why'])}: {data['status']} "
                f"({data['wall_s']:.0f} s)"
            )
        elif event == "skill_lifted":
            out.print(
                f"[magenta]skill lifted[/magenta] {data['skill_id']} from cycle {data['cycle_id']}: "
                f"{escape(data['intent'])}"
            )
        elif event == "skill_trial":
            paired = f"x{data['speedup']:.3f}" if data.get("speedup") else "no paired measurement"
            status = "verified" if data["verified"] else "not verified"
            out.print(
                f"[magenta]skill trial[/magenta] {data['skill_id']} in cycle {data['cycle_id']}: "
                f"{data['verdict']}, {paired}, {status}{', held out' if data['held_out'] else ''}"
            )


def print_waiting(outcome: RunOutcome) -> None:
    """A paused run: what it waits for and the commands that answer it (nothing runs until then)."""
    run_id = outcome.run_id
    out.print(
        f"\nrun [bold]{run_id}[/bold] is [yellow]waiting[/yellow] after {outcome.rounds_used} rounds; nothing "
        "runs until it is answered:"
    )
    several = len(outcome.pending) > 1
    for w in outcome.pending:
        prompt = w.prompt
        if prompt.kind == "device":
            out.print(
                f"  [yellow]{escape(prompt.key)}[/yellow]: waits for the GPU; continue with `ksearch resume {run_id}` "
                "on a machine that has it"
            )
        elif prompt.kind == "approval":
            node = prompt.details.get("node_id")
            out.print(
                f"  approval of a new best (node {escape(str(node))}): ksearch steer {run_id} approve|reject"
                + (f" {node}" if several else "")
            )
        else:
            key = f" --key {prompt.key}" if several else ""
            out.print(
                f"  {prompt.role} prompt [cyan]{escape(prompt.key)}[/cyan]: read it with `ksearch pending "
                f"{run_id}{key}`, "
                f"answer with `ksearch respond {run_id}{key} --file reply.md`"
            )


def first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:140]


def print_outcome(outcome: RunOutcome, ws: Path) -> None:
    from ksearch.flows import inspect as inspect_flow

    if outcome.status == "waiting":
        print_waiting(outcome)
        return
    out.print(
        f"\nrun [bold]{outcome.run_id}[/bold] {outcome.status}: {outcome.done_reason}; {outcome.rounds_used} rounds"
    )
    if outcome.best is None:
        out.print("[yellow]no candidate passed[/yellow]")
        return
    evaluation = inspect_flow.evaluation(outcome.best.evaluation_id, ws)
    out.print(
        f"[bold green]best kernel[/bold green] (node {escape(outcome.best.node_id)}): {escape(evaluation.summary())}"
    )
    for t in evaluation.timings:
        out.print(f"  {t.describe()}")
    out.print(f"see it with: ksearch show {outcome.run_id} --code")
