"""Where an autotuned TriMul kernel's wall time goes in GPU MODE's procedure: Triton's compile, the autotuner's timing
of its configs, Dynamo and Inductor, the rest.

    python bench/autotune_split.py KERNEL.py      (GPU machine, repo root)

Runs upstream's 18 tests and then its 7 benchmarks (``bench/upstream_trimul.py``'s inputs, check and loop) in ONE
plain process with fresh Triton and Inductor caches, and records the time spent in Triton's compile
(``JITFunction._do_compile``), in the autotuner's ``_bench`` less the compiles inside it, and in Dynamo's compiles
(``torch._dynamo.utils.compile_times``). It tells which part of ``ksearch eval``'s ``run`` stage the compile scout can
build in parallel (Triton's compiles) and which it cannot (Inductor's graphs, the autotuner's timing).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="split-triton-"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="split-inductor-"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import upstream_trimul as upstream  # noqa: E402


def instrument() -> dict[str, float]:
    """Wrap Triton's compile and the autotuner's benchmark; the totals accumulate in the returned dict."""
    from triton.runtime import autotuner, jit

    totals = {
        "triton_compile_s": 0.0,
        "triton_compiles": 0,
        "autotune_bench_s": 0.0,
        "config_timings": 0,
        "compile_inside_bench_s": 0.0,
        "keys_tuned": 0,
    }
    inside = {"bench": False}
    compile_, bench, run = jit.JITFunction._do_compile, autotuner.Autotuner._bench, autotuner.Autotuner.run

    def timed_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return compile_(self, *args, **kwargs)
        finally:
            spent = time.perf_counter() - started
            totals["triton_compile_s"] += spent
            totals["triton_compiles"] += 1
            if inside["bench"]:
                totals["compile_inside_bench_s"] += spent

    def timed_bench(self: Any, *args: Any, **kwargs: Any) -> Any:
        inside["bench"], started = True, time.perf_counter()
        try:
            return bench(self, *args, **kwargs)
        finally:
            inside["bench"] = False
            totals["autotune_bench_s"] += time.perf_counter() - started
            totals["config_timings"] += 1

    def counted_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        before = len(self.cache)
        try:
            return run(self, *args, **kwargs)
        finally:
            totals["keys_tuned"] += len(self.cache) - before

    jit.JITFunction._do_compile = timed_compile
    autotuner.Autotuner._bench = timed_bench
    autotuner.Autotuner.run = counted_run
    return totals


def main() -> int:
    kernel = sys.argv[1]
    totals = instrument()
    for mode, cases in (("tests", upstream.TESTS), ("benchmarks", upstream.BENCHMARKS)):
        before, started = dict(totals), time.perf_counter()
        for case in cases:
            if mode == "tests":
                passed, message = upstream.run_test(kernel, case)
            else:
                result = upstream.run_benchmark(kernel, case, False, 100, 10e9)
                passed, message = isinstance(result, dict), result
            if not passed:
                print(f"{mode} {case}: failed: {message}", flush=True)
        row = {key: round(totals[key] - before[key], 2) for key in totals}
        row["wall_s"] = round(time.perf_counter() - started, 2)
        row["autotune_timing_less_compiles_s"] = round(row["autotune_bench_s"] - row["compile_inside_bench_s"], 2)
        print(json.dumps({mode: row}), flush=True)
    from torch._dynamo.utils import compile_times

    print(compile_times(repr="str", aggregate=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
