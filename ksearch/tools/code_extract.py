"""Pull the kernel module out of a model's reply (markdown fences, prose around them), or say why it cannot."""

from __future__ import annotations

import re
import textwrap

from ksearch.errors import ModelReplyError

_PYTHON_TAGS = frozenset({"", "python", "py", "python3", "triton"})
_CUDA_TAGS = frozenset({"cuda", "cu", "cpp", "c++", "c"})
_TAGS: dict[str, frozenset[str]] = {"triton": _PYTHON_TAGS, "cuda": _PYTHON_TAGS | _CUDA_TAGS}
_OPEN = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")


def extract_code(reply: str, language: str) -> str:
    """The largest fenced block tagged python/py/triton (or untagged); without fences, the whole reply.

    Raises ModelReplyError (carrying the reply) when nothing usable is found, or when an unfenced reply does not
    parse as Python (it is prose, not code). A fenced block with a syntax error is returned as it is: the model
    meant it as code, so it becomes a compile error that the next round's debug prompt shows.
    """
    wanted = _TAGS.get(str(language), _PYTHON_TAGS)
    blocks = _fenced_blocks(reply)
    if blocks:
        eligible = [(tag, code) for tag, code in blocks if tag in wanted]
        if not eligible:
            tags = ", ".join(sorted({tag or "untagged" for tag, _ in blocks}))
            raise ModelReplyError(
                f"the reply has code blocks ({tags}) but none tagged python, py, triton or untagged",
                last_reply=reply,
            )
        tag, code = max(eligible, key=lambda block: len(block[1]))  # max() keeps the first of equal sizes
    else:
        tag, code = "", reply
    code = textwrap.dedent(code).strip("\n")
    if not code.strip():
        raise ModelReplyError("the reply contains no code", last_reply=reply)
    if not blocks:
        _check_python(code, reply)
    return code + "\n"


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(tag, body) of every ``` or ~~~ fenced block; an unclosed last fence runs to the end (truncated replies)."""
    blocks: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _OPEN.match(lines[i])
        if match is None:
            i += 1
            continue
        fence = match["fence"]
        tag = match["info"].strip().split(" ")[0].lower() if match["info"].strip() else ""
        body: list[str] = []
        i += 1
        while i < len(lines) and not _closes(lines[i], fence):
            body.append(lines[i])
            i += 1
        blocks.append((tag, "\n".join(body)))
        i += 1
    return blocks


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def _check_python(code: str, reply: str) -> None:
    try:
        compile(code, "candidate.py", "exec")
    except SyntaxError as exc:
        where = f" (line {exc.lineno})" if exc.lineno else ""
        raise ModelReplyError(f"the code does not parse: SyntaxError: {exc.msg}{where}", last_reply=reply) from exc
    except ValueError as exc:  # e.g. null bytes
        raise ModelReplyError(f"the code does not parse: {exc}", last_reply=reply) from exc
