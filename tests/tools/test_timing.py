"""Timing methods on synthetic sample streams and a fake runner: stop rules, loops, roofline floor, paired stats."""

from __future__ import annotations

import math
import random
import weakref

import pytest

from ksearch.tasks.softmax import SoftmaxTask
from ksearch.tools import timing
from ksearch.tools.evaluator import comparison_from_samples
from ksearch.tools.evaluator.worker.main import CompareSamples
from ksearch.tools.timing.stats import UndisturbedSamples


def test_robust_stops_on_low_relative_error_or_the_time_cap() -> None:
    steady = [1.0, 1.001, 0.999] * 4
    assert not timing.robust_should_stop(steady[:9], 0.0)  # fewer than min_samples
    assert timing.robust_should_stop(steady[:10], 0.0)
    noisy = [1.0, 3.0] * 5
    assert not timing.robust_should_stop(noisy, 0.5)
    assert timing.robust_should_stop(noisy, 2.5)  # time cap
    assert timing.robust_should_stop([1.0, 3.0] * 2500, 0.0)  # max samples


def test_gpumode_stop_rule_matches_upstream() -> None:
    assert not timing.gpumode_should_stop([1.0, 1.0], 0.0)  # needs >= 3 runs
    assert timing.gpumode_should_stop([1.0, 1.0, 1.0], 0.0)  # std_err 0
    noisy = [1.0, 2.0, 3.0]
    assert not timing.gpumode_should_stop(noisy, 1.0)
    assert timing.gpumode_should_stop(noisy, 121.0)  # wall > 120 s
    assert timing.gpumode_should_stop([11_000.0, 9_000.0, 12_000.0], 1.0)  # 32 s of kernel time > 30 s
    assert not timing.gpumode_should_stop([1.0, 2.0] * 49, 1.0)
    assert timing.gpumode_should_stop([1.0, 2.0] * 50, 1.0)  # 100 repeats
    # gpumode-benchmark uses the same rule with a 10 s cap
    assert timing.gpumode_should_stop([4000.0, 3000.0, 4000.0], 1.0, max_time_s=10.0)


def _upstream_stops(durations_ms: list[float], wall_s: float, max_time_ns: float) -> bool:
    """GPU MODE eval.py's decision after a repeat, as it computes it: durations in ns, ``calculate_stats``, then its
    test."""
    durations = [d * 1e6 for d in durations_ms]
    runs = len(durations)
    if runs >= 100:
        return True  # its ``for i in range(max_repeats)`` ends
    if runs < 3:
        return False  # it tests from the third run (``if i > 1``)
    avg = sum(durations) / runs
    std = math.sqrt(sum((x - avg) ** 2 for x in durations) / (runs - 1))
    err = std / math.sqrt(runs)
    return err / avg < 0.001 or avg * runs > max_time_ns or wall_s * 1e9 > 120e9


def test_the_gpumode_stop_rule_decides_as_upstreams_arithmetic_does() -> None:
    rng = random.Random(13)
    for _ in range(3000):
        n = rng.randint(1, 105)
        spread = rng.choice([0.0, 1e-4, 5e-4, 2e-3, 0.02, 0.3])
        scale = rng.choice([0.02, 0.3, 1.1, 40.0, 3000.0])
        samples = [scale * (1 + spread * rng.gauss(0, 1) ** 2) for _ in range(n)]
        wall = rng.choice([0.5, 119.0, 121.0])
        assert timing.gpumode_should_stop(samples, wall, max_time_s=10.0) == _upstream_stops(samples, wall, 10e9)


def test_the_gpumode_stop_rule_does_no_exact_fraction_arithmetic(monkeypatch: pytest.MonkeyPatch) -> None:
    """It runs between every two timed repeats: ``statistics.stdev`` (exact fractions) cost ten times upstream's
    arithmetic there and read +6 % on a launch-bound shape in the same process (bench/RESULTS.md, "Timing fidelity")."""
    import statistics

    def refuse(*_: object) -> float:
        raise AssertionError("the stop rule must not use the statistics module")

    for name in ("stdev", "fmean", "mean", "variance", "pstdev"):
        monkeypatch.setattr(statistics, name, refuse)
    samples = [0.3 + 0.001 * i for i in range(50)]
    assert timing.gpumode_should_stop(samples, 1.0, max_time_s=10.0) is False
    assert timing.relative_standard_error(samples) > 0


def test_summarize_and_relative_error() -> None:
    stats = timing.summarize([1.0, 2.0, 3.0, 10.0])
    assert stats == {"median_ms": 2.5, "mean_ms": 4.0, "stdev_ms": pytest.approx(4.0825, rel=1e-4), "samples": 4}
    assert timing.relative_standard_error([1.0]) == math.inf
    with pytest.raises(ValueError):
        timing.summarize([])


class FakeEvent:
    def __init__(self, clock: list[float]) -> None:
        self.clock, self.t = clock, None


class FakeCall:
    """A call on input set ``index`` whose argument object is ``args`` (compared by identity in the tests)."""

    def __init__(self, runner: FakeRunner, index: int, args: object, kind: str) -> None:
        self.runner, self.index, self.args, self.kind = runner, index, args, kind

    def __call__(self) -> int:
        r = self.runner
        r.calls.append(self.index)
        r.args_seen.append(self.args)
        r.trace.append("call")
        r.clock[0] += 1.0 + 0.001 * (len(r.calls) % 3) + r.extra_ms()
        return self.index


class FakeRunner:
    """Every call takes 1 'ms' of fake time; records what the method asked for, in order (``trace``)."""

    def __init__(self) -> None:
        self.clock = [0.0]
        self.fitting_sets = 1_000
        """Input sets that fit the device (``sets_that_fit``)."""
        self.cached: list[int] = []
        self.fresh: list[int] = []
        self.clones = 0
        self.calls: list[int] = []
        self.args_seen: list[object] = []
        self.flushes = self.syncs = self.primed = self.after_calls = self.glances = 0
        self.audited: list[int] = []
        self.holds: list[float] = []
        self.syncs_at_audit: list[int] = []
        self.fresh_value_audits: list[int] = []
        """Input sets re-randomised in place, in order (each followed by an audit of the next call on the set)."""
        self.fresh_audited: list[int] = []
        """Positions in ``calls`` (1-based) of the audited calls that ran on re-randomised inputs."""
        self.windows: list[list[float]] = []
        """Samples of each timed window, as sent to the parent."""
        self.open = False
        self.nulls = 0
        self.trace: list[str] = []
        self._set_args: dict[int, object] = {}
        self._pending_fresh: set[int] = set()

    def extra_ms(self) -> float:
        """Fake time the call just made takes beyond its 1 ms (subclasses vary it)."""
        return 0.0

    def call_on(self, index: int, *, fresh: bool = False, reuse_args: bool = True, clone: bool = False) -> FakeCall:
        if fresh:
            self.fresh.append(index)
            return FakeCall(self, index, object(), "fresh")
        if index not in self._set_args:
            self.cached.append(index)
            self._set_args[index] = object()
        if clone:
            self.clones += 1
            return FakeCall(self, index, object(), "clone")
        return FakeCall(self, index, self._set_args[index] if reuse_args else object(), "set")

    def sets_that_fit(self, wanted: int) -> int:
        return min(wanted, self.fitting_sets)

    def prime(self, call: FakeCall) -> None:
        self.primed += 1
        self.trace.append("prime")

    def event(self) -> FakeEvent:
        return FakeEvent(self.clock)

    def record(self, event: FakeEvent) -> None:
        event.t = self.clock[0]
        self.trace.append("record")

    def elapsed(self, start: FakeEvent, end: FakeEvent) -> float:
        return end.t - start.t

    def synchronize(self) -> None:
        self.syncs += 1
        self.trace.append("sync")

    def open_window(self) -> None:
        assert not self.open, "a window opened inside another"
        self.open = True
        self.trace.append("go")

    def close_window(self, events: list[tuple[FakeEvent, FakeEvent]]) -> list[float]:
        assert self.open, "a window closed that was never opened"
        self.synchronize()
        samples = [self.elapsed(s, e) for s, e in events]
        self.windows.append(samples)
        self.open = False
        self.trace.append("timed")
        return samples

    def null_window(self) -> None:
        assert not self.open, "a null window inside a timed one"
        self.nulls += 1
        self.trace.append("null")

    def flush(self) -> None:
        self.flushes += 1
        self.trace.append("flush")

    def hold(self, ms: float) -> None:
        self.holds.append(ms)
        self.trace.append("hold")

    def wall(self) -> float:
        return self.clock[0] / 1000.0

    def after(self, call: FakeCall, output: object) -> None:
        assert output == call.index
        self.after_calls += 1
        self.trace.append("after")

    def glance(self, call: FakeCall, output: object) -> None:
        assert output == call.index
        self.glances += 1
        self.trace.append("glance")

    def want_audit(self, index: int) -> bool:
        return True

    def stage(self, call: FakeCall, output: object) -> object:
        self.trace.append("stage")
        return ("staged", len(self.calls))

    def audit(self, call: FakeCall, output: object, staged: object = None) -> None:
        assert output == call.index
        assert not self.open, "an audit (its handoff waits for the checker) inside a timed window"
        self.audited.append(len(self.calls))
        self.syncs_at_audit.append(self.syncs)
        if call.index in self._pending_fresh:
            self._pending_fresh.discard(call.index)
            self.fresh_audited.append(len(self.calls))
        self.trace.append("audit")

    def fresh_values(self, call: FakeCall) -> object:
        assert not self.open, "fresh values are generated outside any window"
        return ("values", call.index)

    def rerandomise(self, call: FakeCall, values: object) -> None:
        self.fresh_value_audits.append(call.index)
        self._pending_fresh.add(call.index)
        self.trace.append("rerandomise")

    def timed_regions(self) -> list[list[str]]:
        """What happened between each start and end event."""
        regions, inside = [], None
        for step in self.trace:
            if step == "record":
                if inside is None:
                    inside = []
                else:
                    regions.append(inside)
                    inside = None
            elif inside is not None:
                inside.append(step)
        return regions


def test_nothing_but_the_call_lies_between_the_events_in_every_method() -> None:
    for name in timing.method_names():
        runner = FakeRunner()
        run = timing.get_method(name).run(runner, flush_l2=True)
        regions = runner.timed_regions()
        assert len(regions) == len(run.samples_ms), name
        assert all(region == ["call"] for region in regions), name


def test_every_sample_leaves_in_a_window_and_every_event_pair_is_inside_one() -> None:
    """The samples a method returns are exactly those its windows sent to the parent, in order, and no start or
    end event is recorded outside a window (the parent's clock must see every timed call)."""
    for name in timing.method_names():
        runner = FakeRunner()
        run = timing.get_method(name).run(runner, flush_l2=True)
        assert [x for w in runner.windows for x in w] == run.samples_ms, name
        inside = False
        for step in runner.trace:
            inside = {"go": True, "timed": False}.get(step, inside)
            assert step != "record" or inside, name
            assert step not in ("audit", "rerandomise") or not inside or name == "robust", name


def test_every_method_but_the_leaderboard_ones_audits_re_randomised_inputs_at_random_positions() -> None:
    """At least two audits per loop run on activations re-randomised in place right before the audited call; their
    positions change from run to run (SystemRandom), so a candidate cannot know them in advance."""
    for name in ("gpumode-benchmark", "robust"):
        positions = set()
        for seed in range(8):
            runner = FakeRunner()
            method = timing.get_method(name)
            method.rng = random.Random(seed)
            method.run(runner, flush_l2=False)
            assert len(runner.fresh_audited) >= 2, name
            assert len(runner.fresh_value_audits) == len(runner.fresh_audited), name  # each re-randomisation checked
            positions.add(tuple(runner.fresh_audited))
        assert len(positions) > 1, name
    for name in ("gpumode", "confirm"):  # fresh inputs every repeat: nothing to re-randomise
        runner = FakeRunner()
        timing.get_method(name).run(runner, flush_l2=False)
        assert not runner.fresh_value_audits, name


def test_robust_rotates_input_sets_and_flushes() -> None:
    runner = FakeRunner()
    run = timing.get_method("robust").run(runner, flush_l2=True)
    assert sorted(set(runner.cached)) == [0, 1, 2, 3] and not runner.fresh
    warmup = len(runner.calls) - len(run.samples_ms)
    assert warmup >= 3 and len(run.samples_ms) >= 10
    assert runner.flushes == len(runner.calls) == runner.after_calls  # every call flushed and checked after
    assert all(s == pytest.approx(1.0, abs=0.01) for s in run.samples_ms)
    assert runner.calls[warmup:] == [i % 4 for i in range(len(run.samples_ms))]  # rotation over the input sets
    assert len({id(a) for a in runner.args_seen}) == len(runner.args_seen)  # a new argument object per call
    assert len(runner.fresh_value_audits) >= 2  # in the loop, before the last call of random blocks
    assert timing.get_method("robust").run(r := FakeRunner(), flush_l2=False) and r.flushes == 0


def test_robust_times_blocks_back_to_back_and_audits_the_last_call_of_each() -> None:
    """One device sync per block (none between a block's calls), the block's last call audited, block lengths
    random so a candidate cannot tell which call is audited."""
    method = timing.Robust(rng=random.Random(7), min_samples=200, target_rel_se=0.0, time_cap_s=1.0)
    runner = FakeRunner()
    run = method.run(runner, flush_l2=True)
    warmup = len(runner.calls) - len(run.samples_ms)
    blocks = [b - warmup for b in runner.audited]
    lengths = [b - a for a, b in zip([0, *blocks], blocks, strict=False)]
    assert blocks[-1] == len(run.samples_ms) and len(lengths) > 3
    assert all(length >= 2 for length in lengths) and len(set(lengths[1:])) > 1  # random lengths
    syncs = [b - a for a, b in zip(runner.syncs_at_audit, runner.syncs_at_audit[1:], strict=False)]
    assert syncs and all(n == 1 for n in syncs)  # no sync inside a block: one ends it (and its window)
    # ~10 ms of (fake, 1 ms) calls per block after the first, between n/2 and 3n/2
    assert all(5 <= length <= 15 for length in lengths[1:])


def test_robust_enqueues_each_block_behind_a_hold_of_its_device_time() -> None:
    """A spin kernel before every block (never inside a timed region) lasting about the block's device time, so a
    host slower than the device does not stretch the events; capped, so host time well beyond it still shows."""
    method = timing.Robust(rng=random.Random(3), min_samples=100, target_rel_se=0.0, time_cap_s=1.0)
    runner = FakeRunner()
    run = method.run(runner, flush_l2=False)
    blocks = runner.trace[runner.trace.index("hold") :]
    starts = [i for i, step in enumerate(blocks) if step == "hold"]
    lengths = [blocks[a:b].count("call") for a, b in zip(starts, [*starts[1:], len(blocks)], strict=False)]
    assert len(runner.holds) == len(lengths) > 3 and sum(lengths) == len(run.samples_ms)
    for hold, length in zip(runner.holds[1:], lengths[1:-1], strict=False):
        assert hold == pytest.approx(length * 1.0, rel=0.01)  # the fake calls take 1 ms of device time
    assert all(region == ["call"] for region in runner.timed_regions())
    capped = timing.Robust(rng=random.Random(3), min_samples=20, target_rel_se=0.0, hold_cap_ms=3.0)
    capped.run(r := FakeRunner(), flush_l2=False)
    assert max(r.holds) == 3.0


def test_robust_block_length_tracks_the_call_time() -> None:
    method = timing.Robust(rng=random.Random(1))
    assert method.block_length(None) == 4
    assert all(2 <= method.block_length(1.0) <= 3 for _ in range(20))  # a 1 s call: the shortest blocks
    long_calls = {method.block_length(0.001) for _ in range(200)}
    assert min(long_calls) >= 5 and max(long_calls) <= 15
    short = {method.block_length(1e-6) for _ in range(200)}
    assert max(short) <= 96 and min(short) >= 32  # capped at max_block (64) +- 50 %


def test_gpumode_uses_fresh_inputs_and_checks_every_repeat() -> None:
    runner = FakeRunner()
    run = timing.get_method("gpumode").run(runner, flush_l2=True)
    assert runner.flushes == 0  # no L2 flush upstream
    assert runner.fresh == [i + 1 for i in range(len(run.samples_ms))]  # seed += 13 before every repeat
    assert 3 <= len(run.samples_ms) <= 100
    assert len(runner.audited) == len(run.samples_ms) + 1  # the first checked call, then every timed output
    assert runner.trace.count("sync") >= 2 * len(run.samples_ms)  # sync before the start and after the end


def test_gpumode_benchmark_reuses_one_data_object_like_upstream() -> None:
    runner = FakeRunner()
    run = timing.get_method("gpumode-benchmark").run(runner, flush_l2=True)
    assert set(runner.cached) == {0} and not runner.fresh and len(run.samples_ms) >= 3
    timed_args = runner.args_seen[1:]  # after the one checked call
    assert len({id(a) for a in runner.args_seen}) == 1 and len(timed_args) == len(run.samples_ms)
    assert runner.audited[0] == 1 and runner.audited[-1] == len(runner.calls)  # checked first call, last timed output
    assert set(runner.audited[1:-1]) <= set(runner.fresh_audited) and len(runner.fresh_audited) >= 2
    assert runner.flushes == 0
    # lean between repeats: full host checks on the checked call, the first and the last repeat and the audited ones;
    # a type check between
    full = len({1, len(runner.calls)} | set(runner.fresh_audited) | {2})
    assert runner.glances == len(run.samples_ms) + 1 - full and runner.after_calls == full


class NoisyRunner(FakeRunner):
    """Calls alternate between 1 and 2 fake ms, so only the kernel-time budget stops the repeats."""

    def extra_ms(self) -> float:
        return float(len(self.calls) % 2)


def test_gpumode_warm_up_is_upstreams_first_case_with_a_small_budget() -> None:
    for name, budget_ms in (("gpumode-benchmark", 100.0), ("gpumode", 10.0)):
        runner = NoisyRunner()
        timing.get_method(name).warm_up(runner, flush_l2=False)
        assert set(runner.cached) == {0} and not runner.audited and not runner.fresh_value_audits
        assert not runner.windows  # warm-up samples are discarded: no window reaches the parent
        timed = len(runner.timed_regions())
        assert timed == pytest.approx(budget_ms / 1.5, abs=2)  # summed kernel time just past the budget
    steady = FakeRunner()
    timing.get_method("gpumode-benchmark").warm_up(steady, flush_l2=False)
    assert len(steady.timed_regions()) == 3  # std_err/mean < 0.1 % after the minimum of 3 runs


def test_flashinfer_is_3_trials_of_50_with_clones_and_flushes() -> None:
    runner = FakeRunner()
    run = timing.get_method("flashinfer").run(runner, flush_l2=False)
    assert len(run.samples_ms) == 150
    assert runner.clones == runner.flushes == 3 * (10 + 50)
    assert sorted(set(runner.cached)) == [0, 1, 2]
    assert runner.fresh_value_audits == [0, 1, 2]  # one iteration per trial at a random position, re-randomised
    assert len(runner.audited) in (5, 6) and len(runner.fresh_audited) == 3  # and the last iteration of each trial


class _Task:
    name = "t"
    timing_methods = ("robust", "flashinfer")
    default_timing_method = "robust"


def test_method_selection() -> None:
    assert timing.resolve_method(_Task(), None) == "robust"
    assert timing.resolve_method(_Task(), "flashinfer") == "flashinfer"
    with pytest.raises(timing.TimingError, match="does not support timing method 'gpumode'"):
        timing.resolve_method(_Task(), "gpumode")
    with pytest.raises(timing.TimingError, match="unknown timing method 'fastest'"):
        timing.resolve_method(_Task(), "fastest")
    assert timing.resolve_method(SoftmaxTask(), None) == "robust"
    assert set(timing.method_names()) == {"robust", "gpumode", "gpumode-benchmark", "flashinfer", "confirm"}
    assert timing.HEADLINE["gpumode"] == "mean" and timing.HEADLINE["robust"] == "median"


def test_physics_floor() -> None:
    task = SoftmaxTask()
    config = task.benchmark_configs("cuda")[0]  # 4096 x 4096 fp32: 128 MiB moved
    flops, bytes_moved = task.flops_and_bytes(config)
    floor = timing.physics_floor(1.0, flops, bytes_moved, "NVIDIA H100 80GB HBM3")
    assert not floor.violated and floor.floor_ms == pytest.approx(bytes_moved / 3.35e12 * 1e3 * 0.8)
    fake = timing.physics_floor(0.001, flops, bytes_moved, "NVIDIA H100 80GB HBM3")
    assert fake.violated and "physics floor" in fake.evidence and "3.35 TB/s" in fake.evidence
    h200 = timing.physics_floor(0.025, flops, bytes_moved, "NVIDIA H200")
    assert h200.floor_ms == pytest.approx(bytes_moved / 4.8e12 * 1e3 * 0.8) and not h200.violated
    assert timing.physics_floor(0.0, flops, bytes_moved, "NVIDIA H100 PCIe").floor_ms == pytest.approx(
        bytes_moved / 2.0e12 * 1e3 * 0.8
    )
    compute_bound = timing.physics_floor(0.1, 1e12, 1.0, "NVIDIA H100 80GB HBM3", "bf16")
    assert compute_bound.violated and compute_bound.floor_ms == pytest.approx(1e12 / 989e12 * 1e3 * 0.8)
    unknown = timing.physics_floor(0.0, flops, bytes_moved, "Some Future GPU")
    assert unknown.floor_ms is None and not unknown.violated and "skipped" in unknown.evidence


def test_paired_comparison_statistics() -> None:
    same = [
        CompareSamples(config="a", incumbent_ms=[1.0, 1.01, 0.99, 1.0, 1.0], challenger_ms=[1.0, 0.99, 1.01, 1.0, 1.0])
    ]
    result = comparison_from_samples(same, ["a"])
    assert not result.improved and result.ci_low < 1 < result.ci_high and result.speedup == pytest.approx(1.0, abs=0.01)
    faster = [
        CompareSamples(
            config="a", incumbent_ms=[2.0, 2.02, 1.98, 2.0, 2.01], challenger_ms=[1.0, 1.0, 1.01, 0.99, 1.0]
        ),
        CompareSamples(config="b", incumbent_ms=[1.0] * 5, challenger_ms=[0.5, 0.51, 0.5, 0.49, 0.5]),
    ]
    result = comparison_from_samples(faster, ["a", "b"])
    assert result.improved and result.speedup == pytest.approx(2.0, rel=0.02) and result.ci_low > 1.9
    assert [c.config for c in result.per_config] == ["a", "b"] and result.per_config[0].incumbent_median_ms == 2.0
    noisy = [
        CompareSamples(config="a", incumbent_ms=[1.0, 1.3, 0.8, 1.2, 1.0], challenger_ms=[0.9, 1.0, 1.0, 0.95, 1.05])
    ]
    assert not comparison_from_samples(noisy, ["a"]).improved  # a small mean gain inside a wide interval
    assert timing.t_quantile_975(4) == pytest.approx(2.776) and timing.t_quantile_975(1000) == pytest.approx(1.96)


def test_gpu_mode_loops_put_null_windows_between_their_repeats_and_none_in_the_warm_up() -> None:
    from ksearch.tools.timing.methods import NULL_EVERY, NULL_FIRST

    for name in ("gpumode-benchmark", "gpumode"):
        runner = NoisyRunner()
        run = timing.get_method(name).run(runner, flush_l2=False)
        repeats = len(run.samples_ms)
        assert repeats > NULL_EVERY
        expected = sum(1 for i in range(repeats) if i < NULL_FIRST or i % NULL_EVERY == 0)
        assert runner.nulls == expected >= NULL_FIRST
        first = runner.trace.index("null")
        assert "go" not in runner.trace[:first] or runner.trace[:first].count("go") == runner.trace[:first].count(
            "timed"
        )
    steady = FakeRunner()
    timing.get_method("gpumode-benchmark").warm_up(steady, flush_l2=False)
    assert steady.nulls == 0
    robust = FakeRunner()
    timing.get_method("robust").run(robust, flush_l2=True)
    assert robust.nulls == 0  # blocks of calls: the null windows' rule is for one-call windows


class DisturbedRunner(FakeRunner):
    """Calls take 1 fake ms, except a call on re-randomised activations and the call after it: 3 ms (the host and the
    device back from the audit's gap, as on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.slow_next = 0

    def extra_ms(self) -> float:
        if not self.slow_next:
            return 0.0
        self.slow_next -= 1
        return 2.0

    def rerandomise(self, call: FakeCall, values: object) -> None:
        super().rerandomise(call, values)
        self.slow_next = 2


def test_gpumode_benchmarks_stop_rule_reads_the_repeats_no_audit_disturbed() -> None:
    """The audited repeats and the ones after them read slower; counted by the rule they would keep the loop going
    (the std_err of 1 and 3 ms samples never falls under 0.1 %) to its 100 repeats. Read without them, the rule stops
    once its two re-randomised repeats are done and the undisturbed repeats agree, and not before the score can leave
    the disturbed ones out (at least half the windows and three, the last, audited, not among them)."""
    for _ in range(20):  # the audits' positions are drawn anew each time
        runner = DisturbedRunner()
        run = timing.get_method("gpumode-benchmark").run(runner, flush_l2=False)
        assert len(runner.fresh_audited) >= 2
        assert len(run.samples_ms) < 100, run.samples_ms
        undisturbed = UndisturbedSamples()
        for position, sample in enumerate(run.samples_ms, start=2):  # calls are counted from the checked first one
            undisturbed.add(sample, position in runner.fresh_audited)
        assert max(undisturbed.kept) < 1.01  # the slow ones all left out
        scored = len(undisturbed.kept) - (run.samples_ms[-1] == undisturbed.kept[-1])
        assert scored >= max(3, len(run.samples_ms) / 2)
        assert undisturbed.should_stop(0.0, max_time_s=10.0, max_wall_s=120.0, max_repeats=100)


def test_undisturbed_samples_leave_out_each_audited_repeat_and_the_next() -> None:
    kept = UndisturbedSamples()
    for sample, audited in (
        (1.0, False),
        (5.0, True),
        (4.0, False),
        (1.1, False),
        (6.0, True),
        (7.0, True),
        (3.0, False),
        (1.2, False),
    ):
        kept.add(sample, audited)
    assert kept.kept == [1.0, 1.1, 1.2] and kept.disturbed == 5 and kept.total_ms == pytest.approx(28.3)


def test_the_undisturbed_rule_waits_for_a_scorable_loop_and_its_caps_count_every_repeat() -> None:
    caps = {"max_time_s": 10.0, "max_wall_s": 120.0, "max_repeats": 100}
    steady = UndisturbedSamples()
    for audited in (False, True, False, False, False):  # kept: 0, 3, 4 of five; the last, audited, is not scored
        steady.add(1.0, audited)
    assert not steady.should_stop(0.0, **caps)  # two scored of five
    steady.add(1.0, False)
    assert steady.should_stop(0.0, **caps)  # three of six
    assert not UndisturbedSamples(kept=[1.0, 1.0], disturbed=0).should_stop(0.0, **caps)  # fewer than three repeats
    slow = UndisturbedSamples()
    for audited in (False, True, False, True):  # 3 s repeats: 12 s of kernel time, one of it undisturbed
        slow.add(3000.0, audited)
    assert slow.should_stop(0.0, **caps)
    assert UndisturbedSamples(kept=[1.0], disturbed=99).should_stop(0.0, **caps)  # the hundredth repeat


def test_the_undisturbed_rule_keeps_upstreams_strict_caps_from_the_third_repeat() -> None:
    """Upstream's caps are strict (``>``): a loop exactly at one goes on, one past it stops, from the third repeat."""
    caps = {"max_time_s": 30.0, "max_wall_s": 120.0, "max_repeats": 100}
    at_caps = UndisturbedSamples()
    for _ in range(3):
        at_caps.add(10_000.0, False)  # 30.0 s of kernel time exactly; two of three scored, too few for precision
    assert not at_caps.should_stop(0.0, **caps)
    assert not at_caps.should_stop(120.0, **caps)  # the wall exactly at its cap
    assert at_caps.should_stop(120.5, **caps)
    past = UndisturbedSamples()
    for _ in range(3):
        past.add(10_001.0, False)
    assert past.should_stop(0.0, **caps)  # the third repeat is the first the caps are read at


def test_the_undisturbed_rule_goes_on_while_its_kept_repeats_are_imprecise() -> None:
    """Enough repeats to score, but their spread is far over upstream's 0.1 %: no cap of the inner rule may end the
    loop, whether the last repeat was kept or audited."""
    caps = {"max_time_s": 30.0, "max_wall_s": 120.0, "max_repeats": 100}
    noisy = UndisturbedSamples()
    for index in range(9):
        noisy.add(2.0 if index % 2 == 0 else 1.0, False)
    assert not noisy.should_stop(0.0, **caps)
    noisy.add(1.5, True)  # nine kept of ten, the audited last left out
    assert not noisy.should_stop(0.0, **caps)


class _Values:
    """Fresh values of the fake runner: input-sized tensors on a GPU (level 1's ReLU: 6.4 GB a set)."""


class OneFreshSetRunner(FakeRunner):
    """Asserts that a method asks for fresh values only once it has let go of the last ones it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.given: list[weakref.ref[_Values]] = []

    def fresh_values(self, call: FakeCall) -> object:
        assert all(ref() is None for ref in self.given), "fresh values asked for while the last ones are still held"
        values = _Values()
        self.given.append(weakref.ref(values))
        return values


@pytest.mark.parametrize("name", timing.method_names())
def test_a_method_holds_one_set_of_fresh_values_at_a_time(name: str) -> None:
    """A set of fresh values is as large as the inputs: robust's loop held the last block's while the next block's
    were made, one input set more than it needs beside its four rotated sets."""
    runner = OneFreshSetRunner()
    timing.get_method(name).run(runner, flush_l2=False)
    assert len(runner.given) >= 2 or name in ("gpumode", "confirm")  # these two make whole fresh sets instead


def test_robust_rotates_among_the_input_sets_that_fit_the_device() -> None:
    """Four sets of a 6.4 GB KernelBench input take a third of an 80 GB GPU: the loop keeps those that fit a quarter
    of it (``WorkerTimingRunner.sets_that_fit``), at least one."""
    for fitting, rotated in ((1_000, 4), (3, 3), (1, 1)):
        runner = FakeRunner()
        runner.fitting_sets = fitting
        timing.get_method("robust").run(runner, flush_l2=False)
        assert sorted(set(runner.calls)) == list(range(rotated)), fitting
