"""compile: static checks before anything runs. The build itself (Triton JIT) happens in the sandboxed worker.

Only parsing happens here (``ast``), never execution: untrusted code does not run in the agent's process.
"""

from __future__ import annotations

import ast

from langgraph.runtime import Runtime

from ksearch import pyparse
from ksearch.agent.context import SearchContext
from ksearch.agent.state import CycleState
from ksearch.tools import integrity


def compile_candidate(state: CycleState, runtime: Runtime[SearchContext]) -> dict:
    if state.candidate_id is None:
        return {"compile_error": None}
    ctx = runtime.context
    code = ctx.store.get_candidate(state.candidate_id).code
    error = static_check(code, ctx.task.entry_point)
    if error is None:
        rejection = integrity.check_source(code, task_name=ctx.task.name)
        if rejection is not None:
            error = f"rejected by integrity rule {rejection.rule}: {rejection.evidence}"
    return {"compile_error": error}


def static_check(code: str, entry_point: str) -> str | None:
    """A syntax error or a missing entry point, as a message for the coder; None when the module looks runnable."""
    try:
        tree = pyparse.parse(code)
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg} (line {exc.lineno}): {(exc.text or '').strip()}"
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == entry_point:
            return None
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == entry_point for t in node.targets):
            return None
    return f"the module defines no top-level `{entry_point}`: the task calls `{entry_point}(...)`"
