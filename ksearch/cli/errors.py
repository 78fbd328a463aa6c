"""The CLI's exit statuses (``ExitCode``) and its one table of expected failures: exception type -> the lines printed
on stderr and the exit status (as huggingface_hub's CLI does in its ``_errors.py``). With ``--json`` a failure is
also one JSON object on stdout (``{"error": ..., "hint": ..., "exit_code": ...}``), so a script reads one format.

``main`` ends the process through it (errors of ksearch's vocabulary, a stop, Ctrl-C outside a run); a command ends
through ``fail`` (options that do not validate), so the status is the same under typer's test runner. Anything the
table does not name is a bug: its traceback is shown. With ``KSEARCH_DEBUG=1`` the errors of ksearch's vocabulary
show their traceback too.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NoReturn

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.text import Text

from ksearch.cli._common import err, output_mode
from ksearch.errors import KsearchError, RunInterrupted


class ExitCode(IntEnum):
    """What a ``ksearch`` command's exit status means (docs/configuration.md, "Scripts", has this table)."""

    OK = 0
    """The command did its work: a run finished with a kernel that passed, or paused waiting for an answer (its
    status says which); ``eval``'s kernel passed; anything else done."""
    ERROR = 1
    """The command failed: a bad task, file or run id, a provider or workspace failure (one line and a hint)."""
    USAGE = 2
    """Flags that do not parse or validate."""
    NO_KERNEL_PASSED = 3
    """The search ended, or the evaluation finished, and no kernel passed."""
    # 128 + N: stopped by signal N (130 Ctrl-C, 143 SIGTERM); the run is resumable.


@dataclass(frozen=True)
class Line:
    """One line of the message, in Rich markup (anything quoted from the error already escaped)."""

    text: str
    soft_wrap: bool | None = True
    """None: the console's own setting (soft-wrapped only when stderr is no terminal)."""


@dataclass(frozen=True)
class Failure:
    """How the command ends on one exception."""

    lines: list[Line]
    exit_code: int
    traceback_on_debug: bool = False
    """``KSEARCH_DEBUG=1`` re-raises the exception instead, for its traceback."""


def _with_hint(label: str, exc: KsearchError) -> list[Line]:
    lines = [Line(f"{label} {escape(str(exc))}")]
    if exc.hint:  # hints hold brackets (pip install 'ksearch[report]'): escaped
        lines.append(Line(f"hint: {escape(exc.hint)}"))
    return lines


def _stopped(exc: RunInterrupted, signal_name: str | None) -> Failure:
    return Failure(_with_hint("[yellow]stopped:[/yellow]", exc), exc.exit_code, traceback_on_debug=True)


def _failed(exc: KsearchError, signal_name: str | None) -> Failure:
    return Failure(_with_hint("[red]error:[/red]", exc), ExitCode.ERROR, traceback_on_debug=True)


def _invalid_options(exc: ValidationError, signal_name: str | None) -> Failure:
    """Each invalid option named by the flag the user typed (not the config field behind it)."""
    from ksearch.agent.config import option_errors

    lines = [Line("[red]invalid options:[/red]", soft_wrap=None)]
    lines += [Line(f"  - {escape(line)}") for line in option_errors(exc.errors())]
    return Failure(lines, ExitCode.USAGE)


def _interrupted(exc: KeyboardInterrupt, signal_name: str | None) -> Failure:
    """Ctrl-C (or SIGTERM) outside a run's own stop handling: 128 + the signal's number, 130 when none was seen."""
    code = 128 + signal.Signals[signal_name].value if signal_name else 130
    message = "\ninterrupted; continue with: ksearch resume (the latest unfinished run; see `ksearch runs`)"
    return Failure([Line(message, soft_wrap=None)], code)


ERRORS: tuple[tuple[type[BaseException], Callable[[Any, str | None], Failure]], ...] = (
    (RunInterrupted, _stopped),  # a KsearchError too: before it, as the first match wins
    (KsearchError, _failed),
    (ValidationError, _invalid_options),  # only where a command validates its options (``fail``)
    (KeyboardInterrupt, _interrupted),
)
"""Exception type -> its failure, in the order they are matched."""


def describe(exc: BaseException, *, signal_name: str | None = None) -> Failure | None:
    """The table's failure for ``exc`` (``signal_name``: the first SIGINT/SIGTERM seen, if any), or None: a bug."""
    for kind, failure in ERRORS:
        if isinstance(exc, kind):
            return failure(exc, signal_name)
    return None


def show(failure: Failure, exc: BaseException | None = None) -> None:
    """The failure's lines on stderr; under ``--json``, also ``{"error", "hint", "exit_code"}`` on stdout."""
    for line in failure.lines:
        err.print(line.text, soft_wrap=line.soft_wrap)
    if output_mode.json and exc is not None:
        if isinstance(exc, KsearchError):
            error, hint = str(exc), exc.hint
        else:
            error, hint = " ".join(Text.from_markup(line.text).plain.strip() for line in failure.lines), ""
        sys.stdout.write(json.dumps({"error": error, "hint": hint, "exit_code": failure.exit_code}, indent=2) + "\n")
        sys.stdout.flush()


def fail(exc: BaseException) -> NoReturn:
    """End a command on ``exc`` as the table says, through ``typer.Exit`` (re-raised when the table lacks it)."""
    failure = describe(exc)
    if failure is None:
        raise exc
    show(failure, exc)
    raise typer.Exit(failure.exit_code)
