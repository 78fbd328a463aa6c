"""The ``ksearch`` command: assembles the typer app from the command modules and maps errors to one-line messages.

Commands only parse flags, call one flow (``ksearch.flows``) and print; no search or evaluation logic lives here.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
from rich.markup import escape

from ksearch.cli import evaluation, inspect, interactive, report, search, skills
from ksearch.cli._common import WorkspaceOpt, err
from ksearch.errors import KsearchError
from ksearch.flows.workspace import workspace_dir
from ksearch.logs import configure_logging

app = typer.Typer(
    help="LLM-in-the-loop GPU kernel search with a world model of optimisation hypotheses.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
for _module in (search, inspect, evaluation, report, interactive):
    app.registered_commands.extend(_module.app.registered_commands)
app.add_typer(skills.app, name="skills")  # a group of commands: ksearch skills list|show|export|import|learn


@app.callback()
def _main(
    ctx: typer.Context,
    workspace: WorkspaceOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Echo log events to stderr.")] = False,
) -> None:
    ws = workspace_dir(workspace)
    ctx.obj = {"workspace": ws}
    configure_logging(ws / "logs" / "ksearch.log", verbose=verbose)


def main() -> None:
    """Entry point: expected failures print one line and a hint; tracebacks only with KSEARCH_DEBUG=1."""
    try:
        app()
    except KsearchError as exc:
        if os.environ.get("KSEARCH_DEBUG"):
            raise
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        if exc.hint:
            err.print(f"hint: {escape(exc.hint)}")  # hints hold brackets: pip install 'ksearch[report]'
        sys.exit(1)
    except KeyboardInterrupt:
        err.print("\ninterrupted; continue with: ksearch resume RUN (see `ksearch runs`)")
        sys.exit(130)


if __name__ == "__main__":
    main()
