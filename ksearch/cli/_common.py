"""What every command shares: the consoles, the output mode, the option declarations and run lookup (errors: ``errors``;
progress: ``progress``; how a driven run ends: ``outcomes``)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, TextIO

import typer
from rich.console import Console
from rich.markup import escape

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


@dataclass
class OutputMode:
    """How this invocation prints: set per command (``json_mode``), reset by the app's callback."""

    json: bool = False
    """The command was given ``--json``: its failures are also one JSON object on stdout (``errors.show``)."""


output_mode = OutputMode()


def json_mode(as_json: bool) -> Console:
    """Where a command's progress goes: stderr under ``--json`` (stdout then carries only the JSON), else stdout."""
    output_mode.json = as_json
    return err if as_json else out


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


def first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:140]


def count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: '1 round', '6 rounds'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
