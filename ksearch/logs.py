"""structlog set-up: JSON lines to the workspace log file (always), warnings to stderr for humans."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import structlog


class WorkspaceLogHandler(logging.FileHandler):
    """The workspace log file. A failed write (a full disk) is reported once, in one line, and the log stops there:
    the run goes on and reports the disk problem where it matters (its database), not as a logging traceback."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8", delay=True)  # opened at the first event: looking writes nothing
        self.failed = False

    def _open(self):  # type: ignore[no-untyped-def]  # noqa: ANN202 - logging's own hook, called at the first event
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()

    def emit(self, record: logging.LogRecord) -> None:
        if not self.failed:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        exc = sys.exc_info()[1]
        if self.failed:
            return
        self.failed = True
        sys.stderr.write(f"warning: cannot write the log {self.baseFilename} ({exc}); logging to it stops here\n")


class StderrLines(logging.Handler):
    """``--verbose``: every event also as one line on stderr, the stderr of the moment, looked up at each event. While
    a terminal shows a spinner, rich has put its own proxy there, which prints the line above the spinner instead of
    into its line (a stream captured at start-up bypasses it). A terminal gets ``time level event key=value``; a
    pipe or a file the JSON line itself, as in the workspace log."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stderr
            line = self.format(record)
            if _is_terminal(stream):
                line = human_line(line)
            stream.write(line + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's contract: a failed line never stops the program
            self.handleError(record)


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def human_line(line: str) -> str:
    """A JSON log line as ``HH:MM:SS level event key=value ...``; a line that is not a JSON object stays as it is."""
    try:
        event = json.loads(line)
    except ValueError:
        return line
    if not isinstance(event, dict):
        return line
    stamp = str(event.pop("timestamp", ""))[11:19]
    level = event.pop("level", "")
    name = event.pop("event", "")
    fields = " ".join(f"{k}={v}" for k, v in event.items())
    return " ".join(part for part in (stamp, level, str(name), fields) if part)


def configure_logging(log_file: Path, *, verbose: bool = False) -> None:
    """Every event goes to ``log_file`` as a JSON line; ``--verbose`` also echoes them to stderr.

    The file and its folder are made at the first event, so a command that logs nothing (one that only looks at a
    workspace) leaves no trace, not even in a folder that did not exist. A log that cannot be opened then (a
    read-only workspace) is said in one line and skipped: commands that only read the workspace still work, and
    those that write it fail on the database with their own clear error."""
    handlers: list[logging.Handler] = [WorkspaceLogHandler(log_file)]
    if verbose:
        handlers.append(StderrLines())
    logging.basicConfig(level=logging.INFO, format="%(message)s", handlers=handlers, force=True)
    for noisy in ("httpx", "httpcore", "openai", "langchain", "langgraph"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
