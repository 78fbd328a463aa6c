"""The prompt templates (the ``*.txt`` files beside this module) and the one way to fill them.

Templates use ``$name`` placeholders (string.Template) so JSON examples need no brace escaping. Here, below every
part that writes prompts (the search, skills, the LLM layer), so none of them has to import another to render one.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from string import Template

_PLACEHOLDER = re.compile(r"\$(?:(\w+)|\{(\w+)\})")


@cache
def template_text(name: str) -> str:
    return resources.files("ksearch.prompts").joinpath(f"{name}.txt").read_text(encoding="utf-8")


def template_placeholders(name: str) -> set[str]:
    return {a or b for a, b in _PLACEHOLDER.findall(template_text(name))}


def render(name: str, **values: object) -> str:
    """Fill a template; a missing or an unexpected value is a programming error, raised at once."""
    expected = template_placeholders(name)
    missing = expected - values.keys()
    unused = values.keys() - expected
    if missing or unused:
        raise KeyError(f"template {name}: missing {sorted(missing)}, unused {sorted(unused)}")
    return Template(template_text(name)).substitute({k: str(v) for k, v in values.items()})


def clip(text: str, limit: int) -> str:
    """At most about ``limit`` characters: the head and the tail, with how much was cut between them."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return text[:head] + f"\n... [{len(text) - limit} characters cut] ...\n" + text[-(limit - head) :]
