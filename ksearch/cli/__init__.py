"""The ``ksearch`` command: assembles the typer app from the command modules and ends on an expected failure as the
error table says (``ksearch.cli.errors``).

Commands only parse flags, call one flow (``ksearch.flows``) and print; no search or evaluation logic lives here.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shlex
import signal
import sys
from types import FrameType
from typing import Annotated

import typer
from rich.markup import escape

from ksearch import settings
from ksearch.cli import evaluation, inspect, interactive, report, search, skills, worker
from ksearch.cli._common import WorkspaceOpt, err, out, output_mode
from ksearch.cli.errors import describe, show
from ksearch.errors import KsearchError, UserError
from ksearch.flows import driving
from ksearch.flows.workspace import workspace_dir
from ksearch.logs import configure_logging

app = typer.Typer(
    help="LLM-in-the-loop GPU kernel search with a world model of optimisation hypotheses.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Click's plain help: every flag whole (help text moves to the next line when a flag is long) in any width;
    # Rich's help panels cut long flags in 80 columns and read "[default: ...]" in help texts as markup.
    rich_markup_mode=None,
)
for _module in (search, inspect, evaluation, report, interactive, worker):
    app.registered_commands.extend(_module.app.registered_commands)
app.add_typer(skills.app, name="skills")  # a group of commands: ksearch skills list|show|export|import|learn


def _print_version(asked: bool) -> None:
    if asked:
        try:
            version = importlib.metadata.version("ksearch")  # the installed distribution's, as pip shows it
        except importlib.metadata.PackageNotFoundError:
            version = "(not installed: run from a source tree)"
        out.print(f"ksearch {version}", highlight=False)
        raise typer.Exit()


@app.callback()
def _main(
    ctx: typer.Context,
    workspace: WorkspaceOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Echo log events to stderr.")] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print ksearch's version and exit."),
    ] = False,
) -> None:
    ws = workspace_dir(workspace)
    if ws.exists() and not ws.is_dir():  # before anything (the log first) tries to write inside it
        raise UserError(
            f"the workspace {ws} is a file, not a folder",
            hint="pass --workspace DIR (or set KSEARCH_WORKSPACE) to a folder, new or holding a ksearch.db",
        )
    ctx.obj = {"workspace": ws}
    output_mode.json = False  # a command given --json sets it (``json_mode``)
    configure_logging(ws / "logs" / "ksearch.log", verbose=verbose)
    _say_missing_containment()


def _say_missing_containment() -> None:
    """Layers of the sandbox this machine refuses are said once on the console (stderr), not only in ``--json``."""
    from rich.markup import escape

    from ksearch.tools.containment import policy

    policy.set_notice_sink(lambda line: err.print(f"[yellow]warning[/yellow]: {escape(line)}"))


_signals_seen: list[str] = []
"""SIGINT / SIGTERM received so far, in order."""


def _on_stop_signal(signum: int, _frame: FrameType | None) -> None:
    """Ctrl-C or SIGTERM. During a run the first one stops it at the next node boundary: the LLM call or evaluation
    in progress finishes and is recorded, then the run ends as 'interrupted', resumable. A second one stops at
    once: the runs are marked interrupted and the process exits (the step in progress is redone on resume).
    Outside a run, the signal interrupts the command as Ctrl-C always does."""
    name = signal.Signals(signum).name
    first = not _signals_seen
    _signals_seen.append(name)
    if first:
        asked = driving.request_stop(name)
        if asked:
            err.print(
                f"\n[yellow]{name}: stopping run {', '.join(asked)} once the step in progress is done (its "
                f"result is kept); {name} again stops at once[/yellow]"
            )
            return
        raise KeyboardInterrupt
    stopped = driving.mark_stopped_now(name)
    if not stopped:
        raise KeyboardInterrupt
    err.print(
        f"\n[red]{name} again: stopped at once[/red]; run {', '.join(stopped)} is marked interrupted "
        "(the step in progress is redone when it resumes)"
    )
    err.print(f"hint: continue with: ksearch resume {stopped[0]}")
    _exit_now(128 + signum)


def _exit_now(code: int) -> None:
    """Exit without waiting for the graph's worker threads: the node they run cannot be cancelled, and the
    interpreter would wait for it to end. What the run stored is committed; the log is flushed first."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    logging.shutdown()
    os._exit(code)


GLOBAL_OPTIONS = {"-w": True, "--workspace": True, "-v": False, "--verbose": False}
"""The app's own options (before the command), and whether each takes a value."""


def misplaced_global_option(args: list[str]) -> str | None:
    """A hint when a global option (``-w DIR``, ``-v``) was typed after the command, where no command takes it:
    the same command line with it moved before the command."""
    command_at = None
    i = 0
    while i < len(args):
        arg = args[i]
        name = arg.split("=", 1)[0]
        if command_at is None and name in GLOBAL_OPTIONS:
            i += 2 if GLOBAL_OPTIONS[name] and "=" not in arg else 1
            continue
        if command_at is None and not arg.startswith("-"):
            command_at = i
        elif command_at is not None and arg == "--":
            return None
        elif command_at is not None and name in GLOBAL_OPTIONS:
            takes = GLOBAL_OPTIONS[name] and "=" not in arg
            moved = args[i : i + (2 if takes else 1)]
            rest = args[:i] + args[i + len(moved) :]
            line = " ".join(shlex.quote(a) for a in [*rest[:command_at], *moved, *rest[command_at:]])
            return f"{name} is an option of ksearch itself: it goes before the command, as in: ksearch {line}"
        i += 1
    return None


def main() -> None:
    """Entry point: expected failures print one line and a hint; tracebacks only with KSEARCH_DEBUG=1."""
    signal.signal(signal.SIGINT, _on_stop_signal)
    signal.signal(signal.SIGTERM, _on_stop_signal)
    try:
        app()
    except SystemExit as exc:
        if exc.code == 130 and _signals_seen:  # typer ends a KeyboardInterrupt with 130; SIGTERM's is 143
            sys.exit(128 + signal.Signals[_signals_seen[0]].value)
        if exc.code == 2:  # the command line did not parse: "No such option: -w" says nothing of where it goes
            hint = misplaced_global_option(sys.argv[1:])
            if hint:
                err.print(f"hint: {escape(hint)}", soft_wrap=True)
        raise
    except (KsearchError, KeyboardInterrupt) as exc:  # KeyboardInterrupt: outside typer's handling (it exits 130)
        failure = describe(exc, signal_name=_signals_seen[0] if _signals_seen else None)
        assert failure is not None  # the table names both
        if failure.traceback_on_debug and settings.DEBUG.raw():
            raise
        show(failure, exc)
        sys.exit(failure.exit_code)


if __name__ == "__main__":
    main()
