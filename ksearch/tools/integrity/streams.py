"""Streams, CUDA graphs and tensor subclasses: work that escapes the timed stream or is not done when it claims.

Rules: ``stream_use`` (side streams and stream contexts: only the current stream is timed), ``cuda_graph_replay``
(CUDA graphs and ``torch.compile`` modes that replay recorded work) and ``tensor_subclass`` (subclasses and dispatch
hooks that can defer the work until the output is checked). Side streams named in CUDA/C++ source are caught by
``sources``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ksearch.tools.integrity.base import Finding, ScannerBase
from ksearch.tools.integrity.vocabulary import (
    GRAPH_CALLS,
    STREAM_CALLS,
    STREAM_METHODS,
    SUBCLASS_CALLS,
    SUBCLASS_DEFS,
    SUBCLASS_METHODS,
    TENSOR_BASES,
    matches,
)


class StreamRules(ScannerBase):
    def _stream_context(self, node: ast.With | ast.AsyncWith) -> Iterator[Finding]:
        for item in node.items:
            if matches(self.resolve(item.context_expr), STREAM_CALLS):
                yield self.finding("stream_use", node, "runs work under a non-default stream context")

    def _stream_call(self, node: ast.Call, name: str | None, method: str | None) -> Iterator[Finding]:
        if not name:
            return
        if matches(name, STREAM_CALLS) or method in STREAM_METHODS:
            yield self.finding("stream_use", node, f"calls {name}")
        if matches(name, GRAPH_CALLS):
            yield self.finding("cuda_graph_replay", node, f"calls {name}")
        if name == "torch.compile" or name.endswith(".torch.compile"):
            for kw in node.keywords:
                if kw.arg == "mode" and isinstance(kw.value, ast.Constant) and kw.value.value in (
                    "reduce-overhead", "max-autotune"
                ):
                    yield self.finding("cuda_graph_replay", node, f"torch.compile(mode={kw.value.value!r}) replays CUDA graphs")
        if matches(name, SUBCLASS_CALLS) or method in SUBCLASS_METHODS:
            yield self.finding("tensor_subclass", node, f"calls {name}")

    def _tensor_subclass(self, node: ast.ClassDef) -> Iterator[Finding]:
        for base in node.bases:
            name = self.resolve(base)
            if matches(name, TENSOR_BASES):
                yield self.finding("tensor_subclass", node, f"class {node.name} subclasses {name}")

    def _dispatch_hook(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[Finding]:
        if node.name in SUBCLASS_DEFS:
            yield self.finding("tensor_subclass", node, f"defines {node.name}")
