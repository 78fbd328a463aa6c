"""Run ids: one safe pattern wherever an id is accepted (the CLI, MCP, the store), and file names built from ids.

A run id ends up in file names (``report-RUN.html``, ``logs/RUN.driver.log``), in printed hints that a user may paste
into a shell, and in URLs; so it is letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit (no
path separators, no ``..`` component, nothing a shell interprets), at most 128 characters.
"""

from __future__ import annotations

import re

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RUN_ID_RULE = "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128 characters"


def check_run_id(value: str) -> str:
    """``value`` when it is a safe run id; ValueError saying the rule otherwise."""
    if not RUN_ID_PATTERN.match(value):
        raise ValueError(f"run id {value!r} is not allowed: use {RUN_ID_RULE}")
    return value


def file_stem(run_id: str) -> str:
    """A file-name-safe form of any id (a stored one may predate the rule, or come from someone else's workspace)."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", run_id).lstrip(".")[:128]
    return stem or "run"
