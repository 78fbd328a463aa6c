"""CUDA graphs and tensor subclasses: work that is replayed, or not done when the call claims it is.

Rules: ``cuda_graph_replay`` (CUDA graphs and ``torch.compile`` modes that replay recorded work) and
``tensor_subclass`` (subclasses and dispatch hooks that can defer the work until the output is checked).

Side streams are not refused here: a kernel that joins its side streams to the current stream before it returns
(``wait_stream``, ``record_stream``) is honest. Work left running on one when the call returns is caught at run time:
the output changes after a device-wide synchronisation (``deferred_work``), and the parent's clock sees wall time
that the reported events do not account for (``timing_forgery``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ksearch.tools.integrity.base import Finding, ScannerBase
from ksearch.tools.integrity.vocabulary import (
    GRAPH_CALLS,
    SUBCLASS_CALLS,
    SUBCLASS_DEFS,
    SUBCLASS_METHODS,
    TENSOR_BASES,
    matches,
)


class StreamRules(ScannerBase):
    def _stream_call(self, node: ast.Call, name: str | None, method: str | None) -> Iterator[Finding]:
        if not name:
            return
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
