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

Honest leaderboard patterns the rules let through (the corpus in ``tests/tools/honest/`` keeps them honest), each
narrowed to the harmless form so the nearby hack is still caught:

- ``threading.Lock`` / ``RLock`` (a lazy ``load_inline`` build guarded by a lock): ``import threading`` passes when
  every use of the module is ``.Lock``/``.RLock`` (``SAFE_THREADING``); any other use (``Thread``, ``Timer``,
  ``getattr(threading, ...)``, the module passed around) or no use at all is still ``thread_injection``.
- Build variables (``BUILD_ENV_VARS``: ``TORCH_CUDA_ARCH_LIST``, ``MAX_JOBS``, nvcc flags) read, tested or set by a
  constant name; any other key, a computed key, or the environment as a whole is still ``environment_access``.
- Derived weights cached in the weights dict under a constant key. ``output_caching`` now also follows the names
  bound to an input (``x, mask, weights, config = data``, ``x.contiguous()``) and the input dicts themselves: keyed
  by an input's identity or content, the entry point returning what it stored (``w[k] = y; ... return w[k]``) or an
  input dict's value under a key the module stores (``return weights["_out"]``) is refused.
- ``functools.lru_cache``/``cache`` on helpers of ints: still refused on the entry point, and now also on a function
  annotated to take a tensor or called with an input (or its identity) — lru_cache keys tensors by identity. A
  helper's parameter holds a tensor when annotated so, used through a tensor-only attribute, or passed one by a
  caller.
- A top-level ``if __name__ == "__main__":`` self-test may call the op the task forbids (it never runs on import),
  unless the module binds ``__name__`` itself.
- Assignments are judged by what they store to: ``y[torch.arange(n)] = 0`` and ``cache[(n, torch.float16)] = t``
  write ``y`` and ``cache``, not ``torch``; writing into a module's table (``torch.x.__dict__[k] = f``) still patches
  it.
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
SAFE_THREADING = frozenset({"Lock", "RLock"})
"""The only names of ``threading`` a candidate may use: locks start nothing (a lazy build guarded by a Lock is a
common leaderboard pattern). Any other use of the module (``Thread``, ``Timer``, ``getattr(threading, ...)``, passing
the module around) keeps ``import threading`` a ``thread_injection``."""
BUILD_ENV_VARS = frozenset({"TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "TORCH_NVCC_FLAGS", "NVCC_APPEND_FLAGS",
                            "NVCC_PREPEND_FLAGS", "TRITON_PRINT_AUTOTUNING"})  # fmt: skip
"""Build variables a candidate may read, test or set, by a constant name only (``os.environ[NAME]``, ``NAME in
os.environ``, ``os.environ.get/setdefault(NAME, ...)``, ``os.getenv(NAME)``): they steer nvcc and extension builds,
carry no secret and cannot touch the harness. Everything else about the environment stays ``environment_access``."""
_SHAPE_ATTRS = frozenset({"shape", "size", "dtype", "device", "ndim", "dim", "numel", "nelement", "stride",
                          "is_cuda", "is_contiguous", "element_size", "itemsize", "layout", "get", "keys", "items",
                          "values", "__len__"})  # fmt: skip
"""Attributes that turn an input into a description of it (ints, dtypes, devices) or into a dict lookup: a name bound
through one of them is not an alias of the input tensor."""
_TENSOR_ATTRS = frozenset({"shape", "dtype", "device", "is_cuda", "contiguous", "view", "reshape", "stride", "data_ptr",
                           "numel", "size", "float", "half", "to", "permute", "transpose", "clone", "cuda", "cpu",
                           "ndim", "unsqueeze", "squeeze", "expand", "flatten", "t", "mT", "is_contiguous"})  # fmt: skip
"""Attributes only tensors have: a helper's parameter used through one of them holds a tensor (an int does not)."""


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
        self.parents: dict[int, ast.AST] = {
            id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)
        }
        self.threading_misuse = self._threading_misuse()
        self.self_test = self._self_test_nodes()
        self.cached_functions = self._cached_functions()

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

    def _threading_misuse(self) -> str | None:
        """Why the module's use of ``threading`` is more than locks (None when it only uses Lock/RLock): every load
        of a name bound to the module must be ``.Lock`` or ``.RLock`` of it, and there must be at least one."""
        uses = 0
        for node in ast.walk(self.tree):
            if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
                continue
            if self.aliases.get(node.id) != "threading":
                continue
            parent = self.parents.get(id(node))
            if isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in SAFE_THREADING:
                uses += 1
                continue
            used = f"threading.{parent.attr}" if isinstance(parent, ast.Attribute) else "the threading module itself"
            return f"uses {used} at line {node.lineno}"
        return None if uses else "without using its Lock or RLock"

    def _self_test_nodes(self) -> set[int]:
        """Nodes inside a top-level ``if __name__ == "__main__":`` body: a self-test that never runs when the
        harness imports the module, so it may call the library op it checks against. Empty when the module binds
        ``__name__`` itself (which could make the block run)."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Name) and node.id == "__name__" and not isinstance(node.ctx, ast.Load):
                return set()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == "__name__":
                return set()
            if isinstance(node, (ast.Import, ast.ImportFrom)) and any(a.asname == "__name__" for a in node.names):
                return set()
            if isinstance(node, ast.arg) and node.arg == "__name__":
                return set()
        inside: set[int] = set()
        for stmt in self.tree.body:
            if isinstance(stmt, ast.If) and self._is_main_test(stmt.test):
                for part in stmt.body:
                    inside.update(id(n) for n in ast.walk(part))
        return inside

    @staticmethod
    def _is_main_test(test: ast.expr) -> bool:
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
            return False
        sides = [test.left, test.comparators[0]]
        names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
        consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
        return len(names) == 1 and len(consts) == 1

    def _cached_functions(self) -> dict[str, ast.AST]:
        """Functions memoised by functools.lru_cache/cache (decorated, or wrapped: ``f = functools.cache(g)``)."""
        cached: dict[str, ast.AST] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(_matches(self.resolve(d), _CACHE_DECORATORS) for d in node.decorator_list):
                    cached[node.name] = node
            elif (
                isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and _matches(self.resolve(node.value.func), _CACHE_DECORATORS)
            ):  # fmt: skip
                cached.update((t.id, node) for t in node.targets if isinstance(t, ast.Name))
        return cached

    def _build_var(self, node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and node.value in BUILD_ENV_VARS

    def _env_use_allowed(self, node: ast.AST) -> bool:
        """``node`` (an ``os.environ`` or ``os.environ.get/setdefault`` reference) is one of the allowed forms on a
        constant build variable: ``os.environ[NAME]`` (read or write), ``NAME in os.environ``, or a call of
        ``os.environ.get/setdefault(NAME, ...)``."""
        name = self.resolve(node)
        parent = self.parents.get(id(node))
        if name in ("os.environ.get", "os.environ.setdefault"):
            return (
                isinstance(parent, ast.Call) and parent.func is node and bool(parent.args)
                and self._build_var(parent.args[0])
            )  # fmt: skip
        if name != "os.environ":
            return False
        if isinstance(parent, ast.Subscript) and parent.value is node:
            return not isinstance(parent.ctx, ast.Del) and self._build_var(parent.slice)
        if isinstance(parent, ast.Compare) and len(parent.ops) == 1 and parent.comparators[0] is node:
            return isinstance(parent.ops[0], (ast.In, ast.NotIn)) and self._build_var(parent.left)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return self._env_use_allowed(parent)
        return False

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
            if node.module == "threading":  # locks only: judged name by name
                names = [n for n in names[:-1] if n.removeprefix("threading.") not in SAFE_THREADING]
        else:
            names = [a.name for a in node.names]
            if "threading" in names and self.threading_misuse is None:
                names.remove("threading")  # only threading.Lock / RLock are used
            elif "threading" in names:
                yield self.finding("thread_injection", node, f"imports threading {self.threading_misuse} "
                                   "(only threading.Lock and RLock may be used)")
                names.remove("threading")
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
        if _matches(name, _ENV_CALLS) and not (
            (name == "os.getenv" and node.args and self._build_var(node.args[0]))
            or (isinstance(node.func, ast.Attribute) and self._env_use_allowed(node.func))
        ):
            yield self.finding("environment_access", node, f"calls {name}")
        if self.forbidden and not name.startswith("triton.") and id(node) not in self.self_test:
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
        if _matches(name, ("os.environ", "os.environb", "posix.environ")) and not self._env_use_allowed(node):
            yield self.finding("environment_access", node, f"uses {name}")
        elif _matches(name, ("sys.modules", "sys._getframe", "sys.meta_path", "sys.path_hooks", "sys._current_frames")):
            yield self.finding("harness_introspection", node, f"uses {name}")

    def _assignment(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete) -> Iterator[Finding]:
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and self.resolve(target) in NUMERICS_FLAGS:
                continue
            for element in ast.walk(target):
                # only what is stored to: ``y[torch.arange(n)] = 0`` or ``cache[(n, torch.float16)] = t`` write y
                # and cache, not torch
                if not isinstance(getattr(element, "ctx", None), (ast.Store, ast.Del)):
                    continue
                if isinstance(element, ast.Attribute):
                    base = self.resolve(element.value)
                    if base and self._is_module_name(base):
                        yield from self._patched(node, base, element.attr, how="assigns")
                elif isinstance(element, ast.Subscript):
                    base = self.resolve(element.value)
                    if _matches(base, ("os.environ", "sys.modules", "sys.path", "builtins")):
                        if base == "os.environ" and self._env_use_allowed(element.value):
                            continue
                        rule = "environment_access" if base.startswith("os.") else "harness_introspection"
                        yield self.finding(rule, node, f"writes {base}[...]")
                    elif base and self._is_module_name(base):  # torch.x.__dict__["f"] = ... patches torch
                        yield from self._patched(node, base, None, how="writes into")

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
        elif node.name in self.cached_functions:
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            for arg in arguments + [a for a in (node.args.vararg, node.args.kwarg) if a is not None]:
                if arg.annotation is not None and self._is_tensor_annotation(arg.annotation):
                    yield self.finding("output_caching", node, f"{node.name} is memoised but takes a tensor "
                                       f"({arg.arg}): lru_cache keys tensors by identity")
                    break
        if isinstance(node, ast.AsyncFunctionDef):
            yield self.finding("thread_injection", node, "async functions run later than the call")

    def _is_tensor_annotation(self, annotation: ast.expr) -> bool:
        for node in ast.walk(annotation):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "Tensor" in node.value:
                return True
            if isinstance(node, (ast.Name, ast.Attribute)) and (self.resolve(node) or "").split(".")[-1] == "Tensor":
                return True
        return False

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
        """Outputs replayed from a cache instead of computed. In every function, with *inputs* its parameters and
        the names bound to them or to views of them (``x, mask, weights, config = data``, ``x2 = x.contiguous()``;
        never through ``.shape``/``.dtype``/``.device``/``[...]``, which describe or look up):

        - a persistent container (module level, ``global`` or a mutable default) or an input container (the
          weights dict) looked up or filled with a key derived from an input's identity or content (data_ptr, id,
          hash, bytes, hashlib...), or with the input itself;
        - a memoised function (``functools.lru_cache``/``cache``) called with an input or such a key;
        - the entry point returning, straight out of a container, the value it stored there (``C[k] = y; ...;
          return C[k]``), or a value an input container holds under a constant key the module stores into it
          (``weights["_out"]``). Derived *weights* cached in the weights dict under a constant key are fine."""
        functions = [f for f in ast.walk(self.tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
        scopes = []
        stored_keys: set[object] = set()
        tensors = self._tensor_params(functions)
        for function in functions:
            params = {a.arg for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs}
            params -= self.containers
            inputs = params | self._input_aliases(function, params)
            scopes.append((function, inputs))
            for _container, key, _value, _node in self._input_stores(function, inputs):
                if isinstance(key, ast.Constant):
                    stored_keys.add(key.value)
        for function, inputs in scopes:
            tainted = set(inputs)
            for _ in range(3):  # propagate through local assignments
                for node in ast.walk(function):
                    if isinstance(node, ast.Assign) and self._fingerprint(node.value, tainted, inputs):
                        for target in node.targets:
                            tainted.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            keyed = {n for n in tainted if n not in inputs}
            held = tensors[id(function)]
            yield from self._keyed_caches(function, inputs, keyed, held | self._input_aliases(function, held))
            if function.name in self.entry_points:
                yield from self._replayed_outputs(function, inputs, stored_keys)

    def _keyed_caches(self, function: ast.AST, inputs: set[str], keyed: set[str], tensors: set[str]) -> Iterator[Finding]:
        for node in ast.walk(function):
            key = self._container_key(node)
            if key is not None:
                container, expr = key
                if self._fingerprint(expr, keyed, inputs) or self._is_input(expr, inputs):
                    yield self.finding("output_caching", node, f"{container} is keyed by an input's identity or content")
                    return
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.cached_functions:
                for arg in list(node.args) + [k.value for k in node.keywords]:
                    if self._fingerprint(arg, keyed, inputs) or self._is_input(arg, tensors):
                        yield self.finding("output_caching", node, f"{node.func.id} is memoised and called with an "
                                           "input or its identity (lru_cache keys tensors by identity)")
                        return
        for container, key, _value, node in self._input_stores(function, inputs):
            if self._fingerprint(key, keyed, inputs) or self._is_input(key, inputs):
                yield self.finding("output_caching", node, f"{container} (an input) is keyed by an input's identity "
                                   "or content")
                return

    def _replayed_outputs(self, function: ast.AST, inputs: set[str], stored_keys: set[object]) -> Iterator[Finding]:
        returns = [n for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None]
        returned = {root for r in returns if (root := self._chain_root(r.value)) is not None}
        holders = self.containers | inputs
        stored_outputs: set[str] = set()  # containers the entry point puts its own output in
        for node in ast.walk(function):
            if isinstance(node, ast.Assign):
                names = {t.id for t in node.targets if isinstance(t, ast.Name)}
                value_root = self._chain_root(node.value)
                for target in node.targets:
                    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and (
                        target.value.id in holders and (names & returned or value_root in returned)
                    ):
                        stored_outputs.add(target.value.id)
            elif (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id in holders
                and node.func.attr in ("setdefault", "__setitem__", "update") and len(node.args) >= 2
                and self._chain_root(node.args[1]) in returned
            ):  # fmt: skip
                stored_outputs.add(node.func.value.id)
        for ret in returns:
            lookup = self._lookup(ret.value)
            if lookup is None:
                continue
            container, key = lookup
            if container in stored_outputs:
                yield self.finding("output_caching", ret, f"returns the output it stored in {container}")
                return
            if container in inputs and isinstance(key, ast.Constant) and key.value in stored_keys:
                yield self.finding("output_caching", ret, f"returns {container}[{key.value!r}], a value cached in an "
                                   "input container")
                return

    def _tensor_params(self, functions: list) -> dict[int, set[str]]:
        """Per function, the parameters that hold tensors (or the entry point's data): all of an entry point's; a
        helper's when annotated as a tensor, used through a tensor-only attribute, or passed a tensor by a caller."""
        by_name = {f.name: f for f in functions}
        held: dict[int, set[str]] = {}
        for f in functions:
            args = f.args.posonlyargs + f.args.args + f.args.kwonlyargs
            names = {a.arg for a in args}
            if f.name in self.entry_points:
                held[id(f)] = set(names)
                continue
            held[id(f)] = {a.arg for a in args if a.annotation is not None and self._is_tensor_annotation(a.annotation)}
            held[id(f)] |= {
                n.value.id for n in ast.walk(f)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in names
                and n.attr in _TENSOR_ATTRS
            }  # fmt: skip
        for _ in range(3):  # callers pass tensors on
            for f in functions:
                inputs = held[id(f)] | self._input_aliases(f, held[id(f)])
                for call in ast.walk(f):
                    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                        continue
                    callee = by_name.get(call.func.id)
                    if callee is None:
                        continue
                    positional = [a.arg for a in callee.args.posonlyargs + callee.args.args]
                    for name, arg in zip(positional, call.args):
                        if self._is_input(arg, inputs):
                            held[id(callee)].add(name)
                    for kw in call.keywords:
                        if kw.arg and self._is_input(kw.value, inputs):
                            held[id(callee)].add(kw.arg)
        return held

    def _input_stores(self, function: ast.AST, inputs: set[str]) -> Iterator[tuple[str, ast.expr, ast.expr, ast.AST]]:
        """(container, key, value, node) for each write into an input container: ``w[k] = v``, ``w.setdefault(k, v)``."""
        for node in ast.walk(function):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    for element in ast.walk(target):
                        if (
                            isinstance(element, ast.Subscript) and isinstance(element.ctx, ast.Store)
                            and isinstance(element.value, ast.Name) and element.value.id in inputs
                        ):  # fmt: skip
                            yield element.value.id, element.slice, node.value, node
            elif (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id in inputs
                and node.func.attr in ("setdefault", "__setitem__") and len(node.args) >= 2
            ):  # fmt: skip
                yield node.func.value.id, node.args[0], node.args[1], node

    def _input_aliases(self, function: ast.AST, params: set[str]) -> set[str]:
        aliases: set[str] = set()
        for _ in range(3):
            for node in ast.walk(function):
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                    targets, value = [node.target], node.value
                else:
                    continue
                if self._chain_root(value, stop_at_lookup=True) in params | aliases:
                    for target in targets:
                        aliases.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        return aliases

    @staticmethod
    def _chain_root(expr: ast.AST, *, stop_at_lookup: bool = False) -> str | None:
        """The name at the root of an attribute/method chain (``y.float().view(...)`` -> ``y``); None through a
        describing attribute (``x.shape``) or, with ``stop_at_lookup``, through a subscript."""
        node = expr
        while True:
            if isinstance(node, ast.Name):
                return node.id
            if isinstance(node, ast.Attribute):
                if node.attr in _SHAPE_ATTRS:
                    return None
                node = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                node = node.func
            elif isinstance(node, ast.Subscript) and not stop_at_lookup:
                node = node.value
            else:
                return None

    def _lookup(self, expr: ast.AST) -> tuple[str, ast.expr] | None:
        """(container, key) when ``expr`` is ``C[k]`` or ``C.get(k)``/``C.setdefault(k, ...)``/``C.pop(k)``, possibly
        followed by method calls (``C[k].clone()``)."""
        node = expr
        while True:
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
                return node.value.id, node.slice
            if (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.attr in ("get", "setdefault", "pop")
                and node.args
            ):  # fmt: skip
                return node.func.value.id, node.args[0]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                node = node.func.value
            elif isinstance(node, ast.Attribute):
                node = node.value
            else:
                return None

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
