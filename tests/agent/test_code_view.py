"""Code in prompts: whole, or as a diff against code the same prompt shows, never clipped (issue 57)."""

from __future__ import annotations

from ksearch.agent.code_view import change_view, fenced, unified_diff

BASE = "def kernel(x):\n" + "".join(f"    a{i} = {i}\n" for i in range(20)) + "    return x\n"


def test_a_small_change_is_a_diff_with_context_and_labels() -> None:
    after = BASE.replace("a9 = 9", "a9 = 90")
    diff = unified_diff(BASE, after, "code A", "attempt 1")
    assert diff.splitlines()[:3] == ["--- code A", "+++ attempt 1", "@@ -8,7 +8,7 @@"]
    assert (
        "-    a9 = 9\n+    a9 = 90" in diff and "    a6 = 6" in diff and "    a5 = 5" not in diff
    )  # 3 lines of context
    assert unified_diff(BASE, BASE, "a", "b") == ""
    view = change_view(BASE, after, "code A", "attempt 1")
    assert view.startswith("attempt 1 as a diff against code A:\n```diff\n--- code A\n") and view.endswith("\n```")


def test_code_is_whole_without_a_base_when_the_diff_is_longer_or_the_same_code() -> None:
    assert change_view(None, BASE, "the spec", "attempt 1") == f"attempt 1 (whole):\n{fenced(BASE)}"
    rewritten = "".join(f"b{i} = {i}\n" for i in range(20))
    assert change_view(BASE, rewritten, "code A", "attempt 2") == (
        f"attempt 2 (whole; it rewrites most of code A):\n{fenced(rewritten)}"
    )
    assert change_view(BASE, BASE, "code A", "attempt 3") == "attempt 3: the same code as code A."
    assert fenced("x = 1\n\n", "python") == "```python\nx = 1\n```"
    no_newline = unified_diff("a\nb", "a\nc", "x", "y")
    assert no_newline.endswith("-b\n+c")  # a last line without its newline still ends a line of the diff
