"""The documentation stays what a reader can use: no references to numbered work periods anywhere in the repository
(a reader cannot resolve them; cite a date, a commit or a test), a README short enough for a newcomer, relative links
in the README and the manual (docs/) that lead somewhere, and every command of the CLI documented."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import typer.main

from ksearch.cli import app

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 400
"""The README is what a newcomer reads first: what ksearch is, install, the demo, the commands; the rest is docs/."""

NUMBERED_PERIOD = re.compile(r"\b(?:GPU |device )?sess" + r"ions?[ -]?\d+\b|\bround \d+ of the review\b", re.I)
"""A numbered work period (the word for a work session followed by its number, with or without "GPU", or "round 2 of
the review"); spelled in two pieces so that no tracked file, this one included, matches ``git grep "session [0-9]"``.
A search's rounds ("round 8 of examples/trimul-hand") are a product concept and pass."""

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCED = re.compile(r"^```.*?^```", re.S | re.M)


def _tracked_text_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    files = []
    for name in filter(None, listed.split("\0")):
        path = ROOT / name
        if path.is_file():
            files.append(path)
    return files


def _manual() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(markdown: Path) -> set[str]:
    text = FENCED.sub("", markdown.read_text(encoding="utf-8"))
    return {_slug(heading) for heading in re.findall(r"^#+ (.+)$", text, re.M)}


def test_no_tracked_file_refers_to_a_numbered_work_period() -> None:
    found = []
    for path in _tracked_text_files():
        if path == Path(__file__).resolve():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files (images, databases) hold no prose
        for number, line in enumerate(text.splitlines(), 1):
            if NUMBERED_PERIOD.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert found == [], "cite a date, a commit or a test instead:\n" + "\n".join(found)


def test_the_pattern_catches_numbered_periods_and_spares_search_rounds() -> None:
    assert NUMBERED_PERIOD.search("measured in GPU sess" + "ion 32 on an H200")
    assert NUMBERED_PERIOD.search("(sess" + "ions 27, 31 and 33)")
    assert NUMBERED_PERIOD.search("the sess" + "ion-15 run")
    assert NUMBERED_PERIOD.search("found in round 3 of the review")
    assert not NUMBERED_PERIOD.search("round 8 of examples/trimul-hand, which the H100 refused")
    assert not NUMBERED_PERIOD.search("`--session ID` continues a crashed walk; the evaluator session times it")


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move the details to a page in docs/"


def test_every_relative_link_of_the_readme_and_the_manual_resolves() -> None:
    broken = []
    for page in _manual():
        for target in LINK.findall(FENCED.sub("", page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto: and the like
            path, _, anchor = target.partition("#")
            destination = (page.parent / path).resolve() if path else page
            if not destination.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and destination.suffix == ".md" and anchor not in _anchors(destination):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_the_link_check_sees_a_missing_heading(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# The evaluator\n\n## What it guarantees, and what not\n", encoding="utf-8")
    assert _anchors(page) == {"the-evaluator", "what-it-guarantees-and-what-not"}


def _commands() -> list[str]:
    """Every command as typed: ``ksearch run``, ``ksearch skills list``, ..."""
    group = typer.main.get_command(app)
    names = []
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        subcommands = getattr(command, "commands", None)
        if subcommands:
            names += [f"ksearch {name} {sub}" for sub in subcommands]
        else:
            names.append(f"ksearch {name}")
    return names


def test_every_command_is_documented() -> None:
    commands = _commands()
    assert "ksearch run" in commands and "ksearch skills learn" in commands  # the CLI's commands are found
    text = " ".join(" ".join(page.read_text(encoding="utf-8") for page in _manual()).split())
    assert [command for command in commands if command not in text] == []


def _test_command(page: Path) -> str:
    """The command of the first ``bash`` block under a page's "Development" heading (the README's) or at its top
    (docs/development.md)."""
    text = page.read_text(encoding="utf-8")
    text = text.split("\n## Development\n", 1)[-1]
    block = re.search(r"^```bash\n(.*?)^```", text, re.S | re.M)
    assert block is not None, f"{page.relative_to(ROOT)} shows no test command"
    return block.group(1).strip()


def test_ci_runs_exactly_the_readmes_test_command() -> None:
    """CI's log is the evidence that the README's command passes (and how long it takes): .ci/run must end with that
    very command, and the development page must show the same one."""
    readme = _test_command(ROOT / "README.md")
    assert readme.startswith("ruff check . && ") and "python -m pytest" in readme  # the block is the test command
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert ci[-1] == readme
    assert _test_command(ROOT / "docs" / "development.md") == readme
