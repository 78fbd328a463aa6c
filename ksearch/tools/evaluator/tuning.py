"""Triton's autotuner on the correctness configs: a short benchmark, forgotten before anything is timed.

GPU MODE's ``test`` mode calls an ``@triton.autotune`` kernel at each test shape, and Triton's autotuner then times
every config at every new key with ``triton.testing.do_bench`` (25 ms of warm-up and 100 ms of repeats per config, an
L2 flush before each repeat). On a test shape that choice decides only which config's output is checked; it cost a
public leaderboard TriMul kernel (11 configs, 3 keys) 10 s of its 72 s ``test`` pass (H200, session 24).

While ``quick_tuning`` is active (the worker's correctness pass), an autotuner that uses Triton's default benchmarker
times each config with ``QUICK_WARMUP_MS`` of warm-up and ``QUICK_REP_MS`` of repeats instead, by the same
``do_bench`` and the same statistic. Where the configs' times are far apart it picks what the full benchmark picks;
where they are close the two may differ, as upstream's own choice between close configs can differ from run to run.
The chosen config's output is checked as upstream checks its choice. On leaving, every choice made in the pass is
forgotten and none was written to Triton's disk cache, so each timed config's key is tuned by Triton's own benchmark
at its first, untimed call, as in upstream's fresh ``benchmark`` process. A candidate that brings its own
benchmarker (``do_bench=`` or the deprecated ``warmup``/``rep``) keeps it.

Nothing here decides a verdict or a score: it runs in the candidate's process, and the timed configs' outputs are
judged by the checker whatever the autotuner chose.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

QUICK_WARMUP_MS = 1
QUICK_REP_MS = 10
_MISSING = object()


def quick_bench(kernel_call: Callable[[], Any], quantiles: Any = None) -> Any:
    """Triton's ``do_bench`` with a short warm-up and a short run of repeats (L2 flushed before each, as by default)."""
    from triton.testing import do_bench

    return do_bench(kernel_call, warmup=QUICK_WARMUP_MS, rep=QUICK_REP_MS, quantiles=quantiles)


@contextlib.contextmanager
def quick_tuning(bench: Callable[..., Any] = quick_bench) -> Iterator[None]:
    """While active, default-benchmarked autotuners time configs with ``bench``; on exit their choices are forgotten.
    A no-op where Triton is missing or its autotuner's benchmarker cannot be set per instance."""
    try:
        from triton.runtime import autotuner
    except Exception:  # noqa: BLE001 - no Triton, nothing is autotuned
        yield
        return
    tuner_class = autotuner.Autotuner
    if not callable(getattr(tuner_class, "_bench", None)) or isinstance(
        inspect.getattr_static(tuner_class, "do_bench", None), property
    ):
        yield  # a Triton whose autotuner is built otherwise: it tunes as it always does
        return
    original_bench, original_run = tuner_class._bench, tuner_class.run
    tuned: list[tuple[Any, Any]] = []

    def short_bench(self: Any, *args: Any, config: Any, **meta: Any) -> Any:
        if getattr(self, "_do_bench", None) is not None:  # the candidate's own benchmarker
            return original_bench(self, *args, config=config, **meta)
        cached = self.__dict__.pop("do_bench", _MISSING)  # ``do_bench`` is a cached_property: the instance's slot
        self.__dict__["do_bench"] = bench
        try:
            return original_bench(self, *args, config=config, **meta)
        finally:
            self.__dict__.pop("do_bench", None)
            if cached is not _MISSING:
                self.__dict__["do_bench"] = cached

    def forgetting_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        cache = getattr(self, "cache", {})
        before = set(cache)
        writes = getattr(self, "cache_results", False)
        self.cache_results = False  # a short benchmark's choice never reaches the disk cache the timed keys read
        try:
            return original_run(self, *args, **kwargs)
        finally:
            self.cache_results = writes
            tuned.extend((self, key) for key in set(cache) - before)

    tuner_class._bench = short_bench  # type: ignore[method-assign]
    tuner_class.run = forgetting_run  # type: ignore[method-assign]
    try:
        yield
    finally:
        tuner_class._bench = original_bench  # type: ignore[method-assign]
        tuner_class.run = original_run  # type: ignore[method-assign]
        for tuner, key in tuned:
            tuner.cache.pop(key, None)
