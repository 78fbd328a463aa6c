"""Rules on string constants: CUDA/C++ sources for ``load_inline`` and the paths or commands a candidate names.

The only text rules: everywhere else the rules match use (imports, calls, assignments), never words. Docstrings and bare
string statements are prose and are skipped. A string can break ``thread_injection`` (host threads or host callbacks in
CUDA/C++), ``cuda_graph_replay`` (graph capture), ``environment_access``, ``result_forgery`` (the harness's files and
channels, the operating system called from C/C++), ``harness_introspection`` (files that shadow a module, process
memory) or ``subprocess_or_network`` (package installs, downloads).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ksearch.tools.integrity.base import Finding, ScannerBase
from ksearch.tools.integrity.vocabulary import (
    C_SOURCE_MARK,
    COMPILER_FLAG_SOURCE,
    ENV_SOURCE,
    GRAPH_SOURCE,
    HOST_IO_SOURCE,
    NATIVE_EVASION_SOURCE,
    PIP_SOURCE,
    PROC_MEMORY_SOURCE,
    RESULT_SOURCE,
    SHADOW_SOURCE,
    THREAD_SOURCE,
)


class SourceRules(ScannerBase):
    def _string(self, node: ast.Constant) -> Iterator[Finding]:
        text = node.value
        if len(text) < 4 or id(node) in self.docstrings:
            return
        if THREAD_SOURCE.search(text):
            yield self.finding("thread_injection", node, "the CUDA/C++ source starts host threads or host callbacks")
        if GRAPH_SOURCE.search(text):
            yield self.finding("cuda_graph_replay", node, "the CUDA/C++ source captures or launches CUDA graphs")
        if ENV_SOURCE.search(text):
            yield self.finding("environment_access", node, "the source reads the environment")
        if RESULT_SOURCE.search(text):
            yield self.finding("result_forgery", node, f"names a harness file or channel ({text[:60]!r})")
        if SHADOW_SOURCE.search(text) and not text.lstrip().startswith(("#include", "//")):
            yield self.finding("harness_introspection", node, f"names a file that shadows a module ({text[:60]!r})")
        if PIP_SOURCE.search(text):
            yield self.finding("subprocess_or_network", node, f"installs a package or names a URL ({text[:60]!r})")
        if COMPILER_FLAG_SOURCE.search(text):
            yield self.finding(
                "result_forgery",
                node,
                f"a compiler or linker flag brings in what the source does not "
                f"show ({text.strip()[:40]!r}: a macro for an operating-system function, a file "
                "included ahead of the source, a wrapped symbol)",
            )
        c_source = C_SOURCE_MARK.search(text) is not None
        evasion = NATIVE_EVASION_SOURCE.search(text) if c_source else None
        if evasion is not None:
            yield self.finding(
                "result_forgery",
                node,
                "the CUDA/C++ source builds names by token pasting ('##'): no "
                "rule can read what they name; write the names out",
            )
        host_io = HOST_IO_SOURCE.search(text) if c_source else None
        if host_io is not None:
            yield self.finding(
                "result_forgery",
                node,
                f"the CUDA/C++ source calls the operating system "
                f"({host_io.group(0).strip()[:40]!r}: files, descriptors, sockets or processes; the "
                "harness's channel is a descriptor of this process; a function of your own with that name: rename it)",
            )
        if PROC_MEMORY_SOURCE.search(text):
            yield self.finding("harness_introspection", node, "reads process memory or descriptors")
