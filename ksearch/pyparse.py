"""``ast.parse`` that is safe to call from several threads of one process.

CPython 3.11's ``ast`` module keeps the depth counter it uses while turning a parse tree into Python objects in state
shared by every thread. When a garbage-collected finaliser releases the GIL in the middle of that conversion and
another thread parses meanwhile, the first parse fails with ``SystemError: AST constructor recursion depth mismatch``
(seen in CI: two parallel cycles of a search scanned their candidates at once). One lock around every parse this
process makes removes the overlap; parses are milliseconds, so nothing waits long.

The standard library's own parses are not behind the lock (3.11's traceback formatting parses a line to place its
``^^^`` markers, on whatever thread logs an exception), so a parse here that still meets the interpreter's error is
repeated: the counter is reset at the start of every parse.
"""

from __future__ import annotations

import ast
import threading

_ATTEMPTS = 3
_PARSE_LOCK = threading.RLock()  # re-entrant: a finaliser that parses on the same thread must not deadlock


def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, one thread at a time. Raises what ``ast.parse`` raises (SyntaxError, ValueError)."""
    with _PARSE_LOCK:
        for _ in range(_ATTEMPTS - 1):
            try:
                return ast.parse(source)
            except SystemError as exc:  # the interpreter's shared counter, disturbed by a parse outside the lock
                if "recursion depth mismatch" not in str(exc):
                    raise
        return ast.parse(source)
