"""The words the integrity rules know: rule names, and the module, call, attribute and text patterns they match
about the process (threads, processes, introspection, timers, the environment, writes, dynamic and native code);
the words about where a kernel's result comes from (library operations, graphs, subclasses, caching) are in
``compute_vocabulary``.

Tables only (plus ``matches``, the one way a dotted name is compared with them), so a rule can be read and widened
without touching the AST walk. Dotted names are full import paths (``torch.cuda.Event``), matched after the
scanner has resolved import aliases.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ksearch.tools.integrity.compute_vocabulary import GRAPH_CALLS, SUBCLASS_CALLS

RULES: dict[str, str] = {
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
    "reference_op": "calling the PyTorch op the reference computes with makes PyTorch do the work (reference_ops)",
    "no_custom_kernel": "a KernelBench solution must launch a custom kernel of its own (reference_ops)",
    "forbidden_op": "the task forbids this library operation: the kernel must compute it itself",
    "result_forgery": "writing to the harness's result files or status pipe forges the verdict",
    "interpreter_reach": "reaching the interpreter (sys, gc, frames, dunders, private module names, computed "
    "attribute names) by any route is not allowed: a kernel uses torch, triton and the like through their public names",
    "unlisted_import": "a kernel imports compute libraries only (torch, triton, numpy, math and the like)",
}
"""Every rule name, in priority order, with the reason shown to the LLM."""


THREAD_MODULES = (
    "threading",
    "_thread",
    "multiprocessing",
    "concurrent",
    "asyncio",
    "signal",
    "sched",
    "torch.multiprocessing",
    "torch.distributed",
    "dummy_threading",
    "_posixsubprocess",
    "torch._inductor.async_compile",
    "torch._inductor.compile_worker",
    "torch.utils.data",
)
"""Also torch's own pools: the worker lets threads that torch starts for itself live (``torch.compile``), so a
candidate may not hand its work to them."""
TORCH_POOLS = ("torch._inductor.async_compile", "torch._inductor.compile_worker", "torch.utils.data")
"""Reached through ``import torch`` alone (attribute chains), so they are matched at the call too."""
PROCESS_MODULES = (
    "subprocess",
    "socket",
    "urllib",
    "requests",
    "http",
    "httpx",
    "aiohttp",
    "pip",
    "ensurepip",
    "ftplib",
    "smtplib",
    "telnetlib",
    "xmlrpc",
    "pty",
    "webbrowser",
    "socketserver",
    "urllib3",
    "paramiko",
    "pexpect",
    "sh",
    "plumbum",
    "ssl",
    "select",
    "selectors",
)
PROCESS_CALLS = (
    "os.system",
    "os.popen",
    "os.exec",
    "os.spawn",
    "os.fork",
    "os.posix_spawn",
    "os.startfile",
    "os.kill",
    "os.setsid",
    "os.setpgid",
    "os.getppid",
    "torch.hub",
    "os.pipe",
)
"""Raw prefixes: ``os.exec`` also matches ``os.execv``."""
INTROSPECTION_MODULES = (
    "gc",
    "inspect",
    "ctypes",
    "cffi",
    "builtins",
    "__builtin__",
    "tracemalloc",
    "mmap",
    "ksearch",
    "resource",
    "_ctypes",
    "objgraph",
    "pympler",
    "torch._dynamo.eval_frame",
    "torch.utils._python_dispatch",
)
INTROSPECTION_CALLS = (
    "sys.modules",
    "sys._getframe",
    "sys._current_frames",
    "sys.settrace",
    "sys.setprofile",
    "sys.meta_path",
    "sys.path_hooks",
    "sys.path_importer_cache",
    "sys.path",
    "sys.addaudithook",
    "threading.settrace",
    "torch._C._cuda",
)
FRAME_ATTRS = frozenset(
    {
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_code",
        "tb_frame",
        "tb_next",
        "gi_frame",
        "cr_frame",
        "ag_frame",
        "__globals__",
        "__subclasses__",
        "__builtins__",
        "__closure__",
        "__code__",
        "__self__",
        "__loader__",
        "__spec__",
        "_getframe",
    }
)
TIMER_TARGETS = (
    "torch.cuda.Event",
    "torch.cuda.synchronize",
    "torch.cuda.elapsed_time",
    "torch.cuda.Stream",
    "torch.cuda.current_stream",
    "torch.cuda.event",
    "torch.Event",
    "torch.cuda.streams",
    "torch.synchronize",
    "torch.cuda.graphs",
    "time",
    "triton.testing",
    "triton.runtime",
    "timeit",
    "torch.utils.benchmark",
    "torch.cuda.nvtx",
    "torch.profiler",
    "statistics",
    "math",
)
TIMER_NAMES = frozenset(
    {
        "elapsed_time",
        "synchronize",
        "record",
        "perf_counter",
        "perf_counter_ns",
        "time",
        "time_ns",
        "monotonic",
        "monotonic_ns",
        "do_bench",
        "do_bench_cudagraph",
        "query",
        "wait",
        "median",
        "fmean",
        "mean",
        "stdev",
        "process_time",
    }
)
THREAD_SOURCE = re.compile(r"cudaLaunchHostFunc|cudaStreamAddCallback|std::thread|pthread_create|std::async")
"""Host threads and host callbacks in CUDA/C++ source: work that runs after the call returns. (Side streams are not
refused in the source: a kernel may use them when it joins them to the current stream; work left running on one is
caught at run time, by the deferred-work check and by the parent's clock.)"""
GRAPH_SOURCE = re.compile(r"cudaStreamBeginCapture|cudaGraphLaunch|cudaGraphInstantiate")
ENV_CALLS = (
    "os.environ",
    "os.environb",
    "os.getenv",
    "os.getenvb",
    "os.putenv",
    "os.unsetenv",
    "posix.environ",
    "nt.environ",
    "os.confstr",
)
WRITE_CALLS = (
    "os.write",
    "os.pwrite",
    "os.writev",
    "os.open",
    "os.dup2",
    "os.truncate",
    "os.ftruncate",
    "os.replace",
    "os.rename",
    "os.remove",
    "os.unlink",
    "os.symlink",
    "os.link",
    "os.makedirs",
    "os.mkdir",
    "shutil",
    "os.sendfile",
    "os.fdopen",
)
ENV_SOURCE = re.compile(r"/proc/(self|\d+|thread-self)/environ|\bgetenv\s*\(|\benviron\b\s*\[")
DYNAMIC_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "breakpoint"})
DYNAMIC_MODULES = (
    "importlib",
    "runpy",
    "marshal",
    "pickle",
    "cPickle",
    "dill",
    "cloudpickle",
    "shelve",
    "code",
    "codeop",
    "imp",
    "zipimport",
    "pkgutil",
    "types.CodeType",
    "types.FunctionType",
    "pydoc",
)
NATIVE_LOADERS = ("triton.runtime.build", "triton.backends", "torch.utils.cpp_extension.load")
"""Native code built or loaded where the source scanner cannot read it: Triton's C builder (``compile_module_from_src``
compiles and imports any C, a red-team review's route on 2026-11-28), its backends' drivers, extensions built from
files (shared libraries loaded by path are ``reach_lists.DENIED_CALLS``). ``torch.utils.cpp_extension.load_inline``
stays allowed: its sources are strings in the file, judged by the rules on CUDA/C++ source."""
RESULT_SOURCE = re.compile(r"(^|[/\\'\"])(result|request)\.json|\.partial\b|status_fd|KSEARCH_|\.\./io\b|/io/")
SHADOW_SOURCE = re.compile(r"(^|/)(torch|triton|numpy|ksearch|sitecustomize|usercustomize|pydantic)(/|\.py\b)")
PIP_SOURCE = re.compile(r"\bpip3?\s+install\b|\bconda\s+install\b|\bcurl\s|\bwget\s", re.IGNORECASE)
ENTRY_POINTS = ("kernel", "custom_kernel", "forward", "run", "entry", "solve")
"""Entry-point names assumed when the task (and so its ``entry_point``) is unknown."""
SAFE_THREADING = frozenset({"Lock", "RLock"})
"""The only names of ``threading`` a candidate may use: locks start nothing (a lazy build guarded by a Lock is a
common leaderboard pattern). Any other use of the module (``Thread``, ``Timer``, ``getattr(threading, ...)``, passing
the module around) keeps ``import threading`` a ``thread_injection``."""
BUILD_ENV_VARS = frozenset(
    {
        "TORCH_CUDA_ARCH_LIST",
        "MAX_JOBS",
        "TORCH_NVCC_FLAGS",
        "NVCC_APPEND_FLAGS",
        "NVCC_PREPEND_FLAGS",
        "TRITON_PRINT_AUTOTUNING",
    }
)
"""Build variables a candidate may read, test or set, by a constant name only (``os.environ[NAME]``, ``NAME in
os.environ``, ``os.environ.get/setdefault(NAME, ...)``, ``os.getenv(NAME)``): they steer nvcc and extension builds,
carry no secret and cannot touch the harness. Everything else about the environment stays ``environment_access``."""
IMPORT_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("thread_injection", THREAD_MODULES),
    ("subprocess_or_network", PROCESS_MODULES),
    ("harness_introspection", INTROSPECTION_MODULES),
    ("dynamic_code", DYNAMIC_MODULES),
    ("result_forgery", NATIVE_LOADERS),
    ("cuda_graph_replay", GRAPH_CALLS),
    ("tensor_subclass", SUBCLASS_CALLS),
    ("environment_access", ("os.environ", "os.getenv", "os.environb", "os.putenv", "posix")),
    ("harness_introspection", ("sys.modules", "sys._getframe", "sys.settrace", "sys.meta_path")),
    ("subprocess_or_network", ("os.system", "os.popen", "os.fork", "os.exec", "os.spawn", "os.kill")),
)
"""What importing a module (or a name from it) breaks, checked in this order; the first match is reported."""
OS_FUNCTIONS = (
    r"(write|pwrite|pwrite64|writev|pwritev|send|sendto|sendmsg|sendmmsg|sendfile|"
    r"splice|vmsplice|socket|socketpair|connect|getsockopt|setsockopt|getsockname|getpeername|ioctl|fcntl|dup|dup2|"
    r"dup3|open|open64|openat|creat|fopen|fopen64|freopen|fdopen|mmap|mmap64|mprotect|syscall|dlopen|dlsym|dlvsym|"
    r"ptrace|process_vm_readv|process_vm_writev|popen|system|fork|vfork|execv|execve|execvp|execvpe|execl|execlp|"
    r"execle|getppid|prctl|posix_spawn|posix_spawnp|clone|clone3|daemon|setsid|setpgid|setpgrp|kill|killpg|tgkill|"
    r"unshare|setns)"
)
HOST_IO_SOURCE = re.compile(
    r"(?<![\w.>:])(?:(?:std)?::\s*)?\b" + OS_FUNCTIONS + r"\s*\("
    # the same functions named without a call: a macro standing for one, their address taken or assigned (a red-team
    # review of 2026-11-28: ``CAT(op, en)``; these are its neighbours that need no token pasting)
    r"|^[ \t]*#[ \t]*define[ \t]+\w+(?:\([^)\n]*\))?[^\n/]*?(?<![\w.>:])\b" + OS_FUNCTIONS + r"\b(?!\s*\()"
    r"|(?:[&=,({?]|[^:]:)[ \t]*(?:(?:std)?::[ \t]*)?\b" + OS_FUNCTIONS + r"\b[ \t]*(?:[;,)}]|:(?!:))"
    r"|\b(ofstream|ifstream|fstream|filebuf)\b|<fstream>|\bstd::filesystem\b|\bsyscall\b|\b__NR_\w+|\bSYS_\w+"
    r"|\bsysenter\b|\btorch::(save|load|pickle_save|pickle_load)\b",
    re.MULTILINE,
)
"""The operating system called from a CUDA/C++ source: files, descriptors, sockets, processes, system calls, native
libraries. A kernel's host code launches kernels and allocates tensors through torch; these are how it would write on
the harness's channel (a socket the worker holds: a forged ``timed``, found by a red-team review on 2026-11-27) or
read another process's files, from where no rule about Python can look; or start a process that leaves the worker's
process group and outlives it (``posix_spawn``, ``clone``, ``daemon``, ``setsid``: a red-team review of 2026-11-29).
``printf``/``fprintf`` stay allowed (they write on the worker's own standard streams)."""
NATIVE_EVASION_SOURCE = re.compile(r"##")
"""Token pasting in a CUDA/C++ source: ``CAT(wri, te)`` reaches ``write`` without spelling it (found by a red-team
review on 2026-11-28), so no rule on the source's names could see it. A kernel's host code needs none; write the
names out. (The Python C API in C++ is ``reach_lists.PYTHON_C_API``'s.)"""
COMPILER_FLAG_SOURCE = re.compile(
    r"^\s*(?:-D\s*\w+(?:\([^)]*\))?=.*(?<![\w.>:])\b" + OS_FUNCTIONS + r"\b|-include\b|-imacros\b"
    r"|-Wl,.*(?:--wrap|--defsym|-init|-fini|--undefined)\b)"
)
"""A compiler or linker flag of an extension build that brings in what the source's own text does not show: a macro
defined to an operating-system function, a file included ahead of the source, a wrapped or injected symbol."""
C_SOURCE_MARK = re.compile(r"[;{]|#include")
"""A string is judged as C/C++ source only when it has one of these (prose and paths have none)."""
PROC_MEMORY_SOURCE = re.compile(r"/proc/(self|\d+)/(mem|maps|fd)|/dev/mem")
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
COMPILER_SETTINGS = ("torch._inductor.config", "torch._dynamo.config")
"""Compiler settings a kernel may assign at import (``torch._inductor.config.coordinate_descent_tuning = True`` is
common in torch.compile leaderboard files): they change how Inductor builds the candidate's own code."""
COMPILER_SETTINGS_DENIED = (
    "cudagraph",
    "graph_pool",
    "compile_threads",
    "worker",
    "cpp",
    "debug",
    "trace",
    "cache_dir",
)
"""Settings among them that replay recorded work (CUDA graphs), start processes or threads, or write files."""


def matches(name: str | None, prefixes: Iterable[str], *, raw: bool = False) -> str | None:
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
