"""Reading a model's reply: the JSON object in it, validated against a model class, or the kernel module in its
markdown fences; each failure is a reason that can be shown to the model in a repair prompt."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from ksearch.errors import ModelReplyError
from ksearch.llm.interactive import ReplyFormat
from ksearch.prompts import render

# --------------------------------------------------------------------------------------------------------------------
# JSON

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


def extract_json_object(text: str) -> dict[str, Any]:
    """The first balanced ``{...}`` in ``text`` that parses as JSON, fenced or not.

    Reasoning blocks (``<think>...</think>``) are skipped, since local reasoning models put braces in them.
    Raises ValueError with a reason that can be shown to the model in a repair prompt.
    """
    body = _THINK_BLOCK.sub("", text)
    start = body.find("{")
    if start < 0:
        raise ValueError("the reply contains no JSON object (no '{' found)")
    first_error: str | None = None
    while start >= 0:
        end = _matching_brace(body, start)
        if end is None:
            first_error = first_error or (
                f"the JSON object starting at character {start} is never closed (reply cut off, or unbalanced braces)"
            )
            break
        candidate = body[start : end + 1]
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError as exc:
            first_error = first_error or f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        else:
            if isinstance(value, dict):
                return value
        start = body.find("{", end + 1)  # top-level objects only: never hand back a fragment of a broken one
    raise ValueError(first_error or "the reply contains no valid JSON object")


def _matching_brace(text: str, start: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``start``, skipping braces inside JSON strings."""
    depth = 0
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _validation_messages(exc: ValidationError) -> list[str]:
    return [f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors()]


def repair_prompt(prompt: str, reply: str, errors: list[str]) -> str:
    """The prompt for a JSON repair attempt (Instructor-style re-ask: the original task, what the model said, and
    why it was refused)."""
    errors_text = "\n".join(f"- {e}" for e in errors)
    return render("json_repair", prompt=prompt, reply=reply, errors=errors_text).removesuffix("\n")


def code_repair_prompt(prompt: str, error: str) -> str:
    """The prompt for a repair attempt after a reply with no usable code: the original task and why it was refused."""
    return render("code_repair", prompt=prompt, error=error).removesuffix("\n")


def json_reply_format(model_cls: type[BaseModel] | None) -> ReplyFormat:
    """The reply format of a JSON call, with the object's JSON schema when it is typed."""
    return ReplyFormat(
        kind="json",
        description="ONE JSON object and nothing else (no prose around it)"
        + (f", matching the JSON schema of {model_cls.__name__}" if model_cls is not None else ""),
        json_schema=model_cls.model_json_schema() if model_cls is not None else None,
    )


def parse_json_reply(
    reply: str,
    model_cls: type[BaseModel] | None,
    validate: Callable[[dict[str, Any]], list[str]] | None,
) -> tuple[Any, list[str]]:
    """(parsed value, problems); problems empty means usable."""
    try:
        data = extract_json_object(reply)
    except ValueError as exc:
        return None, [str(exc)]
    parsed: Any = data
    if model_cls is not None:
        try:
            parsed = model_cls.model_validate(data)
        except ValidationError as exc:
            return None, _validation_messages(exc)
    if validate is not None:
        errors = list(validate(data))
        if errors:
            return None, errors
    return parsed, []


# --------------------------------------------------------------------------------------------------------------------
# Code

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
        _, code = max(eligible, key=lambda block: len(block[1]))  # max() keeps the first of equal sizes
    else:
        code = reply
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
