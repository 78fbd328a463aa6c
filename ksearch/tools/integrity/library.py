"""The library the task forbids: calling the op the kernel must compute, or falling back to the reference.

Rules: ``forbidden_op`` (a call the task forbids: ``TASK_FORBIDDEN_CALLS`` or the task's ``forbidden_calls``; calls
that only allocate or describe, ``ALLOWED_TORCH_CALLS``, never count) and ``reference_fallback`` (computing with torch
or a library method in an ``except`` handler, or a class that only inherits the reference model). A top-level
``if __name__ == "__main__":`` self-test may call the forbidden op: it never runs when the harness imports the module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ksearch.tools.integrity.base import Finding, ScannerBase, binds, is_main_test
from ksearch.tools.integrity.compute_vocabulary import ALLOWED_TORCH_CALLS, LIBRARY_METHODS
from ksearch.tools.integrity.vocabulary import matches


class LibraryRules(ScannerBase):
    self_test: set[int]
    """Ids of the nodes inside the module's ``__main__`` self-test (set once by ``Scanner``)."""

    def _self_test_nodes(self) -> set[int]:
        """Nodes inside a top-level ``if __name__ == "__main__":`` body: a self-test that never runs when the
        harness imports the module, so it may call the library op it checks against. Empty when the module binds
        ``__name__`` itself (which could make the block run)."""
        if any(binds(node, "__name__") for node in ast.walk(self.tree)):
            return set()
        inside: set[int] = set()
        for stmt in self.tree.body:
            if isinstance(stmt, ast.If) and is_main_test(stmt.test):
                for part in stmt.body:
                    inside.update(id(n) for n in ast.walk(part))
        return inside

    def _forbidden_call(self, node: ast.Call, name: str | None, method: str | None) -> Iterator[Finding]:
        if not name:
            return
        if self.forbidden and not name.startswith("triton.") and id(node) not in self.self_test:
            # a forbidden ".softmax" matches any call of that method: ``name`` ends with it (``matches``)
            if matches(name, self.forbidden) and name not in ALLOWED_TORCH_CALLS:
                yield self.finding("forbidden_op", node, f"calls {name}")

    def _try(self, node: ast.Try) -> Iterator[Finding]:
        for handler in node.handlers:
            for element in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
                if not isinstance(element, ast.Call):
                    continue
                name = self.resolve(element.func) or ""
                method = element.func.attr if isinstance(element.func, ast.Attribute) else ""
                library = (name.startswith("torch.") and name not in ALLOWED_TORCH_CALLS) or (
                    matches(name, self.forbidden) if self.forbidden else False
                )
                if library or (method in LIBRARY_METHODS and not name.startswith(("triton.", "tl."))):
                    yield self.finding("reference_fallback", element, f"the except handler computes with {name}")
                    return

    def _reference_class(self, node: ast.ClassDef) -> Iterator[Finding]:
        body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if node.bases and all(isinstance(s, ast.Pass) for s in body):
            names = [self.resolve(b) or "" for b in node.bases]
            if any(n.split(".")[-1] in ("Model", "Reference", "ReferenceModel") for n in names):
                yield self.finding("reference_fallback", node, f"class {node.name} only inherits the reference")
