"""Scrubbing secret-looking values out of text that came from untrusted code, before it is stored or shown to a model.

Containment (``ksearch.tools.containment``) keeps keys out of a kernel's reach; this is the second line: whatever a
kernel prints, raises or reports passes through ``redact`` before it becomes an evaluation's log or evidence, so a
key that leaked anyway (a layer this machine refused) does not travel on into the workspace, the next prompt or a
report. Two kinds of value are replaced by ``REDACTED``:

- the values of this process's secret-named environment variables (``OPENAI_API_KEY``, ``*_TOKEN``...), exactly;
- strings shaped like well-known credentials (``sk-...``, ``AKIA...``, ``ghp_...``, ``hf_...``, ``xox?-...``,
  ``AIza...``, ``Bearer ...``, PEM private keys).

It cannot catch a key the kernel encoded (reversed, base64): that is containment's job.
"""

from __future__ import annotations

import os
import re

REDACTED = "[redacted]"
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
MIN_SECRET_LENGTH = 8
"""Shorter values (``1``, ``true``) are left alone: replacing them would garble honest output."""
PATTERNS = re.compile(
    r"sk-[A-Za-z0-9_\-]{16,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|hf_[A-Za-z0-9]{30,}"
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}"
    r"|AIza[0-9A-Za-z_\-]{35}"
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{16,}=*"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[A-Za-z0-9+/=\s\\]*(?:-----END [A-Z ]*PRIVATE KEY-----)?"
)
"""No pattern matches a quote, so redacting a JSON document keeps it valid JSON."""


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """The values of secret-named variables of ``environ`` (this process's by default), longest first."""
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if SECRET_NAME.search(k) and len(v.strip()) >= MIN_SECRET_LENGTH}
    return sorted(values, key=len, reverse=True)


def holds_secret(environ: dict[str, str] | None = None) -> bool:
    """Whether ``environ`` (this process's by default) holds a secret-named variable with a value: an API key, a
    token. Such a process never imports a task file (``ksearch.tasks.keyless``)."""
    return bool(secret_values(environ))


def redact(text: str, environ: dict[str, str] | None = None) -> str:
    """``text`` with every secret-looking value replaced by ``REDACTED``."""
    if not text:
        return text
    for value in secret_values(environ):
        text = text.replace(value, REDACTED)
    return PATTERNS.sub(REDACTED, text)


def redact_json(document: str) -> str:
    """A JSON document with every secret-looking value in it replaced (still valid JSON: ``REDACTED`` and the
    patterns hold no quote; a document that would not stay valid is returned with its strings emptied of secrets by
    parsing it first)."""
    import json

    redacted = redact(document)
    try:
        json.loads(redacted)
        return redacted
    except ValueError:
        return json.dumps(_redact_tree(json.loads(document)))


def _redact_tree(value: object) -> object:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redact_tree(v) for v in value]
    if isinstance(value, dict):
        return {k: _redact_tree(v) for k, v in value.items()}
    return value
