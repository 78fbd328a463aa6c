"""Every ``KSEARCH_*`` environment variable is read in ``ksearch/settings.py`` and nowhere else, each when it is
used."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ksearch import settings

ROOT = Path(__file__).resolve().parents[1]
NAMED = re.compile(r"[\"'](KSEARCH_[A-Z_]+)[\"']")


def _naming_modules() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for source in sorted((ROOT / "ksearch").rglob("*.py")):
        names = set(NAMED.findall(source.read_text(encoding="utf-8")))
        if names:
            found[str(source.relative_to(ROOT))] = names
    return found


def test_no_module_but_settings_names_a_variable() -> None:
    found = _naming_modules()
    assert "ksearch/settings.py" in found  # the scan sees what it should
    assert {path: names for path, names in found.items() if path != "ksearch/settings.py"} == {}


def test_every_variable_named_in_settings_is_a_setting() -> None:
    declared = {s.name for s in (*settings.USER_SETTINGS, *settings.HARNESS_OWN)}
    assert _naming_modules()["ksearch/settings.py"] == declared
    assert len(declared) == len(settings.USER_SETTINGS) + len(settings.HARNESS_OWN)


def test_a_setting_is_read_when_it_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(settings.SANDBOX.name, raising=False)
    assert settings.SANDBOX.raw() == "auto"
    monkeypatch.setenv(settings.SANDBOX.name, "off")
    assert settings.SANDBOX.raw() == "off"
    monkeypatch.setenv(settings.LOW_MEMORY.name, "1")
    assert settings.LOW_MEMORY.is_on()
    monkeypatch.setenv(settings.LOW_MEMORY.name, "yes")
    assert not settings.LOW_MEMORY.is_on()


def test_numbers_and_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(settings.PARENT_PID.name, raising=False)
    assert settings.PARENT_PID.number() is None
    monkeypatch.setenv(settings.PARENT_PID.name, "42")
    assert settings.PARENT_PID.number() == 42
    monkeypatch.setenv(settings.MCP_ROOTS.name, "/a::/b")
    assert settings.MCP_ROOTS.paths() == [Path("/a"), Path("/b")]


def test_the_parents_switches_follow_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent reads its settings at each use: the audit rate and the polling interval of the moment."""
    from ksearch.tools.evaluator.parent.evaluate import audit_rate
    from ksearch.tools.evaluator.parent.session import timing_poll_s

    monkeypatch.setenv(settings.AUDIT_RATE.name, "0.5")
    assert audit_rate() == 0.5
    monkeypatch.setenv(settings.TIMING_POLL_MS.name, "5")
    assert timing_poll_s() == 0.005
    monkeypatch.delenv(settings.TIMING_POLL_MS.name)
    assert timing_poll_s() == 0.0
