"""The manual's table of environment variables (docs/configuration.md) lists every ``KSEARCH_*`` variable the package
reads, so a user can find each switch in one place (the ones the harness sets for its own child processes excepted)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARNESS_OWN = {"KSEARCH_PARENT_PID", "KSEARCH_MSG_FD", "KSEARCH_DOORBELL_FD", "KSEARCH_STAGING_DIR"}
"""Set by the evaluator for the processes it starts (a pipe's descriptor, the parent to die with, the checker's
staging folder): not a user's."""


def _read_by_the_package() -> set[str]:
    names: set[str] = set()
    for source in (ROOT / "ksearch").rglob("*.py"):
        names |= set(re.findall(r"[\"'](KSEARCH_[A-Z_]+)[\"']", source.read_text(encoding="utf-8")))
    return names - HARNESS_OWN


def _in_the_manual_table() -> set[str]:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    table = text.split("\n## Environment variables\n", 1)[1].split("\n\n", 2)[1]
    rows = [line for line in table.splitlines() if line.startswith("| `KSEARCH_")]
    return {name for row in rows for name in re.findall(r"`(KSEARCH_[A-Z_]+)`", row.split("|")[1])}


def test_every_variable_the_package_reads_is_in_the_manual_table() -> None:
    read = _read_by_the_package()
    assert "KSEARCH_AUDIT_RATE" in read and "KSEARCH_WORKSPACE" in read  # the scan finds what it should
    assert read - _in_the_manual_table() == set()


def test_the_manual_table_names_no_variable_the_package_does_not_read() -> None:
    assert _in_the_manual_table() - _read_by_the_package() == set()


def test_the_manual_table_is_the_users_settings() -> None:
    from ksearch import settings

    assert _in_the_manual_table() == {s.name for s in settings.USER_SETTINGS}
    assert {s.name for s in settings.HARNESS_OWN} == HARNESS_OWN
