"""The walk: ``Scanner`` combines the rule families and sends each node of the module to those that judge it.

One pass over the tree in ``ast.walk`` order, then the output-caching data-flow pass. Each family (a mixin over
``ScannerBase``) lives in its own module; this is the only place that says which family sees which kind of node.
Nodes inside a top-level ``if __name__ == "__main__":`` self-test are not judged: that block never runs when the
harness imports the candidate (``LibraryRules._self_test_nodes`` finds none when the module binds ``__name__``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ksearch.tools.integrity.base import Finding
from ksearch.tools.integrity.caching import CachingRules
from ksearch.tools.integrity.library import LibraryRules
from ksearch.tools.integrity.processes import ProcessRules
from ksearch.tools.integrity.reach import ReachRules
from ksearch.tools.integrity.sources import SourceRules
from ksearch.tools.integrity.streams import StreamRules
from ksearch.tools.integrity.writes import WriteRules


class Scanner(ProcessRules, StreamRules, WriteRules, SourceRules, CachingRules, LibraryRules, ReachRules):
    """Every finding in one parsed module, in walk order (``scan`` sorts them by rule priority)."""

    def __init__(
        self,
        code: str,
        tree: ast.Module,
        *,
        forbidden: tuple[str, ...],
        entry_point: str | None,
        data_parameters: tuple[int, ...] = (),
        support_modules: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(code, tree, forbidden=forbidden, entry_point=entry_point, data_parameters=data_parameters)
        self.support_modules = support_modules
        self.self_test = self._self_test_nodes()
        self.used_names = self._used_names()
        self.threading_misuse = self._threading_misuse()
        self.cached_functions = self._cached_functions()

    def run(self) -> Iterator[Finding]:
        for node in ast.walk(self.tree):
            if id(node) in self.self_test:
                continue  # a top-level ``if __name__ == "__main__":`` self-test never runs when the harness imports
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield from self._import(node)
                yield from self._reach_import(node)
            elif isinstance(node, ast.Call):
                yield from self._call(node)
            elif isinstance(node, ast.Attribute):
                yield from self._introspection_attribute(node)
                yield from self._environment_attribute(node)
                yield from self._reach_attribute(node)
                yield from self._graph_reference(node)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                yield from self._assignment(node)
            elif isinstance(node, ast.ClassDef):
                yield from self._tensor_subclass(node)
                yield from self._reference_class(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from self._dispatch_hook(node)
                yield from self._memoised_function(node)
                yield from self._asynchronous(node)
            elif isinstance(node, ast.Try):
                yield from self._try(node)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield from self._string(node)
                yield from self._reach_source(node)
            elif isinstance(node, ast.MatchClass):
                yield from self._reach_match_class(node)
            elif isinstance(node, ast.Name):
                yield from self._harness_name(node)
                yield from self._reach_name(node)
                yield from self._graph_reference(node)
            elif isinstance(node, (ast.Await, ast.AsyncFor, ast.AsyncWith)):
                yield from self._asynchronous(node)
        yield from self._caching()

    def _call(self, node: ast.Call) -> Iterator[Finding]:
        # writes before processes: a call that patches through ``sys.modules.__setattr__`` reports the patch first
        name = self.resolve(node.func)
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        yield from self._write_call(node, name, method)
        yield from self._process_call(node, name)
        yield from self._stream_call(node, name, method)
        yield from self._forbidden_call(node, name, method)
        yield from self._reach_call(node, name)
