"""Code as the prompts show it: whole, or as a unified diff against code shown elsewhere in the same prompt. Pure.

Code is never clipped: a head-and-tail clip removed the whole body of the kernel under study from the planner's
prompt in rounds 17 and 21 of examples/trimul-record (issue 57). Where the same code would appear twice, the second
copy becomes a diff against the first; when the diff is longer than the code itself, the code is shown instead.
"""

from __future__ import annotations

import difflib


def fenced(code: str, language: str = "python") -> str:
    return f"```{language}\n{code.rstrip()}\n```"


def unified_diff(before: str, after: str, before_label: str, after_label: str, context: int = 3) -> str:
    """``after`` against ``before`` as a unified diff ('' when they are the same)."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=before_label,
        tofile=after_label,
        n=context,
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines).rstrip("\n")


def change_view(before: str | None, after: str, before_label: str, after_label: str) -> str:
    """``after`` as a fenced diff against ``before`` (which the reader has in front of it), or whole when there is
    no ``before`` or the diff would be longer than the code."""
    if before is None:
        return f"{after_label} (whole):\n{fenced(after)}"
    if before == after:
        return f"{after_label}: the same code as {before_label}."
    diff = unified_diff(before, after, before_label, after_label)
    if len(diff) >= len(after):
        return f"{after_label} (whole; it rewrites most of {before_label}):\n{fenced(after)}"
    return f"{after_label} as a diff against {before_label}:\n{fenced(diff, 'diff')}"
