"""The CLI's one table of expected failures: exception type -> the lines printed on stderr and the exit status (as
huggingface_hub's CLI does in its ``_errors.py``).

``main`` ends the process through it (errors of ksearch's vocabulary, a stop, Ctrl-C outside a run); a command ends
through ``fail`` (options that do not validate), so the status is the same under typer's test runner. Anything the
table does not name is a bug: its traceback is shown. With ``KSEARCH_DEBUG=1`` the errors of ksearch's vocabulary
show their traceback too.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import typer
from pydantic import ValidationError
from rich.markup import escape

from ksearch.cli._common import err
from ksearch.errors import KsearchError, RunInterrupted


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
    return Failure(_with_hint("[red]error:[/red]", exc), 1, traceback_on_debug=True)


def _invalid_options(exc: ValidationError, signal_name: str | None) -> Failure:
    """Each invalid option named by the flag the user typed (not the config field behind it)."""
    from ksearch.agent.config import option_errors

    lines = [Line("[red]invalid options:[/red]", soft_wrap=None)]
    lines += [Line(f"  - {escape(line)}") for line in option_errors(exc.errors())]
    return Failure(lines, 2)


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


def show(failure: Failure) -> None:
    for line in failure.lines:
        err.print(line.text, soft_wrap=line.soft_wrap)


def fail(exc: BaseException) -> NoReturn:
    """End a command on ``exc`` as the table says, through ``typer.Exit`` (re-raised when the table lacks it)."""
    failure = describe(exc)
    if failure is None:
        raise exc
    show(failure)
    raise typer.Exit(failure.exit_code)
