"""``quick_tuning``: Triton's real autotuner, short-benchmarked on the correctness configs, its choices forgotten after.

The autotuner here is Triton's own class; only the kernel it launches and the two benchmarkers are stand-ins (the CPU
has no device to time on): the "full" one is what Triton's default ``do_bench`` would answer, the "quick" one what the
short benchmark answers, and they disagree on purpose so that the test can tell which one decided.
"""

from __future__ import annotations

from typing import Any

import pytest

triton = pytest.importorskip("triton")
from triton.runtime import autotuner  # noqa: E402

from ksearch.tools.evaluator.worker.tuning import WINNOW_STATE, quick_tuning, winnowed_tuning  # noqa: E402

BLOCKS = (16, 32, 64)
FULL_MS = {16: 3.0, 32: 2.0, 64: 1.0}  # the full benchmark's fastest: 64
QUICK_MS = {16: 3.0, 32: 1.0, 64: 2.0}  # the short benchmark's fastest: 32


def _body(x: Any, n: int, BLOCK: int) -> None:  # noqa: N803 - a Triton constexpr's usual name
    """The kernel's signature (never run)."""


class _Kernel:
    """Stands in for a ``JITFunction``: records the ``BLOCK`` of every launch."""

    def __init__(self) -> None:
        self.fn = _body
        self.launches: list[int] = []

    def run(self, *args: Any, **kwargs: Any) -> None:
        self.launches.append(kwargs["BLOCK"])


class _Bench:
    """A benchmarker answering from a table by the config the call launched."""

    def __init__(self, kernel: _Kernel, table: dict[int, float]) -> None:
        self.kernel, self.table, self.calls = kernel, table, 0

    def __call__(self, kernel_call: Any, quantiles: Any = None) -> list[float]:
        self.calls += 1
        kernel_call()
        ms = self.table[self.kernel.launches[-1]]
        return [ms, ms, ms]


def _tuner(blocks: tuple[int, ...] = BLOCKS, **kwargs: Any) -> tuple[Any, _Kernel]:
    kernel = _Kernel()
    configs = [triton.Config({"BLOCK": block}) for block in blocks]
    tuner = autotuner.Autotuner(kernel, ["x", "n", "BLOCK"], configs, ["n"], None, None, **kwargs)
    tuner.configs = configs  # another test may have made the CPU's autotuners keep their first config only
    return tuner, kernel


def test_correctness_calls_use_the_short_benchmark_and_the_choice_is_forgotten() -> None:
    tuner, kernel = _tuner()
    full, quick = _Bench(kernel, FULL_MS), _Bench(kernel, QUICK_MS)
    tuner.__dict__["do_bench"] = full  # what Triton's cached default benchmarker would be
    tuner.run("x", 4)  # a key tuned before the pass (at import, say) stays tuned
    assert kernel.launches[-1] == 64 and full.calls == 3

    with quick_tuning(bench=quick):
        tuner.run("x", 8)
        assert quick.calls == 3 and full.calls == 3, "the correctness pass timed its configs with the short bench"
        assert kernel.launches[-1] == 32, "the call ran the short benchmark's choice, whose output is then checked"
        tuner.run("x", 4)
        assert kernel.launches[-1] == 64 and quick.calls == 3, "a key tuned before keeps its choice"

    assert set(tuner.cache) == {(4,)}, "the pass's choices are forgotten"
    assert tuner.__dict__["do_bench"] is full, "the instance's own benchmarker is back"
    tuner.run("x", 8)  # the timed config's first call: tuned again by the full benchmark
    assert full.calls == 6 and quick.calls == 3
    assert kernel.launches[-1] == 64


def test_no_choice_of_the_short_benchmark_reaches_the_disk_cache() -> None:
    tuner, kernel = _tuner()
    tuner.__dict__["do_bench"] = _Bench(kernel, FULL_MS)
    tuner.cache_results = True
    disk: list[tuple[Any, ...]] = []

    def check_disk_cache(key: Any, configs: Any, bench_fn: Any) -> bool:
        disk.append(key)
        bench_fn()
        return False

    tuner.check_disk_cache = check_disk_cache
    with quick_tuning(bench=_Bench(kernel, QUICK_MS)):
        tuner.run("x", 8)
    assert disk == [] and tuner.cache_results is True
    tuner.run("x", 8)
    assert disk == [(8,)] and kernel.launches[-1] == 64


def test_a_candidates_own_benchmarker_is_kept() -> None:
    kernel = _Kernel()
    own = _Bench(kernel, FULL_MS)
    tuner, _ = _tuner(do_bench=own)
    tuner.fn = kernel
    own.kernel = kernel
    quick = _Bench(kernel, QUICK_MS)
    with quick_tuning(bench=quick):
        tuner.run("x", 8)
    assert own.calls == 3 and quick.calls == 0 and kernel.launches[-1] == 64


def test_the_autotuner_class_is_restored_even_when_the_pass_fails() -> None:
    before = (autotuner.Autotuner._bench, autotuner.Autotuner.run)
    with pytest.raises(RuntimeError), quick_tuning(bench=lambda call, quantiles=None: [1.0, 1.0, 1.0]):
        raise RuntimeError("a candidate failed its correctness config")
    assert (autotuner.Autotuner._bench, autotuner.Autotuner.run) == before


WIDE = (16, 32, 64, 128)
WIDE_SHORT_MS = {16: 3.0, 32: 1.0, 64: 1.05, 128: 1.2}  # 32 and 64 within 10 % of the fastest; 16 and 128 behind
WIDE_FULL_MS = {16: 3.0, 32: 1.05, 64: 1.0, 128: 1.2}  # the full benchmark prefers 64


class _Recorder(_Bench):
    """A benchmarker from a table that also records which configs it timed."""

    def __init__(self, kernel: _Kernel, table: dict[int, float]) -> None:
        super().__init__(kernel, table)
        self.timed: list[int] = []

    def __call__(self, kernel_call: Any, quantiles: Any = None) -> list[float]:
        result = super().__call__(kernel_call, quantiles)
        self.timed.append(self.kernel.launches[-1])
        return result


def test_a_timed_key_gives_the_full_benchmark_to_the_contenders_only_and_the_full_benchmark_chooses() -> None:
    tuner, kernel = _tuner(WIDE)
    full, short = _Recorder(kernel, WIDE_FULL_MS), _Recorder(kernel, WIDE_SHORT_MS)
    tuner.__dict__["do_bench"] = full
    with winnowed_tuning(short=short) as tally:
        tuner.run("x", 8)
        assert short.timed == [16, 32, 64, 128], "every config is timed by the short benchmark first"
        assert full.timed == [32, 64], "only the two within the margin of the fastest get the full one"
        assert kernel.launches[-1] == 64, "among them the full benchmark chooses, not the short one"
        timings = {config.kwargs["BLOCK"]: timing for config, timing in tuner.configs_timings.items()}
        assert timings[16] == timings[128] == [float("inf")] * 3 and timings[64] == [1.0] * 3
        tuner.run("x", 8)
        assert len(short.timed) == 4 and len(full.timed) == 2, "a tuned key is not tuned again"
    assert tuner.cache[(8,)].kwargs["BLOCK"] == 64, "the timed key keeps its choice"
    assert (tally.keys, tally.briefly, tally.fully) == (1, 4, 2)
    assert tally.describe() == "1 timed keys winnowed: 4 configs timed briefly, 2 fully"
    assert WINNOW_STATE not in tuner.__dict__
    tuner.run("x", 16)  # after the timing stage Triton tunes as always
    assert full.timed[2:] == list(WIDE) and len(short.timed) == 4


def test_winnowing_keeps_the_disk_cache_key_a_candidates_own_benchmarker_and_small_config_lists() -> None:
    tuner, kernel = _tuner(WIDE)
    full, short = _Recorder(kernel, WIDE_FULL_MS), _Recorder(kernel, WIDE_SHORT_MS)
    tuner.__dict__["do_bench"] = full
    tuner.cache_results = True
    disk: list[list[int]] = []

    def check_disk_cache(key: Any, configs: Any, bench_fn: Any) -> bool:
        disk.append([config.kwargs["BLOCK"] for config in configs])
        bench_fn()
        return False

    tuner.check_disk_cache = check_disk_cache
    with winnowed_tuning(short=short):
        tuner.run("x", 8)
    assert disk == [list(WIDE)], "the profiling process finds the worker's choice under the same key"
    assert full.timed == [32, 64]

    own_kernel = _Kernel()
    own = _Recorder(own_kernel, WIDE_FULL_MS)
    owned, _ = _tuner(WIDE, do_bench=own)
    owned.fn, own.kernel = own_kernel, own_kernel
    never = _Recorder(own_kernel, WIDE_SHORT_MS)
    with winnowed_tuning(short=never):
        owned.run("x", 8)
    assert never.timed == [] and own.timed == list(WIDE), "a candidate's own benchmarker times every config"

    pair, pair_kernel = _tuner((16, 32))
    pair_full = _Recorder(pair_kernel, FULL_MS)
    pair.__dict__["do_bench"] = pair_full
    unused = _Recorder(pair_kernel, QUICK_MS)
    with winnowed_tuning(short=unused):
        pair.run("x", 8)
    assert unused.timed == [] and pair_full.timed == [16, 32], "two configs: nothing to save"


def test_configs_that_fail_to_build_are_never_contenders_and_if_all_fail_triton_decides_as_always() -> None:
    """A config Triton could not build reads infinite on the short benchmark: it gets no full one while another
    config runs; when none runs, every config goes to the full benchmark as without winnowing."""
    inf = float("inf")
    tuner, kernel = _tuner(WIDE)
    full = _Recorder(kernel, {16: inf, 32: 2.0, 64: 1.0, 128: inf})
    tuner.__dict__["do_bench"] = full
    with winnowed_tuning(short=_Recorder(kernel, {16: inf, 32: 2.0, 64: 1.0, 128: inf})):
        tuner.run("x", 8)
    assert full.timed == [64] and kernel.launches[-1] == 64

    tuner, kernel = _tuner(WIDE)
    full = _Recorder(kernel, dict.fromkeys(WIDE, inf))
    tuner.__dict__["do_bench"] = full
    with winnowed_tuning(short=_Recorder(kernel, dict.fromkeys(WIDE, inf))):
        tuner.run("x", 8)
    assert full.timed == list(WIDE)


def test_the_autotuner_class_is_restored_after_winnowing_even_when_the_timing_fails() -> None:
    before = (autotuner.Autotuner._bench, autotuner.Autotuner.prune_configs, autotuner.Autotuner.run)
    with pytest.raises(RuntimeError), winnowed_tuning(short=lambda call, quantiles=None: [1.0, 1.0, 1.0]):
        raise RuntimeError("a candidate failed on a timed config")
    assert (autotuner.Autotuner._bench, autotuner.Autotuner.prune_configs, autotuner.Autotuner.run) == before


GPU_KERNEL = """
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (128, 256, 512)], key=["n"])
@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)
"""


def _gpu_kernel(source: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[tuple[Any, Any]]]:
    """``source`` imported as a module, and the (warm-up, repeats) of every call of Triton's ``do_bench`` from now."""
    import importlib.util

    import triton.testing

    path = tmp_path / "gpu_kernel.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("gpu_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    calls: list[tuple[Any, Any]] = []
    real = triton.testing.do_bench

    def recording(fn: Any, warmup: int = 25, rep: int = 100, **kwargs: Any) -> Any:
        calls.append((warmup, rep))
        return real(fn, warmup=warmup, rep=rep, **kwargs)

    monkeypatch.setattr(triton.testing, "do_bench", recording)
    return module, calls


@pytest.mark.gpu
def test_on_a_gpu_the_pass_uses_tritons_do_bench_briefly_and_the_timed_key_gets_the_full_benchmark(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real ``@triton.autotune`` kernel on CUDA, Triton's own ``do_bench`` recorded: short inside the pass, Triton's
    defaults (25 ms / 100 ms) after it, on the same key."""
    import torch

    module, calls = _gpu_kernel(GPU_KERNEL, tmp_path, monkeypatch)
    x = torch.zeros(100_000, device="cuda")
    grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)  # noqa: E731
    with quick_tuning():
        module.add_one[grid](x, x.numel())
        torch.cuda.synchronize()
    assert calls == [(1, 10)] * 3, calls
    assert module.add_one.cache == {}, "the pass's choice is forgotten"
    before = float(x[0])
    module.add_one[grid](x, x.numel())
    torch.cuda.synchronize()
    assert calls[3:] == [(25, 100)] * 3, calls
    assert len(module.add_one.cache) == 1
    assert float(x[0]) > before  # the kernel ran (tuning's own launches add to x as well: restore_value is not set)


WIDE_GPU_KERNEL = """
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (32, 128, 1024) for w in (1, 4)],
                 key=["n"])
@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)
"""


@pytest.mark.gpu
def test_on_a_gpu_a_timed_key_is_winnowed_by_tritons_do_bench_and_the_full_benchmark_chooses(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real ``@triton.autotune`` kernel of 6 configs on CUDA, Triton's own ``do_bench`` recorded: 6 short runs, then
    the full one for the contenders only, whose fastest is chosen."""
    import torch

    module, calls = _gpu_kernel(WIDE_GPU_KERNEL, tmp_path, monkeypatch)
    x = torch.zeros(1 << 24, device="cuda")  # 64 MiB: BLOCK 32 with one warp is far behind BLOCK 1024
    grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)  # noqa: E731
    with winnowed_tuning():
        module.add_one[grid](x, x.numel())
        torch.cuda.synchronize()
    assert calls[:6] == [(1, 10)] * 6, calls
    full = calls[6:]
    assert full == [(25, 100)] * len(full) and 1 <= len(full) < 6, calls
    timings = module.add_one.configs_timings
    finite = {config: timing for config, timing in timings.items() if timing[0] != float("inf")}
    assert len(finite) == len(full)
    chosen = next(iter(module.add_one.cache.values()))
    assert chosen in finite and finite[chosen] == min(finite.values())


def test_a_triton_without_the_hooks_it_needs_tunes_as_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """An autotuner without ``_bench`` (another Triton): the pass changes nothing and raises nothing."""
    monkeypatch.delattr(autotuner.Autotuner, "_bench")
    run = autotuner.Autotuner.run
    with quick_tuning(bench=lambda call, quantiles=None: [1.0, 1.0, 1.0]):
        assert autotuner.Autotuner.run is run
    assert not hasattr(autotuner.Autotuner, "_bench")


@pytest.mark.parametrize(
    ("stage", "on"), [("correctness", True), ("correctness", False), ("timing", True), ("timing", False)]
)
def test_each_tuning_mode_wraps_its_whole_stage_and_nothing_when_off(
    stage: str, on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's wiring: every test config's call happens inside ``quick_tuning``
    (``WorkerRequest.quick_test_tuning``), every timed config's first call,
    where its key is tuned, and its timing inside ``winnowed_tuning`` (``winnowed_tuning``); neither when off."""
    import contextlib
    from types import SimpleNamespace

    import torch

    from ksearch.contracts.exchange import CheckerCommand, WorkerRequest
    from ksearch.tools.evaluator.checker.main import Checker
    from ksearch.tools.evaluator.shared.staging import StagingWriter
    from ksearch.tools.evaluator.worker import correctness as correctness_mod
    from ksearch.tools.evaluator.worker import main as worker_mod
    from ksearch.tools.evaluator.worker.guard import Guard
    from tests.tools.loopback import LoopbackChannel

    correctness = stage == "correctness"
    checker = Checker("cpu")
    checker.handle(CheckerCommand(op="begin", task="softmax", device="cpu", salt=5, bench_salt=5))
    fields: dict[str, Any] = (
        {"timing": False, "quick_test_tuning": on}
        if correctness
        else {"timing": True, "time_cap_s": 0.05, "min_samples": 3, "winnowed_tuning": on}
    )
    request = WorkerRequest(
        task="softmax",
        device="cpu",
        entry_point="kernel",
        candidate_path="",
        result_path="",
        salt=5,
        bench_salt=5,
        flush_l2=False,
        staging=checker.staging.handle,
        **fields,
    )
    channel = LoopbackChannel(checker)
    worker = worker_mod.Worker(request, channel)
    worker.staging = StagingWriter(checker.staging.handle)
    progress = (lambda: len(channel.handoffs)) if correctness else (lambda: len(worker.samples))
    seen: list[tuple[int, int]] = []

    @contextlib.contextmanager
    def recording() -> Any:
        entered = progress()
        yield
        seen.append((entered, progress()))

    if correctness:
        monkeypatch.setattr(correctness_mod, "quick_tuning", recording)
    else:
        monkeypatch.setattr(worker_mod, "winnowed_tuning", recording)
    worker.guard = Guard()  # after the stand-in: the guard would take the rebinding for the candidate's patch
    module = SimpleNamespace(kernel=lambda x: torch.softmax(x, dim=-1))
    try:
        worker.check_correctness(module) if correctness else worker.measure(module)
    finally:
        checker.staging.release()
    configs = worker.task.test_configs("cpu") if correctness else worker.task.benchmark_configs("cpu")
    assert worker.configs_passed == progress() == len(configs)
    assert seen == ([(0, len(configs))] if on else [])


@pytest.mark.parametrize("field", ["quick_test_tuning", "winnowed_tuning"])
def test_the_parent_asks_for_the_short_tuning(field: str, tmp_path: Any) -> None:
    from ksearch.contracts.candidate import Candidate
    from ksearch.tasks.registry import resolve_task
    from ksearch.tools.evaluator import EvalRequest
    from ksearch.tools.evaluator.parent.evaluate import build_worker_request

    task = resolve_task("softmax")
    request = EvalRequest(candidate=Candidate(task="softmax", language="triton", code="x = 1\n"), device="cpu")
    worker_request = build_worker_request(request, tmp_path, tmp_path / "r.json", task, "robust", salt=1)
    assert getattr(worker_request, field)
