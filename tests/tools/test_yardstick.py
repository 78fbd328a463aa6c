"""The yardstick (``ksearch eval --yardstick``): a bare GPU MODE benchmark loop read against ksearch's timing in the
candidate's own process. On the CPU its loop times with the wall clock; on a GPU (``-m gpu``) with CUDA events."""

from __future__ import annotations

import ast
import random
import time
import types
from pathlib import Path

import pytest
import torch

from ksearch.contracts.evaluation import YardstickReading
from ksearch.contracts.exchange import WorkerRequest
from ksearch.tools import timing
from ksearch.tools.evaluator.parent.request import EvalRequest
from ksearch.tools.evaluator.worker.main import Worker
from ksearch.tools.evaluator.worker.timing_runner import WorkerTimingRunner
from ksearch.tools.timing import yardstick
from ksearch.tools.timing.stats import gpumode_should_stop
from tests.tools.test_worker_timing import WallEvent, _elapsed, _record

REPO = Path(__file__).resolve().parents[2]


def test_the_loop_imports_nothing_of_ksearch() -> None:
    """A reader must be able to hold the yardstick against upstream's eval.py without reading ksearch."""
    tree = ast.parse(Path(yardstick.__file__).read_text(encoding="utf-8"))
    modules = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert modules and not [m for m in modules if m.startswith("ksearch")]


def test_its_stopping_rule_is_the_one_the_gpumode_methods_use() -> None:
    """Two implementations of upstream's rule (one inside ksearch's methods, one in the yardstick) must agree."""
    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(1, 110)
        spread = rng.choice([0.0, 1e-5, 1e-3, 0.05, 0.5])
        scale = rng.choice([0.01, 1.0, 150.0])
        samples = [scale * (1 + spread * rng.random()) for _ in range(n)]
        wall = rng.choice([1.0, 119.0, 121.0])
        assert yardstick.should_stop(samples, wall * 1e9) == gpumode_should_stop(samples, wall, max_time_s=10.0)


def test_the_bare_loop_times_the_same_argument_objects_until_upstreams_rule_stops_it() -> None:
    seen: list[int] = []
    data = (torch.randn(64, 64),)

    def kernel(x: torch.Tensor) -> torch.Tensor:
        seen.append(id(x))
        time.sleep(0.0005 if len(seen) % 2 else 0.002)  # noisy enough that only the repeat cap stops it
        return x * 2

    durations = yardstick.bare_benchmark(kernel, data, cuda=False)
    assert len(durations) == yardstick.MAX_REPEATS == len(seen)
    assert set(seen) == {id(data[0])} and all(d > 0.4 for d in durations)


def test_a_steady_call_stops_after_three_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call that takes exactly 10 ms every time (a fake clock: a real sleep jitters by more than upstream's 0.1 %
    on a busy machine) has no spread, so the error rule stops the loop at the first point it may."""
    clock = types.SimpleNamespace(now=0.0)

    def tick() -> None:
        clock.now += 0.01

    fake = types.SimpleNamespace(perf_counter=lambda: clock.now, perf_counter_ns=lambda: int(clock.now * 1e9))
    monkeypatch.setattr(yardstick, "time", fake)
    durations = yardstick.bare_benchmark(tick, (), cuda=False)
    assert 3 <= len(durations) < yardstick.MAX_REPEATS
    assert durations == pytest.approx([10.0] * len(durations))


def test_the_worker_reads_each_benchmark_config_both_ways_in_alternating_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Worker.yardstick on the CPU (wall-clock events): one reading per config, both sides per round, on the same
    data object, no checker involved (the yardstick runs unaudited after the verdict's timing)."""
    monkeypatch.setattr(WorkerTimingRunner, "event", lambda self: WallEvent())
    monkeypatch.setattr(WorkerTimingRunner, "record", lambda self, event: _record(event))
    monkeypatch.setattr(WorkerTimingRunner, "elapsed", lambda self, start, end: _elapsed(start, end))
    request = WorkerRequest(
        task="softmax",
        device="cpu",
        entry_point="kernel",
        candidate_path="",
        result_path="",
        timing=True,
        timing_method="gpumode-benchmark",
        flush_l2=False,
        yardstick_rounds=3,
    )
    worker = Worker(request)
    seen: set[int] = set()

    def kernel(x: torch.Tensor) -> torch.Tensor:
        seen.add(id(x))
        return torch.softmax(x, dim=-1)

    module = types.SimpleNamespace(kernel=kernel)
    configs = worker.task.benchmark_configs("cpu")
    worker.yardstick(module, timing.get_method("gpumode-benchmark"), configs)
    readings = worker.yardstick_readings
    assert [r.config for r in readings] == [c.name for c in configs]
    for reading in readings:
        assert len(reading.bare_ms) == len(reading.ksearch_ms) == 3
        assert all(x > 0 for x in reading.bare_ms + reading.ksearch_ms) and reading.ratio > 0
    # one data object per config (the bare loop and the method time the same one) plus the re-randomised audit
    # calls the method makes after each of its loops are skipped when unaudited
    assert len(seen) == len(configs)


def test_the_reading_ratio_is_ksearch_over_bare() -> None:
    reading = YardstickReading(config="c", bare_ms=[1.0, 3.0], ksearch_ms=[2.2, 1.8])
    assert reading.ratio == pytest.approx(1.0)
    assert reading.bare_mean_ms == pytest.approx(2.0) and reading.ksearch_mean_ms == pytest.approx(2.0)


def test_rounds_alternate_in_abba_order() -> None:
    from ksearch.tools.evaluator.shared.pairing import alternating

    assert "".join(alternating(3)) == "abbaab" and list(alternating(0)) == []


def test_asking_for_it_without_timing_says_what_it_needs() -> None:
    from ksearch.contracts.candidate import Candidate

    candidate = Candidate(
        task="softmax", language="triton", code="def kernel(x):\n    return x\n", entry_point="kernel"
    )
    with pytest.raises(ValueError, match="needs a timed evaluation"):
        EvalRequest(candidate=candidate, device="cpu", yardstick_rounds=2)


def test_a_method_other_than_gpumode_benchmark_is_refused_with_the_flag_to_add() -> None:
    from ksearch.contracts.candidate import Candidate
    from ksearch.tools.evaluator.parent.evaluate import evaluate

    code = (REPO / "tests" / "tasks" / "data" / "softmax_triton_ok.py").read_text(encoding="utf-8")
    request = EvalRequest(
        candidate=Candidate(task="softmax", language="triton", code=code),
        device="cuda",
        timing_method="robust",
        yardstick_rounds=2,
    )
    with pytest.raises(timing.TimingError, match="--timing-method gpumode-benchmark"):
        evaluate(request)  # refused before any process starts, so this runs without a GPU too


@pytest.mark.gpu
def test_a_real_evaluation_on_cuda_carries_a_reading_per_benchmark_config() -> None:
    from ksearch.contracts.candidate import Candidate
    from ksearch.tasks.softmax import SoftmaxTask
    from ksearch.tools.evaluator.parent.evaluate import evaluate

    code = (REPO / "tests" / "tasks" / "data" / "softmax_triton_ok.py").read_text(encoding="utf-8")
    request = EvalRequest(
        candidate=Candidate(task="softmax", language="triton", code=code),
        device="cuda",
        timing_method="gpumode-benchmark",
        yardstick_rounds=2,
    )
    evaluation = evaluate(request)
    assert evaluation.passed, evaluation.log
    assert [y.config for y in evaluation.yardstick] == [c.name for c in SoftmaxTask().benchmark_configs("cuda")]
    for reading in evaluation.yardstick:
        assert len(reading.bare_ms) == len(reading.ksearch_ms) == 2 and all(x > 0 for x in reading.bare_ms)
