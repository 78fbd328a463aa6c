"""Static integrity checks: reject candidate source that tries to game the evaluator, before any of it runs.

``check_source(code)`` parses the module with ``ast`` (never imports or executes it) and returns the first broken rule
as a ``Rejection`` or None. Rules have stable names (they are stored with evaluations and shown to the LLM), ordered by
priority: when several fire, the first in ``RULES`` is reported. The checks are a pre-filter, not the defence: the
worker's dynamic checks (fresh process, inputs checked unchanged, outputs rechecked, device-wide sync before the end
timestamp) still apply to whatever passes here. False positives cost a good kernel, so every rule matches *use* of a
dangerous facility (an import, a call, an assignment), resolved through import aliases, and never mere words in
comments; the only text rules look inside string constants (CUDA/C++ sources for ``load_inline``).

Rules (see ``RULES``): stream_use, thread_injection, subprocess_or_network, timer_monkeypatch, harness_introspection,
tensor_subclass, cuda_graph_replay, output_caching, environment_access, dynamic_code, reference_fallback,
forbidden_op (task-specific library ops, e.g. ``torch.softmax`` for the softmax task).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ksearch.contracts.evaluation import Rejection

RULES: dict[str, str] = {
    "stream_use": "work on a side CUDA stream escapes the timer (only the current stream is timed)",
    "thread_injection": "threads, processes, async tasks or signal handlers can finish work after the timer stops",
    "subprocess_or_network": "candidates may not start programs, install packages or use the network",
    "timer_monkeypatch": "patching timers, events or synchronisation forges the measurement",
    "harness_introspection": "reaching into the harness (modules, frames, the GC heap, raw memory) is not allowed",
    "tensor_subclass": "tensor subclasses and dispatch hooks can defer the work until the output is checked",
    "cuda_graph_replay": "CUDA graphs / reduce-overhead compilation replay recorded work instead of computing",
    "output_caching": "outputs cached by input identity or content are replayed instead of computed",
    "environment_access": "candidates have no business reading or changing the environment",
    "dynamic_code": "exec/eval/dynamic imports hide what the code does from these checks",
    "reference_fallback": "falling back to a library implementation when the kernel fails is not a kernel",
    "forbidden_op": "the task forbids this library operation: the kernel must compute it itself",
    "result_forgery": "writing to the harness's result files or status pipe forges the verdict",
}
"""Every rule name, in priority order, with the reason shown to the LLM."""

ALLOWED_TORCH_CALLS = frozenset(
    {"torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros", "torch.zeros_like", "torch.ones",
     "torch.ones_like", "torch.full", "torch.full_like", "torch.tensor", "torch.as_tensor", "torch.arange",
     "torch.device", "torch.Size", "torch.finfo", "torch.iinfo", "torch.is_tensor", "torch.no_grad",
     "torch.inference_mode", "torch.cuda.current_device", "torch.cuda.current_stream", "torch.cuda.default_stream",
     "torch.cuda.get_device_properties", "torch.cuda.get_device_capability", "torch.cuda.is_available",
     "torch.cuda.device", "torch.cuda.device_count", "torch.cuda.get_device_name", "torch.get_default_dtype"}
)  # fmt: skip
"""torch calls that allocate or describe, never compute: allowed even in an ``except`` handler."""

TASK_FORBIDDEN_CALLS: dict[str, tuple[str, ...]] = {
    "softmax": ("torch.softmax", "torch.log_softmax", "torch._softmax", "torch.special.softmax",
                "torch.special.log_softmax", "torch.nn.functional", "torch.nn.Softmax", "torch.nn.LogSoftmax",
                "torch.ops.aten", "torch._C._nn", "torch.sparse.softmax", ".softmax", ".log_softmax", "._softmax"),
}  # fmt: skip
"""Per task: dotted prefixes of calls the spec forbids (a leading dot means a method of that name on anything). A task
may also declare ``forbidden_calls`` (same format) as a class attribute."""

_THREAD_MODULES = ("threading", "_thread", "multiprocessing", "concurrent", "asyncio", "signal", "sched",
                   "torch.multiprocessing", "torch.distributed", "dummy_threading", "_posixsubprocess")  # fmt: skip
_PROCESS_MODULES = ("subprocess", "socket", "urllib", "requests", "http", "httpx", "aiohttp", "pip", "ensurepip",
                    "ftplib", "smtplib", "telnetlib", "xmlrpc", "pty", "webbrowser", "socketserver", "urllib3",
                    "paramiko", "pexpect", "sh", "plumbum", "ssl", "select", "selectors")  # fmt: skip
_PROCESS_CALLS = ("os.system", "os.popen", "os.exec", "os.spawn", "os.fork", "os.posix_spawn", "os.startfile",
                  "os.kill", "os.setsid", "os.setpgid", "os.getppid", "torch.hub", "os.pipe")  # fmt: skip
"""Raw prefixes: ``os.exec`` also matches ``os.execv``."""
_INTROSPECTION_MODULES = ("gc", "inspect", "ctypes", "cffi", "builtins", "__builtin__", "tracemalloc", "mmap",
                          "ksearch", "resource", "_ctypes", "objgraph", "pympler",
                          "torch._dynamo.eval_frame", "torch.utils._python_dispatch")  # fmt: skip
_INTROSPECTION_CALLS = ("sys.modules", "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile",
                        "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache", "sys.path", "sys.addaudithook",
                        "threading.settrace", "torch._C._cuda")  # fmt: skip
_FRAME_ATTRS = frozenset(
    {"f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next", "gi_frame", "cr_frame",
     "ag_frame", "__globals__", "__subclasses__", "__builtins__", "__closure__", "__code__", "__self__",
     "__loader__", "__spec__", "_getframe"}
)  # fmt: skip
_TIMER_TARGETS = ("torch.cuda.Event", "torch.cuda.synchronize", "torch.cuda.elapsed_time", "torch.cuda.Stream",
                  "torch.cuda.current_stream", "torch.cuda.event", "torch.Event", "torch.cuda.streams",
                  "torch.synchronize", "torch.cuda.graphs", "time", "triton.testing", "triton.runtime", "timeit",
                  "torch.utils.benchmark", "torch.cuda.nvtx", "torch.profiler", "statistics", "math")  # fmt: skip
_TIMER_NAMES = frozenset({"elapsed_time", "synchronize", "record", "perf_counter", "perf_counter_ns", "time",
                          "time_ns", "monotonic", "monotonic_ns", "do_bench", "do_bench_cudagraph", "query",
                          "wait", "median", "fmean", "mean", "stdev", "process_time"})  # fmt: skip
_STREAM_CALLS = ("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.ExternalStream", "torch.Stream",
                 "torch.cuda.set_stream", "torch.cuda.streams", "torch.cuda.StreamContext", "torch.stream",
                 "torch.cpu.Stream", "torch.cuda._set_stream_by_id", "torch.cuda.get_stream_from_external")  # fmt: skip
_STREAM_METHODS = frozenset({"wait_stream", "record_stream"})
_STREAM_SOURCE = re.compile(
    r"cudaStreamCreate|cudaStreamNonBlocking|cuStreamCreate|getStreamFromPool|getStreamFromExternal|"
    r"cudaStreamBeginCapture|cudaGraphLaunch|cudaStreamWaitEvent|setCurrentCUDAStream|cudaLaunchHostFunc|"
    r"std::thread|pthread_create|std::async"
)
_GRAPH_CALLS = ("torch.cuda.graph", "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables", "torch.cuda.graphs",
                "torch.cuda.graph_pool_handle", "triton.testing.do_bench_cudagraph", "torch._inductor.cudagraph",
                "torch.cuda._graph_pool_handle")  # fmt: skip
_SUBCLASS_CALLS = ("torch.Tensor._make_subclass", "torch.Tensor._make_wrapper_subclass", "torch._C._TensorBase",
                   "torch.utils._python_dispatch", "torch._C._disabled_torch_function_impl", "torch.overrides",
                   "torch._subclasses", "torch.utils._pytree")  # fmt: skip
_SUBCLASS_METHODS = frozenset({"_make_subclass", "_make_wrapper_subclass", "as_subclass"})
_SUBCLASS_DEFS = frozenset({"__torch_function__", "__torch_dispatch__"})
_TENSOR_BASES = ("torch.Tensor", "torch._C._TensorBase", "torch._C.TensorBase", "torch.nn.Parameter",
                 "torch.nn.parameter.Parameter", "torch.nn.parameter.Buffer")  # fmt: skip
_ENV_CALLS = ("os.environ", "os.environb", "os.getenv", "os.getenvb", "os.putenv", "os.unsetenv", "posix.environ",
              "nt.environ", "os.confstr")  # fmt: skip
_WRITE_CALLS = ("os.write", "os.pwrite", "os.writev", "os.open", "os.dup2", "os.truncate", "os.ftruncate", "os.replace",
                "os.rename", "os.remove", "os.unlink", "os.symlink", "os.link", "os.makedirs", "os.mkdir", "shutil",
                "os.sendfile", "os.fdopen")  # fmt: skip
_ENV_SOURCE = re.compile(r"/proc/(self|\d+|thread-self)/environ|\bgetenv\s*\(|\benviron\b\s*\[")
_DYNAMIC_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "breakpoint"})
_DYNAMIC_MODULES = ("importlib", "runpy", "marshal", "pickle", "cPickle", "dill", "cloudpickle", "shelve", "code",
                    "codeop", "imp", "zipimport", "pkgutil", "types.CodeType", "types.FunctionType", "pydoc")  # fmt: skip
_FINGERPRINT_CALLS = ("hashlib", "zlib.crc32", "zlib.adler32", "binascii.crc32", "xxhash", "pickle.dumps")
_FINGERPRINT_METHODS = frozenset({"data_ptr", "tobytes", "untyped_storage", "storage", "_cdata", "tolist", "item",
                                  "numpy", "__hash__", "_version", "storage_offset", "hexdigest", "digest"})  # fmt: skip
_FINGERPRINT_BUILTINS = frozenset({"id", "hash", "bytes", "tuple", "frozenset"})
_CACHE_DECORATORS = ("functools.lru_cache", "functools.cache", "functools.cached_property", "cachetools",
                     "joblib.Memory")  # fmt: skip
_CONTAINER_FACTORIES = ("dict", "list", "set", "collections.OrderedDict", "collections.defaultdict",
                        "collections.deque", "weakref.WeakKeyDictionary", "weakref.WeakValueDictionary",
                        "collections.ChainMap", "collections.Counter")  # fmt: skip
_LIBRARY_METHODS = frozenset(
    {"softmax", "log_softmax", "matmul", "mm", "bmm", "addmm", "einsum", "conv1d", "conv2d", "conv3d", "exp",
     "sum", "mean", "amax", "max", "layer_norm", "linear", "relu", "sigmoid", "tanh", "gelu", "silu", "norm",
     "logsumexp", "baddbmm", "scaled_dot_product_attention", "forward", "reference", "softmax_reference"}
)  # fmt: skip
_RESULT_SOURCE = re.compile(r"(^|[/\\'\"])(result|request)\.json|\.partial\b|status_fd|KSEARCH_|\.\./io\b|/io/")
_SHADOW_SOURCE = re.compile(r"(^|/)(torch|triton|numpy|ksearch|sitecustomize|usercustomize|pydantic)(/|\.py\b)")
_PIP_SOURCE = re.compile(r"\bpip3?\s+install\b|\bconda\s+install\b|\bcurl\s|\bwget\s", re.IGNORECASE)
_ENTRY_POINTS = ("kernel", "custom_kernel", "forward", "run", "entry", "solve")


@dataclass(frozen=True)
class Finding:
    """One broken rule at one place in the source."""

    rule: str
    line: int
    snippet: str
    detail: str

    def evidence(self) -> str:
        return f"line {self.line}: `{self.snippet}`: {self.detail} ({RULES[self.rule]})"


def check_source(code: str, *, task_name: str | None = None) -> Rejection | None:
    """The highest-priority broken rule as a Rejection, or None when the source looks honest (or does not parse:
    the syntax error is the worker's compile error to report)."""
    findings = scan(code, task_name=task_name)
    if not findings:
        return None
    first = findings[0]
    others = sorted({f.rule for f in findings} - {first.rule})
    more = f"; also broke: {', '.join(others)}" if others else ""
    return Rejection(rule=first.rule, evidence=(first.evidence() + more)[:1000])


def scan(code: str, *, task_name: str | None = None) -> list[Finding]:
    """Every finding, ordered by rule priority then line. Empty for unparsable code."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    scanner = _Scanner(code, tree, forbidden=_forbidden_calls(task_name), entry_point=_entry_point(task_name))
    findings = list(dict.fromkeys(scanner.run()))
    order = list(RULES)
    return sorted(findings, key=lambda f: (order.index(f.rule), f.line))


def _task(task_name: str | None):  # noqa: ANN202 - Task, imported lazily to keep this module light
    if not task_name:
        return None
    try:
        from ksearch.tasks.registry import resolve_task

        return resolve_task(task_name)
    except Exception:  # noqa: BLE001 - an unknown task only loses its task-specific rules here
        return None


def _forbidden_calls(task_name: str | None) -> tuple[str, ...]:
    declared = tuple(getattr(_task(task_name), "forbidden_calls", ()) or ())
    return TASK_FORBIDDEN_CALLS.get(task_name or "", ()) + declared


def _entry_point(task_name: str | None) -> str | None:
    task = _task(task_name)
    return getattr(task, "entry_point", None) if task is not None else None


NUMERICS_FLAGS = frozenset(
    {
        "torch.backends.cuda.matmul.allow_tf32",
        "torch.backends.cudnn.allow_tf32",
        "torch.backends.cudnn.benchmark",
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    }
)
"""Global numerics switches a kernel may set (several leaderboard entries enable TF32). They cannot sabotage the
reference, which runs in the separate checker process, and a precision loss beyond tolerance fails correctness."""


def _matches(name: str | None, prefixes: Iterable[str], *, raw: bool = False) -> str | None:
    """The first prefix that ``name`` equals or extends (dotted; any extension when ``raw``), or None. A prefix
    starting with a dot matches a method of that name on anything."""
    if not name:
        return None
    for prefix in prefixes:
        if raw and name.startswith(prefix):
            return prefix
        if prefix.startswith("."):
            if name.endswith(prefix) or f"{prefix}." in name:
                return prefix
        elif name == prefix or name.startswith(prefix + "."):
            return prefix
    return None


class _Scanner:
    def __init__(self, code: str, tree: ast.Module, *, forbidden: tuple[str, ...], entry_point: str | None) -> None:
        self.lines = code.splitlines()
        self.tree = tree
        self.forbidden = forbidden
        self.entry_points = (entry_point,) if entry_point else _ENTRY_POINTS
        self.aliases: dict[str, str] = {}
        self.defined: set[str] = set()
        self.containers: set[str] = set()
        self.docstrings: set[int] = set()
        self._collect_names()
        self.module_roots = {v.split(".")[0] for v in self.aliases.values()} | {
            "torch", "triton", "time", "sys", "os", "ksearch", "builtins", "numpy", "math", "statistics",
            "__builtins__",
        }  # fmt: skip

    # -- name resolution ------------------------------------------------------------------------------------------
    def _collect_names(self) -> None:
        """Import aliases, names bound by the module (so ``compile`` may be the module's own), module-level
        containers, and simple aliases ``ev = torch.cuda.Event`` (flow-insensitive: good enough for a pre-filter)."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defined.add(node.name)
            elif isinstance(node, ast.Global):
                self.containers.update(node.names)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                self.docstrings.add(id(node.value))  # docstrings and bare strings are prose, not sources
        for _ in range(2):  # aliases of aliases
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    target = node.targets[0].id
                    plain = not any(isinstance(n, ast.Call) for n in ast.walk(node.value))
                    resolved = self.resolve(node.value) if plain else None
                    if resolved and resolved.split(".")[0] in {v.split(".")[0] for v in self.aliases.values()}:
                        self.aliases.setdefault(target, resolved)
                    elif target not in self.aliases:
                        self.defined.add(target)
        for node in self.tree.body:
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if self._is_container(value):
                self.containers.update(t.id for t in targets if isinstance(t, ast.Name))
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                defaults = list(args.defaults) + [d for d in args.kw_defaults if d is not None]
                positional = args.posonlyargs + args.args
                for arg, default in zip(positional[len(positional) - len(args.defaults) :], args.defaults):
                    if self._is_container(default):
                        self.containers.add(arg.arg)
                for arg, default in zip(args.kwonlyargs, args.kw_defaults):
                    if default is not None and self._is_container(default):
                        self.containers.add(arg.arg)
                del defaults

    def _is_container(self, value: ast.expr) -> bool:
        if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp)):
            return True
        return isinstance(value, ast.Call) and _matches(self.resolve(value.func), _CONTAINER_FACTORIES) is not None

    def resolve(self, node: ast.AST) -> str | None:
        """Dotted name of a Name/Attribute chain with import aliases applied (``F.softmax`` ->
        ``torch.nn.functional.softmax``); calls in the chain are skipped (``x.cpu().numpy`` -> ``x.cpu.numpy``)."""
        parts: list[str] = []
        while True:
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            elif isinstance(node, ast.Call):
                node = node.func
            elif isinstance(node, ast.Subscript):
                node = node.value
            elif isinstance(node, ast.Name):
                parts.append(self.aliases.get(node.id, node.id))
                break
            else:
                return None
        return ".".join(reversed(parts))

    def is_builtin(self, node: ast.expr, names: frozenset[str]) -> str | None:
        if isinstance(node, ast.Name) and node.id in names and node.id not in self.defined | set(self.aliases):
            return node.id
        if isinstance(node, ast.Attribute) and node.attr in names:
            base = self.resolve(node.value)
            if base in ("builtins", "__builtins__", "__builtin__"):
                return node.attr
        return None

    # -- the walk ------------------------------------------------------------------------------------------------
    def finding(self, rule: str, node: ast.AST, detail: str) -> Finding:
        line = getattr(node, "lineno", 0)
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        return Finding(rule=rule, line=line, snippet=text[:120], detail=detail)

    def run(self) -> Iterator[Finding]:
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield from self._import(node)
            elif isinstance(node, ast.Call):
                yield from self._call(node)
            elif isinstance(node, ast.Attribute):
                yield from self._attribute(node)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                yield from self._assignment(node)
            elif isinstance(node, ast.ClassDef):
                yield from self._class(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from self._function(node)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if _matches(self.resolve(item.context_expr), _STREAM_CALLS):
                        yield self.finding("stream_use", node, "runs work under a non-default stream context")
            elif isinstance(node, ast.Try):
                yield from self._try(node)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield from self._string(node)
            elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
                yield self.finding("harness_introspection", node, f"uses {node.id}")
            elif isinstance(node, (ast.Await, ast.AsyncFor, ast.AsyncWith)):
                yield self.finding("thread_injection", node, "asynchronous code can run after the call returns")
        yield from self._caching()

    def _import(self, node: ast.Import | ast.ImportFrom) -> Iterator[Finding]:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                yield self.finding("harness_introspection", node, "relative imports reach outside the candidate")
                return
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module or ""]
        else:
            names = [a.name for a in node.names]
        for name in names:
            for rule, prefixes in (
                ("thread_injection", _THREAD_MODULES),
                ("subprocess_or_network", _PROCESS_MODULES),
                ("harness_introspection", _INTROSPECTION_MODULES),
                ("dynamic_code", _DYNAMIC_MODULES),
                ("cuda_graph_replay", _GRAPH_CALLS),
                ("stream_use", _STREAM_CALLS),
                ("tensor_subclass", _SUBCLASS_CALLS),
                ("environment_access", ("os.environ", "os.getenv", "os.environb", "os.putenv", "posix")),
                ("harness_introspection", ("sys.modules", "sys._getframe", "sys.settrace", "sys.meta_path")),
                ("subprocess_or_network", ("os.system", "os.popen", "os.fork", "os.exec", "os.spawn", "os.kill")),
            ):
                hit = _matches(name, prefixes)
                if hit:
                    yield self.finding(rule, node, f"imports {name.removesuffix('.')}")
                    break

    def _call(self, node: ast.Call) -> Iterator[Finding]:
        name = self.resolve(node.func)
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        builtin = self.is_builtin(node.func, _DYNAMIC_BUILTINS)
        if builtin:
            yield self.finding("dynamic_code", node, f"calls {builtin}()")
        attr_builtin = self.is_builtin(node.func, frozenset({"getattr", "setattr", "delattr", "vars", "globals",
                                                             "locals", "open"}))  # fmt: skip
        if attr_builtin in ("setattr", "delattr") and node.args:
            target = self.resolve(node.args[0])
            attr = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
            yield from self._patched(node, target, attr, how=attr_builtin)
        if attr_builtin in ("getattr", "setattr", "delattr") and len(node.args) > 1:
            if not isinstance(node.args[1], ast.Constant) and self._is_module_ref(node.args[0]):
                yield self.finding("dynamic_code", node, f"{attr_builtin} with a computed name on a module")
        if attr_builtin in ("globals", "locals", "vars") and (attr_builtin != "vars" or node.args):
            if attr_builtin != "vars" or self._is_module_ref(node.args[0]):
                yield self.finding("harness_introspection", node, f"calls {attr_builtin}()")
        if attr_builtin == "open" and node.args:
            yield from self._open(node)
        if method in ("__setattr__", "__delattr__") and node.args:
            yield from self._patched(node, self.resolve(node.args[0]), None, how=method)
        if not name:
            return
        if _matches(name, _STREAM_CALLS) or method in _STREAM_METHODS:
            yield self.finding("stream_use", node, f"calls {name}")
        if _matches(name, _PROCESS_CALLS, raw=True):
            yield self.finding("subprocess_or_network", node, f"calls {name}")
        if _matches(name, _INTROSPECTION_CALLS):
            yield self.finding("harness_introspection", node, f"calls {name}")
        if _matches(name, _GRAPH_CALLS):
            yield self.finding("cuda_graph_replay", node, f"calls {name}")
        if name == "torch.compile" or name.endswith(".torch.compile"):
            for kw in node.keywords:
                if kw.arg == "mode" and isinstance(kw.value, ast.Constant) and kw.value.value in (
                    "reduce-overhead", "max-autotune"
                ):
                    yield self.finding("cuda_graph_replay", node, f"torch.compile(mode={kw.value.value!r}) replays CUDA graphs")
        if _matches(name, _SUBCLASS_CALLS) or method in _SUBCLASS_METHODS:
            yield self.finding("tensor_subclass", node, f"calls {name}")
        if _matches(name, _WRITE_CALLS) or method in ("write_text", "write_bytes", "tofile", "touch", "symlink_to"):
            yield self.finding("result_forgery", node, f"calls {name} (writes files or descriptors)")
        if _matches(name, _ENV_CALLS):
            yield self.finding("environment_access", node, f"calls {name}")
        if self.forbidden and not name.startswith("triton."):
            hit = _matches(name, self.forbidden) or (
                method and any(p == f".{method}" for p in self.forbidden) and f".{method}"
            )
            if hit and name not in ALLOWED_TORCH_CALLS:
                yield self.finding("forbidden_op", node, f"calls {name}")

    def _attribute(self, node: ast.Attribute) -> Iterator[Finding]:
        if node.attr in _FRAME_ATTRS:
            yield self.finding("harness_introspection", node, f"uses .{node.attr} (frames, globals or builtins)")
            return
        name = self.resolve(node)
        if _matches(name, ("os.environ", "os.environb", "posix.environ")):
            yield self.finding("environment_access", node, f"uses {name}")
        elif _matches(name, ("sys.modules", "sys._getframe", "sys.meta_path", "sys.path_hooks", "sys._current_frames")):
            yield self.finding("harness_introspection", node, f"uses {name}")

    def _assignment(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete) -> Iterator[Finding]:
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and self.resolve(target) in NUMERICS_FLAGS:
                continue
            for element in ast.walk(target):
                if isinstance(element, ast.Attribute):
                    base = self.resolve(element.value)
                    if base and self._is_module_name(base):
                        yield from self._patched(node, base, element.attr, how="assigns")
                elif isinstance(element, ast.Subscript):
                    base = self.resolve(element.value)
                    if _matches(base, ("os.environ", "sys.modules", "sys.path", "builtins")):
                        rule = "environment_access" if base.startswith("os.") else "harness_introspection"
                        yield self.finding(rule, node, f"writes {base}[...]")

    def _patched(self, node: ast.AST, target: str | None, attr: str | None, *, how: str) -> Iterator[Finding]:
        if not target:
            return
        full = f"{target}.{attr}" if attr else target
        if _matches(full, _TIMER_TARGETS) or (attr in _TIMER_NAMES and self._is_module_name(target)):
            yield self.finding("timer_monkeypatch", node, f"{how} {full}")
        elif self._is_module_name(target):
            yield self.finding("harness_introspection", node, f"{how} {full} (patches a library or the harness)")

    def _is_module_name(self, dotted: str) -> bool:
        return dotted.split(".")[0] in self.module_roots

    def _is_module_ref(self, node: ast.expr) -> bool:
        name = self.resolve(node)
        return bool(name) and self._is_module_name(name)

    def _class(self, node: ast.ClassDef) -> Iterator[Finding]:
        for base in node.bases:
            name = self.resolve(base)
            if _matches(name, _TENSOR_BASES):
                yield self.finding("tensor_subclass", node, f"class {node.name} subclasses {name}")
        body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if node.bases and all(isinstance(s, ast.Pass) for s in body):
            names = [self.resolve(b) or "" for b in node.bases]
            if any(n.split(".")[-1] in ("Model", "Reference", "ReferenceModel") for n in names):
                yield self.finding("reference_fallback", node, f"class {node.name} only inherits the reference")

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[Finding]:
        if node.name in _SUBCLASS_DEFS:
            yield self.finding("tensor_subclass", node, f"defines {node.name}")
        if node.name in self.entry_points or node.name == "forward":
            for decorator in node.decorator_list:
                name = self.resolve(decorator)
                if _matches(name, _CACHE_DECORATORS):
                    yield self.finding("output_caching", node, f"the entry point {node.name} is memoised by {name}")
        if isinstance(node, ast.AsyncFunctionDef):
            yield self.finding("thread_injection", node, "async functions run later than the call")

    def _try(self, node: ast.Try) -> Iterator[Finding]:
        for handler in node.handlers:
            for element in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
                if not isinstance(element, ast.Call):
                    continue
                name = self.resolve(element.func) or ""
                method = element.func.attr if isinstance(element.func, ast.Attribute) else ""
                library = (name.startswith("torch.") and name not in ALLOWED_TORCH_CALLS) or (
                    _matches(name, self.forbidden) if self.forbidden else False
                )
                if library or (method in _LIBRARY_METHODS and not name.startswith(("triton.", "tl."))):
                    yield self.finding("reference_fallback", element, f"the except handler computes with {name}")
                    return

    def _string(self, node: ast.Constant) -> Iterator[Finding]:
        text = node.value
        if len(text) < 4 or id(node) in self.docstrings:
            return
        if _STREAM_SOURCE.search(text):
            yield self.finding("stream_use", node, "the CUDA/C++ source creates or waits on other streams or threads")
        if _ENV_SOURCE.search(text):
            yield self.finding("environment_access", node, "the source reads the environment")
        if _RESULT_SOURCE.search(text):
            yield self.finding("result_forgery", node, f"names a harness file or channel ({text[:60]!r})")
        if _SHADOW_SOURCE.search(text) and not text.lstrip().startswith(("#include", "//")):
            yield self.finding("harness_introspection", node, f"names a file that shadows a module ({text[:60]!r})")
        if _PIP_SOURCE.search(text):
            yield self.finding("subprocess_or_network", node, f"installs a package or names a URL ({text[:60]!r})")
        if re.search(r"/proc/(self|\d+)/(mem|maps|fd)|/dev/mem", text):
            yield self.finding("harness_introspection", node, "reads process memory or descriptors")

    def _open(self, node: ast.Call) -> Iterator[Finding]:
        mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
        writes = isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wax+")
        path = node.args[0]
        if isinstance(path, ast.Constant) and isinstance(path.value, int):
            yield self.finding("result_forgery", node, f"opens file descriptor {path.value}")
        elif writes:
            yield self.finding("result_forgery", node, "writes a file (candidates may only compute)")

    # -- output caching -------------------------------------------------------------------------------------------
    def _caching(self) -> Iterator[Finding]:
        """A persistent container (module level, ``global`` or a mutable default) looked up or filled with a key
        derived from an input's identity or content (data_ptr, id, hash, bytes, hashlib...), or the input itself."""
        if not self.containers:
            return
        for function in ast.walk(self.tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            params = {a.arg for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs}
            params -= self.containers
            tainted = set(params)
            for _ in range(3):  # propagate through local assignments
                for node in ast.walk(function):
                    if isinstance(node, ast.Assign) and self._fingerprint(node.value, tainted, params):
                        for target in node.targets:
                            tainted.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            keyed = {n for n in tainted if n not in params}
            for node in ast.walk(function):
                key = self._container_key(node)
                if key is None:
                    continue
                container, expr = key
                if self._fingerprint(expr, keyed, params) or self._is_input(expr, params):
                    yield self.finding("output_caching", node, f"{container} is keyed by an input's identity or content")
                    return

    def _container_key(self, node: ast.AST) -> tuple[str, ast.expr] | None:
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in self.containers:
            return node.value.id, node.slice
        if isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, ast.Name) and right.id in self.containers:
                    return right.id, node.left
                if isinstance(op, (ast.Is, ast.Eq, ast.IsNot, ast.NotEq)):
                    sides = [node.left, right]
                    for i, side in enumerate(sides):
                        if isinstance(side, ast.Name) and side.id in self.containers:
                            return side.id, sides[1 - i]
                        if isinstance(side, ast.Subscript) and isinstance(side.value, ast.Name) and (
                            side.value.id in self.containers
                        ):
                            return side.value.id, sides[1 - i]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in self.containers
            and node.func.attr in ("get", "setdefault", "pop", "__contains__", "__getitem__", "__setitem__", "add",
                                   "append", "update")  # fmt: skip
            and node.args
        ):
            return node.func.value.id, node.args[0]
        return None

    def _fingerprint(self, expr: ast.AST, tainted: set[str], params: set[str]) -> bool:
        for node in ast.walk(expr):
            if isinstance(node, ast.Name) and node.id in tainted and node.id not in params:
                return True
            if isinstance(node, ast.Call):
                name = self.resolve(node.func) or ""
                if _matches(name, _FINGERPRINT_CALLS):
                    return True
                if isinstance(node.func, ast.Attribute) and node.func.attr in _FINGERPRINT_METHODS:
                    if any(isinstance(n, ast.Name) and n.id in params | tainted for n in ast.walk(node.func.value)):
                        return True
                if self.is_builtin(node.func, _FINGERPRINT_BUILTINS) and any(
                    self._is_input(a, params) or self._fingerprint(a, tainted, params) for a in node.args
                ):
                    return self.is_builtin(node.func, frozenset({"id", "hash"})) is not None or any(
                        self._fingerprint(a, tainted, params) for a in node.args
                    )
            if isinstance(node, ast.Attribute) and node.attr in _FINGERPRINT_METHODS and isinstance(node.value, ast.Name):
                if node.value.id in params:
                    return True
        return False

    @staticmethod
    def _is_input(expr: ast.AST, params: set[str]) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in params
        if isinstance(expr, ast.Tuple):
            return any(isinstance(e, ast.Name) and e.id in params for e in expr.elts)
        return False


__all__ = ["ALLOWED_TORCH_CALLS", "RULES", "TASK_FORBIDDEN_CALLS", "Finding", "check_source", "scan"]
