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

from ksearch.tools.evaluator.tuning import quick_tuning  # noqa: E402

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


def _tuner(**kwargs: Any) -> tuple[Any, _Kernel]:
    kernel = _Kernel()
    configs = [triton.Config({"BLOCK": block}) for block in BLOCKS]
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


GPU_KERNEL = '''
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (128, 256, 512)], key=["n"])
@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)
'''


@pytest.mark.gpu
def test_on_a_gpu_the_pass_uses_tritons_do_bench_briefly_and_the_timed_key_gets_the_full_benchmark(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real ``@triton.autotune`` kernel on CUDA, Triton's own ``do_bench`` recorded: short inside the pass, Triton's
    defaults (25 ms / 100 ms) after it, on the same key."""
    import importlib.util

    import torch
    import triton.testing

    path = tmp_path / "gpu_add_one.py"
    path.write_text(GPU_KERNEL, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("gpu_add_one", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    calls: list[tuple[Any, Any]] = []
    real = triton.testing.do_bench

    def recording(fn: Any, warmup: int = 25, rep: int = 100, **kwargs: Any) -> Any:
        calls.append((warmup, rep))
        return real(fn, warmup=warmup, rep=rep, **kwargs)

    monkeypatch.setattr(triton.testing, "do_bench", recording)
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


def test_a_triton_without_the_hooks_it_needs_tunes_as_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """An autotuner without ``_bench`` (another Triton): the pass changes nothing and raises nothing."""
    monkeypatch.delattr(autotuner.Autotuner, "_bench")
    run = autotuner.Autotuner.run
    with quick_tuning(bench=lambda call, quantiles=None: [1.0, 1.0, 1.0]):
        assert autotuner.Autotuner.run is run
    assert not hasattr(autotuner.Autotuner, "_bench")


@pytest.mark.parametrize("quick", [True, False])
def test_the_workers_whole_correctness_pass_and_only_it_runs_inside_quick_tuning(
    quick: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's wiring (``WorkerRequest.quick_test_tuning``, ``KSEARCH_QUICK_TUNING=0`` in the parent): every
    test config's call happens inside the pass, and nothing when it is off."""
    import contextlib
    from types import SimpleNamespace

    import torch

    from ksearch.contracts.exchange import CheckerCommand, WorkerRequest
    from ksearch.tools.evaluator import worker as worker_mod
    from ksearch.tools.evaluator.checker import Checker
    from ksearch.tools.evaluator.guard import Guard
    from ksearch.tools.evaluator.staging import StagingWriter
    from tests.tools.loopback import LoopbackChannel

    checker = Checker("cpu")
    checker.handle(CheckerCommand(op="begin", task="softmax", device="cpu", salt=5, bench_salt=5))
    request = WorkerRequest(task="softmax", device="cpu", entry_point="kernel", candidate_path="", result_path="",
                            timing=False, salt=5, bench_salt=5, flush_l2=False, staging=checker.staging.handle,
                            quick_test_tuning=quick)  # fmt: skip
    channel = LoopbackChannel(checker)
    worker = worker_mod.Worker(request, channel)
    worker.staging = StagingWriter(checker.staging.handle)
    seen: list[tuple[int, int]] = []

    @contextlib.contextmanager
    def recording() -> Any:
        entered = len(channel.handoffs)
        yield
        seen.append((entered, len(channel.handoffs)))

    monkeypatch.setattr(worker_mod, "quick_tuning", recording)
    worker.guard = Guard()  # after the stand-in: the guard would take the rebinding for the candidate's patch
    try:
        worker.check_correctness(SimpleNamespace(kernel=lambda x: torch.softmax(x, dim=-1)))
    finally:
        checker.staging.release()
    tests = len(worker.task.test_configs("cpu"))
    assert worker.configs_passed == tests
    assert seen == ([(0, tests)] if quick else [])


def test_the_parent_asks_for_the_short_tuning_unless_told_not_to(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from ksearch.contracts.candidate import Candidate
    from ksearch.tasks.registry import resolve_task
    from ksearch.tools.evaluator import EvalRequest
    from ksearch.tools.evaluator.evaluate import QUICK_TUNING_VARIABLE, build_worker_request

    task = resolve_task("softmax")
    request = EvalRequest(candidate=Candidate(task="softmax", language="triton", code="x = 1\n"), device="cpu")

    def asked() -> bool:
        return build_worker_request(request, tmp_path, tmp_path / "r.json", task, "robust", salt=1).quick_test_tuning

    monkeypatch.delenv(QUICK_TUNING_VARIABLE, raising=False)
    assert asked()
    monkeypatch.setenv(QUICK_TUNING_VARIABLE, "0")
    assert not asked()
