"""ksearch.pyparse: parses from two threads never overlap (CPython 3.11's shared AST depth counter, seen in CI)."""

from __future__ import annotations

import ast
import gc
import sys
import threading
from collections.abc import Callable

import pytest

from ksearch import pyparse

SOURCE = "def f(x):\n    return [[(x + 1) * 2 for _ in range(3)] for _ in range(4)]\n" * 20


def _parse_while_another_thread_parses(parse: Callable[[str], ast.Module]) -> tuple[bool, list[SystemError]]:
    """Parse on this thread; a finaliser that the garbage collector runs in the middle of that parse lets a second
    thread parse (waiting for it at most 0.5 s), as a GIL switch in a search with parallel cycles did.
    Returns whether the finaliser ran during the parse and the SystemErrors either parse raised."""
    this = threading.current_thread()
    go, other_done = threading.Event(), threading.Event()
    errors: list[SystemError] = []
    fired: list[bool] = []

    def other() -> None:
        go.wait(5)
        try:
            parse(SOURCE)
        except SystemError as exc:
            errors.append(exc)
        other_done.set()

    class Trap:
        def __del__(self) -> None:
            if threading.current_thread() is this and not fired:
                fired.append(True)
                go.set()
                other_done.wait(0.5)

    thread = threading.Thread(target=other)
    thread.start()
    first, second = Trap(), Trap()
    first.partner, second.partner = second, first  # a cycle: only the collector frees it, mid-parse
    del first, second
    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        parse(SOURCE)
    except SystemError as exc:
        errors.append(exc)
    finally:
        gc.set_threshold(*threshold)
        go.set()
        thread.join(5)
    return bool(fired), errors


def test_the_harness_reproduces_the_interpreter_bug_with_plain_ast_parse() -> None:
    fired, errors = _parse_while_another_thread_parses(ast.parse)
    assert fired
    if sys.version_info[:2] == (3, 11):
        assert errors and "recursion depth mismatch" in str(errors[0])


def test_a_parse_waits_while_another_thread_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first parse is held inside ``ast.parse``; a second thread's parse must not start until it returns."""
    real = ast.parse
    inside, release = threading.Event(), threading.Event()
    running: list[str] = []
    overlapped: list[bool] = []

    def held_parse(source: str, *args: object, **kwargs: object) -> ast.Module:
        overlapped.append(bool(running))
        running.append(source)
        if source == "first = 1\n":
            inside.set()
            release.wait(5)
        running.remove(source)
        return real(source)

    monkeypatch.setattr(ast, "parse", held_parse)
    first = threading.Thread(target=pyparse.parse, args=("first = 1\n",))
    second = threading.Thread(target=pyparse.parse, args=("second = 2\n",))
    first.start()
    assert inside.wait(5)
    second.start()
    second.join(0.3)
    assert second.is_alive()  # waiting for the lock, not parsing beside the first
    release.set()
    first.join(5)
    second.join(5)
    assert overlapped == [False, False]


def test_parse_returns_the_module_and_raises_syntax_errors() -> None:
    assert isinstance(pyparse.parse("x = 1\n").body[0], ast.Assign)
    with pytest.raises(SyntaxError):
        pyparse.parse("def (:\n")


def test_a_parse_disturbed_by_a_parse_outside_the_lock_is_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    real, calls = ast.parse, []

    def disturbed_once(source: str, *args: object, **kwargs: object) -> ast.Module:
        calls.append(source)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=15, after=7)")
        return real(source)

    monkeypatch.setattr(ast, "parse", disturbed_once)
    assert isinstance(pyparse.parse("x = 1\n").body[0], ast.Assign) and len(calls) == 2
    monkeypatch.setattr(ast, "parse", lambda source: (_ for _ in ()).throw(SystemError("something else")))
    with pytest.raises(SystemError, match="something else"):
        pyparse.parse("x = 1\n")
