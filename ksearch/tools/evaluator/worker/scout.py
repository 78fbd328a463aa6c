"""The compile scout: a second process of the same candidate that compiles its Triton kernels ahead of the worker.

A Triton candidate's evaluation is often bound by its own JIT compile: each new specialisation (shapes, alignments,
constexprs) costs ~0.5 s of front end, LLVM, ``ptxas`` and a launcher build, one after another, at the first call
that needs it (a TriMul kernel of ours needs 15 for the 18 tests and 7 benchmarks, ~6.5 s of a ~9 s correctness
pass). Upstream's ``benchmark`` process gets them from its ``test`` process's cache; we cannot share a cache across
candidates. What we can do is find them early and build them in parallel, on every core of the node: an
``@triton.autotune`` kernel with many configs, one compile each, is where this pays most.

The scout imports the candidate with Triton's launch path turned into "compile only" (``warmup=True``) under
Triton's ``AsyncCompileMode`` with a thread pool, then calls the candidate once on inputs of every test (and, when
timed, benchmark) config. No kernel runs, so the calls produce garbage, but every launch the candidate's host code
reaches submits its specialisation to the pool; ``@triton.autotune`` submits every config instead of benchmarking
them. The binaries land in a Triton cache shared by this evaluation's two processes only (the worker finds them
there at its own first call, or compiles a specialisation itself if the scout has not built it yet).

Order, so that the two never hold a config's tensors on the GPU at once: the session sends the worker its request
only once the scout has made its calls and given its cached GPU memory back (phase ``compile``); the compiles, on
the CPU, then overlap the worker's correctness pass.

Why a separate process and not a dry pass in the worker: the garbage results could poison the candidate's own state
(a cache keyed by shape filled from a skipped launch) or its CUDA context (an index read from an unwritten buffer),
and nothing of the scout may reach the worker but compiled binaries. Trust: the scout runs the same untrusted
candidate as the worker, with public seeds (never the evaluation's salt) and no staging buffer; its report is
diagnostics only; the session stops it before the worker times anything, so it cannot share the GPU or CPU with a
timed call.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

SCOUT_THREADS = 32
"""At most this many compile threads. Triton's compile runs outside the GIL for most of its time (MLIR and LLVM in
C++, ``ptxas`` and the launcher's C compiler in subprocesses), so threads use the node's cores: an autotuned kernel's
configs, each its own compile, are built side by side instead of one after another as in the candidate's process."""


def compile_threads() -> int:
    """One compile thread per CPU core this process may use (at most ``SCOUT_THREADS``)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(SCOUT_THREADS, cores))


@contextlib.contextmanager
def scouting(threads: int) -> Iterator[None]:
    """While active, every Triton launch compiles its kernel (in a pool of ``threads`` when Triton has
    ``AsyncCompileMode``) instead of running it; on exit, waits for every compile. A compile error is left for the
    worker to meet and report."""
    from triton.runtime import autotuner
    from triton.runtime.jit import JITFunction

    original_run = JITFunction.run
    original_init = autotuner.Autotuner.__init__
    original_bench = getattr(autotuner.Autotuner, "_bench", None)

    def compile_only(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["warmup"] = True
        return original_run(self, *args, **kwargs)

    def no_tuning_cache(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self.cache_results = False  # a choice made on skipped launches must never reach the worker's cache

    def compile_config(self: Any, *args: Any, config: Any, **meta: Any) -> list[float]:
        with contextlib.suppress(Exception):
            self.fn.run(*args, **dict(meta, **config.all_kwargs()))
        return [0.0, 0.0, 0.0]

    JITFunction.run = compile_only  # type: ignore[method-assign]
    autotuner.Autotuner.__init__ = no_tuning_cache  # type: ignore[method-assign]
    if original_bench is not None:
        autotuner.Autotuner._bench = compile_config  # type: ignore[attr-defined]
    pool, mode = _async_mode(threads)
    try:
        if mode is not None:
            mode.__enter__()
        try:
            with eager_torch_compile():
                yield
        finally:
            if mode is not None:
                mode.__exit__(None, None, None)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
        JITFunction.run = original_run  # type: ignore[method-assign]
        autotuner.Autotuner.__init__ = original_init  # type: ignore[method-assign]
        if original_bench is not None:
            autotuner.Autotuner._bench = original_bench  # type: ignore[attr-defined]


@contextlib.contextmanager
def eager_torch_compile() -> Iterator[None]:
    """``torch.compile`` returns what it is given while active: code the candidate compiles with Inductor runs eagerly
    in the scout (its garbage calls need no compiled graph, and Inductor's own kernels never go through the launches
    the scout turns into compiles), so the scout's calls stay quick and still reach the candidate's Triton kernels."""
    import torch

    original = torch.compile

    def passthrough(model: Any = None, *args: Any, **kwargs: Any) -> Any:
        return model if model is not None else (lambda fn: fn)

    torch.compile = passthrough  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.compile = original  # type: ignore[assignment]


def _async_mode(threads: int) -> tuple[Any, Any]:
    """Triton's ``AsyncCompileMode`` over a thread pool, or (None, None) where this Triton lacks it (the scout then
    compiles one kernel at a time, still ahead of the worker)."""
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return None, None
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ksearch-scout")
    return pool, AsyncCompileMode(pool, ignore_errors=True)


def dry_pass(task: Any, module: Any, configs: list[Any], device: str) -> tuple[int, int]:
    """Call the candidate once per config (launches compile only); how many calls returned and how many raised.
    Inputs are made and dropped one config at a time."""
    returned = raised = 0
    for config in configs:
        try:
            inputs = task.make_inputs(config, device)
            fn = task.prepare(module, config, device)
            fn(*task.call_args(inputs, config))
            returned += 1
        except Exception:  # noqa: BLE001 - garbage in, anything out: the worker meets real errors itself
            raised += 1
        finally:
            inputs = None  # noqa: F841 - drop this config's tensors before the next is made
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
    return returned, raised
