"""Triton's autotuner in the worker: a short benchmark on the correctness configs, forgotten before anything is
timed; on the timed configs, Triton's full benchmark for the contenders only.

GPU MODE's ``test`` mode calls an ``@triton.autotune`` kernel at each test shape, and Triton's autotuner then times
every config at every new key with ``triton.testing.do_bench`` (25 ms of warm-up and 100 ms of repeats per config, an
L2 flush before each repeat). On a test shape that choice decides only which config's output is checked; it cost a
public leaderboard TriMul kernel (11 configs, 3 keys) 10 s of its 72 s ``test`` pass (H200, 2026-11-29).

While ``quick_tuning`` is active (the worker's correctness pass), an autotuner that uses Triton's default benchmarker
times each config with ``QUICK_WARMUP_MS`` of warm-up and ``QUICK_REP_MS`` of repeats instead, by the same
``do_bench`` and the same statistic. Where the configs' times are far apart it picks what the full benchmark picks;
where they are close the two may differ, as upstream's own choice between close configs can differ from run to run.
The chosen config's output is checked as upstream checks its choice. On leaving, every choice made in the pass is
forgotten and none was written to Triton's disk cache, so each timed config's key is tuned by Triton's own benchmark
at its first, untimed call, as in upstream's fresh ``benchmark`` process. A candidate that brings its own
benchmarker (``do_bench=`` or the deprecated ``warmup``/``rep``) keeps it.

On a timed config (``winnowed_tuning``, the worker's timing stage) the choice is Triton's full benchmark's, but only
among the contenders: every config is first timed by the short benchmark, and one that reads more than
``WINNOW_MARGIN`` slower than the fastest is not given the full one (its timing is recorded as infinite, as Triton
records a config that fails to compile). Triton's full benchmark costs about 125 ms per config and key whatever the
kernel (25 ms of warm-up, 100 ms of repeats); for a kernel of 12 configs on 7 timed shapes that was most of the timing
stage (2026-11-29). A config that far behind on the short benchmark does not win the full one, so the choice is the
one upstream's fresh ``benchmark`` process makes, for less; the disk cache's key (the configs Triton pruned to) is
unchanged, so the profiling process finds the worker's choices there.

Nothing here decides a verdict or a score: it runs in the candidate's process, and the timed configs' outputs are
judged by the checker whatever the autotuner chose.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ksearch.tools.evaluator.shared.object_access import exactly, instance_dict

QUICK_WARMUP_MS = 1
QUICK_REP_MS = 10
WINNOW_MARGIN = 0.10
"""On a timed config, a config whose short benchmark reads more than this fraction slower than the fastest config's
is not given Triton's full benchmark. The short benchmark's own spread is a few percent (10 ms of repeats, at least
one). With 0.25, 45 of the 64 configs of examples/trimul_triton_autotune.py's 8 timed keys were contenders (H200,
2026-11-30): its configs lie close together."""
WINNOW_STATE = "_ksearch_winnow"
"""The autotuner instance's slot for the current key's short timings (set when Triton prunes the configs of a new key,
which it does only for a key it has not tuned)."""
_MISSING = object()
_GET = dict.get
_SET = dict.__setitem__
_POP = dict.pop
_KEYS = dict.keys
_PLAIN_KEY_ITEMS = (int, float, bool, str, type(None))


def _fields(tuner: Any) -> dict[str, Any]:
    """An autotuner's instance dictionary, read through ``Autotuner``'s own ``__dict__`` descriptor (a subclass of
    the candidate's may define ``__getattribute__`` or properties; they do not run), used with ``dict``'s methods."""
    from triton.runtime.autotuner import Autotuner

    return instance_dict(Autotuner)(tuner)


def _keys(cache: Any) -> list[Any]:
    """The keys of an autotuner's cache (exactly a ``dict``), read without hashing or comparing them."""
    return list(_KEYS(cache)) if type(cache) is dict else []


def _plain_key(key: Any) -> bool:
    """A cache key Triton made of plain values (a tuple of ints, floats, strings: the key arguments and dtypes)."""
    return type(key) is tuple and all(exactly(item, *_PLAIN_KEY_ITEMS) for item in key)


def quick_bench(kernel_call: Callable[[], Any], quantiles: Any = None) -> Any:
    """Triton's ``do_bench`` with a short warm-up and a short run of repeats (L2 flushed before each, as by default)."""
    from triton.testing import do_bench

    return do_bench(kernel_call, warmup=QUICK_WARMUP_MS, rep=QUICK_REP_MS, quantiles=quantiles)


def _autotuner_class() -> Any:
    """Triton's ``Autotuner`` where it has the hooks this module sets (``_bench``, and ``do_bench`` settable per
    instance), else None: a Triton whose autotuner is built otherwise tunes as it always does."""
    try:
        from triton.runtime import autotuner
    except Exception:  # noqa: BLE001 - no Triton, nothing is autotuned
        return None
    tuner_class = autotuner.Autotuner
    if not callable(getattr(tuner_class, "_bench", None)) or isinstance(
        inspect.getattr_static(tuner_class, "do_bench", None), property
    ):
        return None
    return tuner_class


def _bench_with(
    original_bench: Callable[..., Any],
    bench: Callable[..., Any],
    tuner: Any,
    args: Any,
    config: Any,
    meta: dict[str, Any],
) -> Any:
    """Triton's ``_bench`` of ``config`` with ``bench`` as the tuner's benchmarker for this one call."""
    fields = _fields(tuner)
    cached = _POP(fields, "do_bench", _MISSING)  # ``do_bench`` is a cached_property: the instance's slot
    _SET(fields, "do_bench", bench)
    try:
        return original_bench(tuner, *args, config=config, **meta)
    finally:
        _POP(fields, "do_bench", None)
        if cached is not _MISSING:
            _SET(fields, "do_bench", cached)


def _first(timing: Any) -> float:
    """The statistic Triton's autotuner compares: the first of ``do_bench``'s quantiles, or its one figure."""
    return float(timing[0] if isinstance(timing, (list, tuple)) else timing)


@contextlib.contextmanager
def quick_tuning(bench: Callable[..., Any] = quick_bench) -> Iterator[None]:
    """While active, default-benchmarked autotuners time configs with ``bench``; on exit their choices are forgotten.
    A no-op where Triton is missing or its autotuner's benchmarker cannot be set per instance."""
    tuner_class = _autotuner_class()
    if tuner_class is None:
        yield
        return
    original_bench, original_run = tuner_class._bench, tuner_class.run
    tuned: list[tuple[Any, Any]] = []

    def short_bench(self: Any, *args: Any, config: Any, **meta: Any) -> Any:
        if _GET(_fields(self), "_do_bench") is not None:  # the candidate's own benchmarker
            return original_bench(self, *args, config=config, **meta)
        return _bench_with(original_bench, bench, self, args, config, meta)

    def forgetting_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        fields = _fields(self)
        before = _keys(_GET(fields, "cache"))
        writes = _GET(fields, "cache_results", False)
        _SET(fields, "cache_results", False)  # a short benchmark's choice never reaches the disk cache timed keys read
        try:
            return original_run(self, *args, **kwargs)
        finally:
            _SET(fields, "cache_results", writes)
            tuned.extend((self, key) for key in _keys(_GET(fields, "cache")) if not any(key is b for b in before))

    tuner_class._bench = short_bench  # type: ignore[method-assign]
    tuner_class.run = forgetting_run  # type: ignore[method-assign]
    try:
        yield
    finally:
        tuner_class._bench = original_bench  # type: ignore[method-assign]
        tuner_class.run = original_run  # type: ignore[method-assign]
        for tuner, key in tuned:
            cache = _GET(_fields(tuner), "cache")
            if type(cache) is dict and _plain_key(key):  # hashing a key of other values could run their code
                _POP(cache, key, None)


@dataclass
class WinnowTally:
    """What the winnowing did in one timing stage, for the evaluation's record (``environment["autotuning"]``)."""

    keys: int = 0
    briefly: int = 0
    """Configs timed by the short benchmark, over all keys."""
    fully: int = 0
    """Of those, the contenders given Triton's full benchmark."""

    def describe(self) -> str:
        return f"{self.keys} timed keys winnowed: {self.briefly} configs timed briefly, {self.fully} fully"


@contextlib.contextmanager
def winnowed_tuning(short: Callable[..., Any] = quick_bench, margin: float = WINNOW_MARGIN) -> Iterator[WinnowTally]:
    """While active, a default-benchmarked autotuner tuning a new key times every config with ``short`` first and
    gives Triton's full benchmark only to those within ``margin`` of the fastest; the rest are recorded as infinite.
    Choices are kept (they are the timed configs'). A no-op where Triton's autotuner lacks the hooks."""
    tally = WinnowTally()
    tuner_class = _autotuner_class()
    if tuner_class is None or not callable(getattr(tuner_class, "prune_configs", None)):
        yield tally
        return
    original_prune, original_bench = tuner_class.prune_configs, tuner_class._bench
    touched: list[Any] = []

    def recording_prune(self: Any, *args: Any, **kwargs: Any) -> Any:
        configs = original_prune(self, *args, **kwargs)
        _SET(_fields(self), WINNOW_STATE, {"configs": list(configs), "short": None})
        touched.append(self)
        return configs

    def winnowing_bench(self: Any, *args: Any, config: Any, **meta: Any) -> Any:
        fields = _fields(self)
        state = _GET(fields, WINNOW_STATE)
        if state is None or _GET(fields, "_do_bench") is not None or len(state["configs"]) < 3:
            return original_bench(self, *args, config=config, **meta)  # the candidate's own benchmarker, or no gain
        if state["short"] is None:
            state["short"] = [(c, _bench_with(original_bench, short, self, args, c, meta)) for c in state["configs"]]
            state["fastest"] = min(_first(timing) for _, timing in state["short"])
            tally.keys += 1
            tally.briefly += len(state["short"])
        timing = next((timing for c, timing in state["short"] if c is config), None)
        if timing is not None and _first(timing) > state["fastest"] * (1 + margin):
            infinite = float("inf")
            return [infinite] * len(timing) if isinstance(timing, (list, tuple)) else infinite
        tally.fully += 1
        return original_bench(self, *args, config=config, **meta)

    tuner_class.prune_configs = recording_prune  # type: ignore[method-assign]
    tuner_class._bench = winnowing_bench  # type: ignore[method-assign]
    try:
        yield tally
    finally:
        tuner_class.prune_configs = original_prune  # type: ignore[method-assign]
        tuner_class._bench = original_bench  # type: ignore[method-assign]
        for tuner in touched:
            _POP(_fields(tuner), WINNOW_STATE, None)
