"""The trusted-timing judge (``ksearch.tools.evaluator.parent.ledger``) at every edge: each message the parent may
refuse, each term of the harness's allowance pinned to its arithmetic, each rule exactly at its limit and just beyond,
and the audit-evasion test at its thresholds.

Times are chosen so the arithmetic is exact in binary floating point where a test sits *on* a limit (a window of
0 ms, 2.75 ms); elsewhere a margin well inside the smallest change a wrong constant would make."""

from __future__ import annotations

import math
from dataclasses import asdict, astuple

import pytest

from ksearch.tools.evaluator.parent import ledger as ledger_module
from ksearch.tools.evaluator.parent import ledger_rules
from ksearch.tools.evaluator.parent.ledger import (
    METHOD_SHAPES,
    Calibration,
    ConfigFacts,
    MethodShape,
    TimingLedger,
    Window,
)
from ksearch.tools.evaluator.parent.ledger_rules import (
    DIGEST_MS,
    EVASION_FLOOR_MS,
    EVASION_RATIO,
    GAP_SLACK,
    GENERATION_FACTOR,
    HOLD_CAP_MS,
    HOST_GAP_SLACK,
    HOST_TIMING_JITTER_S,
    KERNEL_JITTER_S,
    MIN_CALL_OVERHEAD_MS,
    OVERHEAD_FACTOR,
    READ_JITTER_S,
    RELATIVE_SLACK,
    SPREAD_RATIO,
    TRIMMED,
    WINDOW_JITTER_MS,
    _audit_problem,
    gap_allowance_ms,
    judge,
    window_allowances,
)
from ksearch.tools.timing import methods as timing_methods


@pytest.fixture(autouse=True)
def _uncapped_window_overhead(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests pin each allowance term with round figures (0.25 ms a window); the cap on one-call windows'
    calibrated overhead has tests of its own (test_ledger.py)."""
    monkeypatch.setattr(ledger_rules, "WINDOW_OVERHEAD_CAP_MS", 1.0)


CAL = Calibration(window_overhead_ms=0.25, call_overhead_ms=0.5, flush_ms=0.25, copy_gbps=3.0)
"""Per window 0.25 * 3 = 0.75 ms; per back-to-back call 0.5 * 3 = 1.5 ms; a flush 0.25 * 1.5 = 0.375 ms; a copy of
one byte 1.5 * 2 / (3.0 * 1e6) = 1e-6 ms."""


def test_the_constants_are_the_documented_ones() -> None:
    assert (KERNEL_JITTER_S, WINDOW_JITTER_MS, READ_JITTER_S, RELATIVE_SLACK) == (0.010, 0.5, 0.025, 0.05)
    assert (HOST_TIMING_JITTER_S, GAP_SLACK, HOST_GAP_SLACK) == (0.1, 0.10, 0.25)
    assert (MIN_CALL_OVERHEAD_MS, OVERHEAD_FACTOR, HOLD_CAP_MS, TRIMMED) == (0.02, 3.0, 50.0, 0.1)
    assert (EVASION_RATIO, EVASION_FLOOR_MS, SPREAD_RATIO) == (3.0, 0.2, 0.5)
    assert (GENERATION_FACTOR, DIGEST_MS) == (1.5, 0.3)


def test_the_calibrations_defaults_and_a_methods_default_shape() -> None:
    assert Calibration().model_dump() == {
        "window_overhead_ms": 0.05,
        "window_overhead_median_ms": 0.0,
        "call_overhead_ms": 0.1,
        "gap_overhead_ms": 0.2,
        "flush_ms": 0.2,
        "copy_gbps": 1000.0,
        "host_copy_gbps": 0.0,
        "staging_on_host": False,
    }
    assert Calibration.model_validate({"flush_ms": 0.3, "from_a_newer_worker": 1}).flush_ms == 0.3
    assert asdict(MethodShape()) == {
        "flush_per_call": False,
        "hold_per_window": False,
        "flush_per_gap": False,
        "clone_per_gap": False,
        "trial_windows": 0,
        "trial_warmup": 0,
        "every_window_audited": False,
        "fresh_inputs_every_window": False,
        "min_fresh_audits": 0,
        "headline": "mean",
        "one_kernel_per_window": False,
    }
    assert astuple(ConfigFacts()) == (0, 0.0, 0.0)
    window = Window(config=0, run=0, opened=5.0)
    assert window.wall_ms == 0.0 and window.staged_bytes == 0 and not window.fresh and window.audits == []


# ---- the messages -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("config", "run"), [("0", 0), (0, "0"), (None, 0), (0, None)])
def test_a_window_needs_an_integer_config_and_run(config, run) -> None:
    ledger = TimingLedger()
    ledger.go(config, run, 1.0)
    assert ledger.malformed == ["a window without a config or run index"] and ledger.windows == []


def test_samples_must_close_the_open_window_of_their_config() -> None:
    closed_twice = TimingLedger()
    closed_twice.go(0, 0, 1.0)
    closed_twice.timed(0, [1.0], 1.002)
    closed_twice.timed(0, [1.0], 1.003)
    assert closed_twice.malformed == ["config 0: samples for a window that was never opened"]
    assert closed_twice.windows[0].closed == 1.002 and closed_twice.windows[0].samples_ms == [1.0]
    other = TimingLedger()
    other.go(0, 0, 1.0)
    other.timed(1, [1.0], 1.002)
    assert other.malformed == ["config 1: samples for a window that was never opened"]
    assert judge(other, "gpumode", CAL, configs=["a"]).evidence == (
        "the timing messages were out of order: config 1: samples for a window that was never opened"
    )


@pytest.mark.parametrize("samples", ["1.0", [], [1.0, "2.0"], [None], (1.0,)])
def test_a_window_closes_only_with_a_list_of_numbers(samples) -> None:
    ledger = TimingLedger()
    ledger.go(0, 0, 1.0)
    ledger.timed(0, samples, 1.002)
    assert ledger.malformed == ["config 0: a window closed without samples"] and ledger.windows[0].closed is None


def test_integer_samples_are_accepted_as_floats() -> None:
    ledger = TimingLedger()
    ledger.go(0, 0, 1.0)
    ledger.timed(0, [1, 2.5], 1.004)
    assert ledger.malformed == [] and ledger.windows[0].samples_ms == [1.0, 2.5]


def test_a_handoff_audits_only_the_window_just_closed_for_its_config() -> None:
    ledger = TimingLedger()
    ledger.handoff("bench", 0, 1, None, 10)  # before any window: the first checked call of a config
    ledger.go(0, 0, 1.0)
    ledger.handoff("bench", 0, 1, None, 10)  # the window is still open
    assert ledger.windows[0].audits == [] and ledger.windows[0].staged_bytes == 0
    ledger.timed(0, [1.0], 1.002)
    ledger.handoff("bench", 1, 1, None, 10)  # another config
    assert ledger.windows[0].audits == []
    ledger.handoff("bench", 0, 1, None, 100)
    ledger.handoff("audit", 0, 1, 7, 50)
    window = ledger.windows[0]
    assert window.audits == ["bench", "audit"] and window.staged_bytes == 150 and window.fresh


def test_an_audit_is_fresh_only_with_activation_values_no_earlier_call_of_the_config_saw() -> None:
    ledger = TimingLedger()
    for k, (seed, activation) in enumerate([(1, None), (1, 7), (1, 7), (2, 7), (1, 7)]):
        ledger.go(0, 0, float(k))
        ledger.timed(0, [1.0], k + 0.002)
        ledger.handoff("audit", 0, seed, activation, 0)
    assert [w.fresh for w in ledger.windows] == [False, True, False, True, False]


# ---- the allowance --------------------------------------------------------------------------------------------------


def _window(
    samples: list[float],
    *,
    wall: float = 0.0,
    run: int = 0,
    fresh: bool = False,
    staged: int = 0,
    audits: tuple[str, ...] = (),
) -> Window:
    return Window(
        config=0,
        run=run,
        opened=0.0,
        closed=wall / 1e3,
        samples_ms=list(samples),
        audits=list(audits),
        fresh=fresh,
        staged_bytes=staged,
    )


def test_back_to_back_calls_in_any_window_earn_every_window_the_per_call_allowance() -> None:
    shape = METHOD_SHAPES["gpumode-benchmark"]
    windows = [_window([1.0]), _window([1.0, 1.0, 1.0], staged=1000)]
    assert window_allowances(windows, shape, CAL, True, 0) == pytest.approx(
        [0.75 + 1.5, 0.75 + 3 * 1.5 + 1000e-6], rel=1e-12
    )
    assert window_allowances([_window([1.0]), _window([1.0])], shape, CAL, True, 0) == pytest.approx(
        [0.75, 0.75], rel=1e-12
    )


def test_the_overheads_have_a_floor() -> None:
    tiny = Calibration(window_overhead_ms=0.001, call_overhead_ms=0.001, flush_ms=0.0, copy_gbps=3.0)
    allowed = window_allowances([_window([1.0, 1.0])], METHOD_SHAPES["gpumode-benchmark"], tiny, True, 0)
    assert allowed == pytest.approx([0.06 + 2 * 0.06], rel=1e-12)


def test_the_copy_rate_has_a_floor_of_one_gb_per_second() -> None:
    slow = Calibration(window_overhead_ms=0.25, call_overhead_ms=0.5, flush_ms=0.25, copy_gbps=0.5)
    allowed = window_allowances([_window([1.0], staged=10**6)], METHOD_SHAPES["gpumode"], slow, True, 0)
    assert allowed == pytest.approx([0.75 + 10**6 * 3 / 1e6], rel=1e-12)  # as if 1 GB/s: 3 ms


def test_a_robust_block_is_allowed_its_flushes_and_a_hold_of_about_the_previous_blocks_time() -> None:
    shape, per_call = METHOD_SHAPES["robust"], 1.5 + 0.375
    windows = [
        _window([2.0, 2.0]),  # the first block of a run: a full-length hold
        _window([1.0, 1.0, 1.0], fresh=True),  # 3 calls x the previous median 2.0; its re-randomised inputs copied
        _window([1.0], run=1),  # a new method run (compare mode): a full hold again
        _window([100.0, 100.0], run=1),  # 2 x 1.0
        _window([1.0, 1.0, 1.0], run=1),  # 3 x 100, capped at 50
    ]
    expected = [
        0.75 + 2 * per_call + 50.0,
        0.75 + 3 * per_call + 6.0 + 2.0,
        0.75 + per_call + 50.0,
        0.75 + 2 * per_call + 2.0,
        0.75 + 3 * per_call + 50.0,
    ]
    assert window_allowances(windows, shape, CAL, True, 2 * 10**6) == pytest.approx(expected, rel=1e-12)
    no_flush = window_allowances(windows[:1], shape, CAL, False, 0)
    assert no_flush == pytest.approx([0.75 + 2 * 1.5 + 50.0], rel=1e-12)


def test_flashinfer_is_allowed_a_flush_and_a_clone_of_the_inputs_between_windows_not_in_them() -> None:
    """Each flashinfer window closes right after its call, so the flush and the clone lie between windows: the
    windows get what GPU MODE's one-call windows get, each gap the flush (0.375 ms) and the clone (1.0 ms)."""
    shape = METHOD_SHAPES["flashinfer"]
    assert window_allowances([_window([1.0])], shape, CAL, True, 10**6) == pytest.approx([0.75], rel=1e-12)
    assert window_allowances([_window([1.0])], METHOD_SHAPES["gpumode"], CAL, True, 10**6) == pytest.approx([0.75])
    facts = ConfigFacts(input_bytes=10**6)
    overhead = CAL.gap_overhead_ms * 3
    assert gap_allowance_ms(*_pair(), shape, CAL, facts) == pytest.approx(overhead + 0.375 + 1.0, rel=1e-12)


# ---- the wall-time rules --------------------------------------------------------------------------------------------


def _ledger(windows: list[Window], *, kernel_clock: bool = True) -> TimingLedger:
    return TimingLedger(windows=windows, kernel_clock=kernel_clock)


def _judge(windows: list[Window], method: str = "gpumode-benchmark", *, kernel_clock: bool = True, **kwargs):
    kwargs.setdefault("fresh_audits_possible", False)
    return judge(_ledger(windows, kernel_clock=kernel_clock), method, CAL, configs=["a"], **kwargs)


def test_one_window_may_claim_its_wall_time_plus_the_slack_and_half_a_millisecond() -> None:
    assert _window([1.0], wall=100.0).wall_ms == 100.0
    assert _judge([_window([105.4], wall=100.0)]) is None  # limit 100 * 1.05 + 0.5 = 105.5
    finding = _judge([_window([105.6], wall=100.0)])
    assert finding.rule == "timing_forgery" and "a window reports 105.600 ms" in finding.evidence
    assert _judge([_window([0.5])]) is None  # a 0 ms window claiming exactly the 0.5 ms jitter
    assert _judge([_window([0.5001])]).rule == "timing_forgery"


def test_all_windows_together_may_claim_their_wall_time_plus_the_slack_and_ten_milliseconds() -> None:
    assert _judge([_window([10.8], wall=10.0) for _ in range(30)]) is None  # 324 <= 300 * 1.05 + 10
    finding = _judge([_window([10.9], wall=10.0) for _ in range(30)])  # 327: each window within its own limit (11)
    assert finding.rule == "timing_forgery" and "30 timed calls report 327.000 ms" in finding.evidence
    assert _judge([_window([0.5]) for _ in range(20)]) is None  # exactly 10 ms over 0 ms of windows
    assert _judge([_window([0.5]) for _ in range(20)] + [_window([0.001])]).rule == "timing_forgery"


def test_with_the_parents_read_times_only_the_total_is_held_with_25_milliseconds() -> None:
    assert _judge([_window([12.9], wall=10.0) for _ in range(10)], kernel_clock=False) is None  # 129 <= 105 + 25
    assert _judge([_window([13.1], wall=10.0) for _ in range(10)], kernel_clock=False).rule == "timing_forgery"
    assert _judge([_window([12.9], wall=10.0) for _ in range(10)]).rule == "timing_forgery"  # the kernel's stamps


def test_the_cpu_timing_of_the_tests_is_held_with_100_milliseconds() -> None:
    windows = [_window([0.0], wall=100.75)]  # 100.75 - 0.75 allowed = 100 ms unexplained
    assert (
        judge(
            TimingLedger(windows=windows, host_timing=True),
            "gpumode-benchmark",
            CAL,
            configs=["a"],
            fresh_audits_possible=False,
        )
        is None
    )
    assert _judge(windows).rule == "timing_forgery"


def test_wall_time_beyond_the_allowance_may_reach_exactly_the_jitter() -> None:
    at_limit = _window([0.0], wall=10.75)  # 10.75 - 0.75 allowed = 10.0 ms unexplained
    assert at_limit.wall_ms == 10.75
    assert _judge([at_limit]) is None
    finding = _judge([_window([0.0], wall=10.76)])
    assert finding.rule == "timing_forgery" and "beyond what the harness's own work accounts for" in finding.evidence


def test_the_slack_scales_the_claimed_time_in_the_unexplained_rule() -> None:
    assert _judge([_window([150.0], wall=167.5)]) is None  # 167.5 - 150 * 1.05 - 0.75 = 9.25 unexplained
    assert _judge([_window([150.0], wall=169.0)]).rule == "timing_forgery"  # 10.75


def test_the_tenth_of_windows_with_the_most_unexplained_time_is_left_out_from_ten_windows_on() -> None:
    honest, stretched = _window([1.0], wall=1.5), _window([1.0], wall=15.0)  # 0 and 13.2 ms unexplained
    assert _judge([honest] * 9 + [stretched]) is None
    assert _judge([honest] * 8 + [stretched]).rule == "timing_forgery"  # nine windows: none left out
    assert _judge([honest] * 8 + [stretched] * 2).rule == "timing_forgery"  # only one of ten is left out
    assert _judge([honest] * 18 + [stretched] * 2) is None


def _two_windows(gap_ms: float) -> list[Window]:
    """Two one-call windows of 1.0 ms (1.05 ms wall each) ``gap_ms`` apart."""
    first = Window(config=0, run=0, opened=0.0, closed=1.05e-3, samples_ms=[1.0])
    opened = (1.05 + gap_ms) / 1e3
    return [first, Window(config=0, run=0, opened=opened, closed=opened + 1.05e-3, samples_ms=[1.0])]


def test_the_inputs_size_of_each_config_gives_flashinfer_its_clone_allowance() -> None:
    """The gap's allowance: 0.6 (loop) + 0.375 (flush) + 1.0 (clone of 1 MB) = 1.975 ms, then 10 ms and a tenth of
    the gap of slack; a 13 ms gap leaves 11.025 ms against 11.3 with the clone, 12.025 without."""
    windows = _two_windows(13.0)
    assert _judge(windows, "flashinfer", input_bytes={0: 10**6}) is None
    assert _judge(windows, "flashinfer").rule == "timing_forgery"
    assert _judge(windows, "flashinfer", input_bytes={1: 10**6}).rule == "timing_forgery"  # another config's size


def test_a_config_without_an_inputs_size_is_allowed_no_clone_at_all() -> None:
    exact = Calibration(window_overhead_ms=0.25, call_overhead_ms=0.5, flush_ms=0.25, copy_gbps=1.0)  # 3e-6 ms a byte
    window = _window([0.0], wall=0.75 + 10.0 + 2e-6)
    ledger = _ledger([window])
    assert judge(ledger, "flashinfer", exact, configs=["a"], flush_l2=False, fresh_audits_possible=False).rule == (
        "timing_forgery"
    )


def test_flashinfer_is_allowed_its_flush_whatever_the_task_says() -> None:
    """flashinfer-bench's loop flushes before every iteration (``FlashInfer.run`` ignores ``flush_l2``). A 12 ms gap
    less the loop and the flush (0.975 ms) leaves 11.025 ms, within 10 ms and a tenth of the gap (11.2); without the
    flush's allowance it would leave 11.4."""
    windows = _two_windows(12.0)
    assert _judge(windows, "flashinfer") is None
    assert _judge(windows, "flashinfer", flush_l2=False) is None
    assert _judge(windows, "gpumode-benchmark").rule == "timing_forgery"  # no flush between its windows


def _flashinfer_loop(*, boundary_ms: float, gap_ms: float = 0.5, sample: float = 1.0) -> list[Window]:
    """One config's flashinfer-bench loop as ksearch runs it: 3 trials of 50 one-call windows ``gap_ms`` apart, the
    first window of the second and third trial ``boundary_ms`` after the last of the trial before (each trial's last
    window audited, as ksearch's loop hands it to the checker)."""
    loop = timing_methods.FlashInfer()
    windows, clock = [], 0.0
    for _ in range(loop.trials):
        for iteration in range(loop.iterations):
            if windows:
                clock += (boundary_ms if iteration == 0 else gap_ms) / 1e3
            last = iteration == loop.iterations - 1
            window = Window(
                config=0,
                run=0,
                opened=clock,
                closed=clock + sample * 1.05e-3,
                samples_ms=[sample],
                audits=["bench"] if last else [],
            )
            clock = window.closed
            windows.append(window)
    return windows


def test_a_flashinfer_trial_s_first_window_follows_the_trial_s_inputs_and_warm_up() -> None:
    """Before a trial's first window the harness makes the trial's inputs (1.5 x making and digesting them: 9 ms)
    and runs 10 untimed iterations (each the loop, the flush and the clone: 0.975 + 1.0 ms, and the call at the
    config's median sample with 5 %: 1.05 ms). Those two gaps were rejected when each counted in full (the smoke suite
    on an H100, 2026-12-07: 57-322 ms "between timed windows" on every flashinfer-method evaluation)."""
    facts = {"input_bytes": {0: 10**6}, "generation_ms": {0: 2.0}, "digest_ms": {0: 4.0}}
    warm = 10 * (0.6 + 0.375 + 1.0 + 1.05)
    audit_and_inputs = 0.6 + 1.975 + (0.6 + 0.3 + 6.0) + (0.6 + 0.3 + 9.0)
    honest = _flashinfer_loop(boundary_ms=audit_and_inputs + warm)
    assert _judge(honest, "flashinfer", **facts) is None
    shape = METHOD_SHAPES["flashinfer"]
    assert (shape.trial_windows, shape.trial_warmup) == (50, 10)
    # each boundary 15 ms longer: 30 ms against 10 ms and a tenth of the gaps (about 15 ms) of slack
    stretched = _flashinfer_loop(boundary_ms=audit_and_inputs + warm + 15.0)
    assert _judge(stretched, "flashinfer", **facts).rule == "timing_forgery"
    # the warm-up is allowed only before a trial's first window: as much time after every window is work
    everywhere = _flashinfer_loop(boundary_ms=audit_and_inputs + warm, gap_ms=warm)
    assert _judge(everywhere, "flashinfer", **facts).rule == "timing_forgery"


def test_judge_requires_re_randomised_audits_unless_told_the_task_has_none() -> None:
    windows = [_window([1.0], wall=1.5) for _ in range(3)]
    finding = judge(_ledger(windows), "gpumode-benchmark", CAL, configs=["a"])
    assert (
        finding.rule == "audit_evasion"
        and "0 audits on re-randomised inputs reached the checker, 2" in finding.evidence
    )


# ---- the time between windows -------------------------------------------------------------------------------------

CAL_GAP = Calibration(window_overhead_ms=0.25, call_overhead_ms=0.5, gap_overhead_ms=0.25, flush_ms=0.25, copy_gbps=4.5)
"""Between windows: the loop 0.25 * 3 = 0.75 ms; a staged byte 1.5 * 3 / (4.5 * 1e6) = 1e-6 ms."""
FACTS = ConfigFacts(input_bytes=0, generation_ms=2.0, digest_ms=4.0)


def _pair(*, audits: tuple[str, ...] = (), staged: int = 0, fresh: bool = False) -> tuple[Window, Window]:
    return (
        Window(config=0, run=0, opened=0.0, closed=0.0, samples_ms=[0.0], audits=list(audits), staged_bytes=staged),
        Window(config=0, run=0, opened=1.0, closed=1.0, samples_ms=[0.0], fresh=fresh),
    )


def test_the_gap_allowance_of_each_kind_of_pair() -> None:
    plain = METHOD_SHAPES["gpumode-benchmark"]
    assert gap_allowance_ms(*_pair(), plain, CAL_GAP, FACTS) == pytest.approx(0.75, rel=1e-12)
    # after an audit: the loop again, the digest's fixed cost, 1.5 x the checker's digest, the staged outputs read 3x
    audited = _pair(audits=("audit",), staged=10**6)
    assert gap_allowance_ms(*audited, plain, CAL_GAP, FACTS) == pytest.approx(0.75 + 0.75 + 0.3 + 6.0 + 1.0, rel=1e-12)
    # before fresh values: the loop again, the digest's fixed cost, 1.5 x (making + digesting) them
    fresh = _pair(fresh=True)
    assert gap_allowance_ms(*fresh, plain, CAL_GAP, FACTS) == pytest.approx(0.75 + 0.75 + 0.3 + 9.0, rel=1e-12)
    both = _pair(audits=("bench",), fresh=True)
    assert gap_allowance_ms(*both, plain, CAL_GAP, FACTS) == pytest.approx(0.75 + 7.05 + 10.05, rel=1e-12)
    # GPU MODE's procedure makes a whole input set between any two windows
    assert gap_allowance_ms(*_pair(), METHOD_SHAPES["gpumode"], CAL_GAP, FACTS) == pytest.approx(10.8, rel=1e-12)


def test_the_gap_overheads_and_copy_rate_have_floors() -> None:
    tiny = Calibration(gap_overhead_ms=0.001, copy_gbps=0.5)  # as if 0.02 ms and 1 GB/s
    shape = METHOD_SHAPES["gpumode-benchmark"]
    assert gap_allowance_ms(*_pair(), shape, tiny, ConfigFacts()) == pytest.approx(0.06, rel=1e-12)
    audited = _pair(audits=("audit",), staged=10**6)
    assert gap_allowance_ms(*audited, shape, tiny, ConfigFacts()) == pytest.approx(0.12 + 0.3 + 4.5, rel=1e-12)


def _chain(
    *gaps_ms: float, runs: tuple[int, ...] | None = None, audited: tuple[int, ...] = (), fresh: tuple[int, ...] = ()
) -> list[Window]:
    """Windows of no length (each claims 0 ms) separated by ``gaps_ms``; ``audited``: windows followed by an audit;
    ``fresh``: windows timed on fresh values."""
    windows, t = [], 0.0
    for k in range(len(gaps_ms) + 1):
        run = runs[k] if runs is not None else 0
        windows.append(
            Window(
                config=0,
                run=run,
                opened=t,
                closed=t,
                samples_ms=[0.0],
                audits=["audit"] if k in audited else [],
                fresh=k in fresh,
            )
        )
        if k < len(gaps_ms):
            t += gaps_ms[k] / 1e3
    return windows


def _gap_judge(windows: list[Window], *, host: bool = False, **kwargs):
    ledger = TimingLedger(windows=windows, host_timing=host)
    return judge(ledger, "gpumode-benchmark", CAL_GAP, configs=["a"], fresh_audits_possible=False, **kwargs)


def test_a_gap_may_exceed_its_allowance_by_ten_milliseconds_and_a_tenth_of_the_time_between_windows() -> None:
    assert _gap_judge(_chain(11.0)) is None  # 11 - 0.75 = 10.25 <= 10 + 1.1
    assert _gap_judge(_chain(11.9)) is None
    finding = _gap_judge(_chain(13.0))  # 12.25 > 10 + 1.3 (it would pass with a quarter of the gap as slack)
    assert finding.rule == "timing_forgery" and "passed between timed windows" in finding.evidence


def test_a_gap_exactly_at_its_limit_passes_and_the_next_float_does_not() -> None:
    at_limit = 0.011944444444444445  # seconds: 11.944... ms - 0.75 == 10 + 0.1 x 11.944... in floating point
    gap_ms = at_limit * 1e3
    assert max(0.0, gap_ms - 0.75) == KERNEL_JITTER_S * 1e3 + GAP_SLACK * gap_ms  # the premise of this test
    windows = _chain(0.0)
    windows[1].opened = windows[1].closed = at_limit
    assert _gap_judge(windows) is None
    windows[1].opened = windows[1].closed = math.nextafter(at_limit, 1.0)
    assert _gap_judge(windows).rule == "timing_forgery"


def test_only_positive_gaps_add_to_the_slack() -> None:
    """Eight gaps of 0.5 ms give 0.4 ms of slack (not 0.8), so one gap of 12.6 ms is 0.05 ms too long."""
    assert _gap_judge(_chain(*[0.5] * 8, 12.6)).rule == "timing_forgery"  # 11.85 > 10 + 0.1 x 16.6
    assert _gap_judge(_chain(*[0.5] * 8, 12.3)) is None  # 11.55 <= 10 + 0.1 x 16.3


def test_the_cpu_timing_of_the_tests_allows_a_quarter_of_the_gaps_and_100_milliseconds() -> None:
    assert _gap_judge(_chain(120.0), host=True) is None  # 119.25 <= 100 + 30
    assert _gap_judge(_chain(140.0), host=True).rule == "timing_forgery"  # 139.25 > 100 + 35


def test_a_new_method_run_starts_a_new_timeline() -> None:
    """compare mode warms up between its runs: the time between two runs is no gap."""
    assert _gap_judge(_chain(1000.0, runs=(0, 1))) is None
    assert _gap_judge(_chain(1000.0, runs=(0, 0))).rule == "timing_forgery"


def test_the_checkers_costs_of_each_config_reach_the_gap_rule() -> None:
    """After an audit, 1.5 x the digest time (4 ms: 7.8 ms allowed); before fresh values, 1.5 x making and digesting
    them (2 + 4 ms: 10.8 ms allowed)."""
    after_audit = _chain(19.5, audited=(0,))  # 19.5 - 7.8 = 11.7 <= 10 + 1.95
    assert _gap_judge(after_audit, generation_ms={0: 2.0}, digest_ms={0: 4.0}) is None
    assert _gap_judge(after_audit, generation_ms={0: 4.0}, digest_ms={0: 2.0}).rule == "timing_forgery"  # 4.8 allowed
    assert _gap_judge(_chain(20.0, audited=(0,)), generation_ms={0: 2.0}, digest_ms={0: 4.0}).rule == "timing_forgery"
    assert _gap_judge(after_audit).rule == "timing_forgery"  # no digest time from the checker: 1.8 allowed
    before_fresh = _chain(23.0, fresh=(1,))  # 23 - 10.8 = 12.2 <= 10 + 2.3
    assert _gap_judge(before_fresh, generation_ms={0: 2.0}, digest_ms={0: 4.0}) is None
    assert _gap_judge(before_fresh, digest_ms={0: 4.0}).rule == "timing_forgery"  # 7.8 allowed
    assert _gap_judge(before_fresh, generation_ms={0: 2.0}).rule == "timing_forgery"  # 4.8 allowed
    assert (
        _gap_judge(before_fresh, generation_ms={1: 6.0}, digest_ms={1: 6.0}).rule == "timing_forgery"
    )  # another config
    # a config the checker gave no costs for is allowed none: 1.8 ms (it would pass with 1 ms of either)
    assert _gap_judge(_chain(13.0, audited=(0,))) is None  # 13 - 1.8 = 11.2 <= 10 + 1.3
    assert _gap_judge(_chain(14.0, audited=(0,))).rule == "timing_forgery"  # 12.2 > 11.4
    assert _gap_judge(_chain(14.0, fresh=(1,))).rule == "timing_forgery"
    audited_is_before = _chain(19.5, audited=(1,))  # the audit follows the second window: this gap is plain
    assert _gap_judge(audited_is_before, generation_ms={0: 2.0}, digest_ms={0: 4.0}).rule == "timing_forgery"


# ---- the CPU timing of the tests ------------------------------------------------------------------------------------


def test_with_host_clocks_a_window_is_not_held_to_its_own_wall_time() -> None:
    """The tests' CPU timing stamps windows with host clocks: the total is held with 100 ms, the median window with
    2 ms (the kernel's stamps: 0.1 ms), and no window to its own wall time."""
    windows = [_window([5.0], wall=1.0)] + [_window([0.0], wall=1.5) for _ in range(3)]
    ledger = TimingLedger(windows=windows, host_timing=True)
    assert judge(ledger, "gpumode-benchmark", CAL, configs=["a"], fresh_audits_possible=False) is None
    assert _judge(windows).rule == "timing_forgery"  # the kernel's stamps: a window reports 5 ms in 1 ms
    beyond = TimingLedger(windows=[_window([0.0], wall=100.76)], host_timing=True)
    assert judge(beyond, "gpumode-benchmark", CAL, configs=["a"], fresh_audits_possible=False).rule == "timing_forgery"
    typical = TimingLedger(windows=[_window([0.0], wall=10.0) for _ in range(3)], host_timing=True)
    finding = judge(typical, "gpumode-benchmark", CAL, configs=["a"], fresh_audits_possible=False)
    assert finding is not None and "median timed window" in finding.evidence and "at most 2.000 ms" in finding.evidence


# ---- the spread of a block ------------------------------------------------------------------------------------------


def _blocks(*samples: list[float]) -> list[Window]:
    return [_window(list(block), wall=sum(block) + 60.0) for block in samples]


def test_a_blocks_median_call_must_be_half_its_mean() -> None:
    assert _judge(_blocks([1.0, 1.0, 4.0]), "robust") is None  # the median's 3 ms is exactly half of 6 ms
    finding = _judge(_blocks([0.1, 0.1, 10.0]), "robust")
    assert finding.rule == "timing_forgery" and "not spread like calls of one kernel" in finding.evidence
    assert _judge(_blocks([0.1, 0.1, 0.1]), "robust") is None  # small calls, evenly spread
    assert _judge([_window([0.1, 0.1, 10.0], wall=15.2)], "gpumode-benchmark") is None  # a method without blocks
    assert _judge(_blocks([0.1, 10.0]), "robust") is None  # from three calls on


# ---- the audit rules ------------------------------------------------------------------------------------------------


def _audit(windows: list[Window], method: str = "gpumode-benchmark", fresh_possible: bool = True):
    return _audit_problem("a", windows, METHOD_SHAPES[method], fresh_possible)


def _windows(*rows: tuple[list[float], str | None, bool]) -> list[Window]:
    """Windows through the ledger's own messages: (samples, the kind of audit that followed or None, fresh)."""
    ledger = TimingLedger()
    for k, (samples, audit, fresh) in enumerate(rows):
        ledger.go(0, 0, float(k))
        ledger.timed(0, samples, k + 0.5)
        if audit is not None:
            ledger.handoff(audit, 0, 1000 + k, 2000 + k if fresh else None, 0)
    return ledger.windows


def _fresh(*audited: float, before: tuple[float, ...] = ()) -> list[Window]:
    return _windows(*[([*before, x], "audit", True) for x in audited])


def _typical(value: float, n: int = 8) -> list[Window]:
    return _windows(*[([value], None, False) for _ in range(n)])


def test_every_timed_call_must_be_checked_in_gpumode() -> None:
    windows = _windows(([1.0], "bench", False), ([1.0], None, False), ([1.0], "bench", False))
    assert "1 of 3 timed calls were not handed to the checker" in _audit(windows, "gpumode").evidence
    assert _audit(_windows(*[([1.0], "bench", False)] * 3), "gpumode") is None


def test_two_fresh_audits_are_required_and_none_when_the_task_cannot_re_randomise() -> None:
    assert "1 audits on re-randomised inputs" in _audit(_typical(1.0) + _fresh(1.0)).evidence
    assert _audit(_typical(1.0) + _fresh(1.0, 1.0)) is None
    assert _audit(_typical(1.0), fresh_possible=False) is None


@pytest.mark.parametrize(
    ("typical", "audited", "evades"),
    [
        (1.0, (3.19, 3.19), False),
        (1.0, (3.21, 3.21), True),  # median > 3 x typical + 0.2, at and beyond
        (1.0, (3.1, 3.1), False),  # the floor of 0.2 ms
        (2.0, (6.19, 6.19), False),
        (2.0, (6.21, 6.21), True),  # the ratio scales the typical time
        (1.0, (1.0, 5.0, 5.0), True),  # the median of the audited calls, not the fastest
        (1.0, (1.0, 1.0, 10.0), False),  # nor their mean
    ],
)
def test_audit_evasion_threshold_on_the_median_audited_call(
    typical: float, audited: tuple[float, ...], evades: bool
) -> None:
    finding = _audit(_typical(typical) + _fresh(*audited))
    assert (finding is not None and finding.rule == "audit_evasion" and "new values" in finding.evidence) is evades


def test_an_audited_median_exactly_at_the_threshold_is_not_evasion() -> None:
    limit = EVASION_RATIO * 1.0 + EVASION_FLOOR_MS
    assert _audit(_typical(1.0) + _fresh(limit, limit)) is None
    beyond = math.nextafter(limit, 10.0)
    assert _audit(_typical(1.0) + _fresh(beyond, beyond)).rule == "audit_evasion"


@pytest.mark.parametrize("typical,audited", [(2.731, 8.4242), (5.6624, 19.7472)])
def test_when_the_cpu_times_the_evasion_bound_is_eight_times_plus_two_milliseconds(
    typical: float, audited: float
) -> None:
    """The honest TriMul reference on the CPU's timing: audited calls 3.08 times the others (2026-12-07) and 3.49
    times in a CI run (2026-12-08). Both pass there; an H100's bound would have rejected both."""
    windows = _typical(typical) + _fresh(audited, audited)
    assert _audit(windows).rule == "audit_evasion"
    shape = METHOD_SHAPES["gpumode-benchmark"]
    assert _audit_problem("a", windows, shape, True, host_timing=True) is None
    limit = 8.0 * typical + 2.0
    far = _typical(typical) + _fresh(limit * 1.01, limit * 1.01)
    assert _audit_problem("a", far, shape, True, host_timing=True).rule == "audit_evasion"


def test_the_other_calls_are_summed_up_by_the_methods_headline_statistic() -> None:
    others = _windows(*[([1.0], None, False)] * 7, ([9.0], None, False))  # mean 2.0, median 1.0
    assert _audit(others + _fresh(3.5, 3.5)) is None  # gpumode-benchmark: 3.5 <= 3 x 2.0 + 0.2
    finding = _audit(others + _fresh(3.5, 3.5), "robust")  # robust: 3.5 > 3 x 1.0 + 0.2
    assert finding.rule == "audit_evasion" and "1.0000 ms (median)" in finding.evidence


def test_the_audited_call_is_the_last_of_a_fresh_block_and_the_others_are_typical() -> None:
    blocks = _fresh(5.0, 5.0, before=(1.0,))  # two blocks [1.0, 5.0]: the others are the two 1.0 ms calls
    assert _audit(blocks).rule == "audit_evasion"
    one_other = _fresh(5.0, before=(1.0,)) + _fresh(5.0)
    assert _audit(one_other) is None  # one other call: too few to say what is typical
    finding = _audit(_fresh(5.0, 5.0, before=(1.0, 1.0)))
    assert "took 5.0000 ms (median of 2), the other timed calls 1.0000 ms" in finding.evidence


# ---- the median window --------------------------------------------------------------------------------------------


def test_a_loop_that_stops_after_a_few_forged_windows_is_caught_by_its_median_window() -> None:
    """Constant forged samples meet the stop rule at once: three windows of 2 ms claimed in 5 ms of wall hold 9 ms of
    unexplained time in all, under the per-config 10 ms, but the median window holds 3 ms."""
    forged = [_window([2.0], wall=5.0) for _ in range(3)]
    finding = _judge(forged)
    assert finding is not None and finding.rule == "timing_forgery" and "median timed window" in finding.evidence


def test_the_median_rule_needs_three_windows_and_allows_a_share_of_the_claim() -> None:
    assert _judge([_window([2.0], wall=5.0) for _ in range(2)]) is None  # the total's to judge: 6 ms
    # 44 - 40 * 1.05 - 0.75 = 1.25 ms per window: over the 0.1 ms floor, under a tenth of the 40 ms claim
    assert _judge([_window([40.0], wall=44.0) for _ in range(3)]) is None
    assert _judge([_window([2.0], wall=3.0) for _ in range(3)]) is None  # 0.15 ms per window
    finding = _judge([_window([2.0], wall=3.5) for _ in range(3)])  # 0.65 ms: over a tenth of 2 ms
    assert finding is not None and "at most 0.200 ms" in finding.evidence


def test_a_descheduled_window_among_honest_ones_leaves_the_median_alone() -> None:
    windows = [_window([1.0], wall=1.1) for _ in range(9)] + [_window([1.0], wall=9.0)]
    assert _judge(windows) is None


def test_the_median_floors_with_and_without_the_kernels_stamps() -> None:
    """Claims of 0 ms leave only the floor: 0.1 ms with the kernel's stamps, 1 ms where the parent stamps (the
    harness's 0.75 ms allowed beside it here)."""
    assert _window([0.0], wall=1.75).wall_ms == 1.75
    assert _judge([_window([0.0], wall=0.75 + 0.05) for _ in range(3)]) is None
    caught = _judge([_window([0.0], wall=0.75 + 0.15) for _ in range(3)])
    assert caught is not None and "at most 0.100 ms" in caught.evidence
    assert _judge([_window([0.0], wall=1.75) for _ in range(3)], kernel_clock=False) is None  # exactly at the floor
    read = _judge([_window([0.0], wall=2.25) for _ in range(3)], kernel_clock=False)
    assert read is not None and "at most 1.000 ms" in read.evidence


# ---- null windows ----------------------------------------------------------------------------------------------------
def _null(sample: float = 0.0, *, wall: float = 0.0, config: int = 0, closed: bool = True) -> Window:
    return Window(
        config=config, run=0, opened=0.0, closed=wall / 1e3 if closed else None, samples_ms=[sample], null=True
    )


def _null_judged(timed: list[Window], nulls: list[Window]) -> ledger_module.Finding | None:
    ledger = _ledger(timed + nulls)
    return ledger_rules._null_problem("a", timed, ledger.nulls(0), ledger)


def test_null_windows_are_kept_apart_closed_and_by_config() -> None:
    open_timed = Window(config=0, run=0, opened=0.0)
    ledger = _ledger(
        [_window([1.0], wall=1.1), _null(wall=0.1), _null(wall=0.1, config=1), _null(closed=False), open_timed]
    )
    assert [len(w) for w in ledger.by_config().values()] == [1]  # neither the nulls nor the open window
    assert ledger.nulls(0) == [ledger.windows[1]] and ledger.nulls(1) == [ledger.windows[2]]
    assert ledger.nulls_between(0.0, 1.0) * 1e3 == pytest.approx(0.2)  # both closed nulls; the open one not counted


def test_the_null_rule_needs_three_of_each_and_one_call_windows() -> None:
    slow = [_window([0.5], wall=0.5 * 1.05 + 0.3) for _ in range(3)]  # 0.3 ms beyond each call
    nulls = [_null(wall=0.02) for _ in range(3)]
    assert _null_judged(slow, nulls) is not None  # exactly three of each: judged
    assert _null_judged(slow, nulls[:2]) is None
    assert _null_judged(slow[:2], nulls) is None
    blocks = [_window([0.5, 0.5], wall=1.05 + 0.3)] + slow[:2]
    assert _null_judged(blocks, nulls) is None  # a block among the windows: robust's loops are not judged by it
    assert _null_judged([_window([0.5, 0.5], wall=1.05 + 0.3) for _ in range(3)], nulls) is None


def test_the_null_rule_allows_the_calls_slack_and_the_nulls_own_overhead() -> None:
    margin = ledger_rules.NULL_MARGIN_MS
    assert margin == 0.05
    nulls = [_null(0.05, wall=0.07) for _ in range(3)]  # 0.02 ms beyond its own events
    # 2 ms calls: 5 % slack (0.1 ms), then the margin beyond the nulls' 0.02
    assert _null_judged([_window([2.0], wall=2.1 + 0.02 + margin - 1e-9) for _ in range(3)], nulls) is None
    assert _null_judged([_window([2.0], wall=2.1 + 0.02 + margin + 0.005) for _ in range(3)], nulls) is not None
    zero = [_null(wall=0.0) for _ in range(3)]
    assert _null_judged([_window([0.0], wall=margin) for _ in range(3)], zero) is None  # exactly at the margin
    assert _null_judged([_window([0.0], wall=margin + 0.005) for _ in range(3)], zero) is not None
    # beyond the calls by more than the margin alone, not more than the nulls' 0.05 plus the margin
    busy = [_null(0.0, wall=0.05) for _ in range(3)]
    assert _null_judged([_window([0.0], wall=0.05 + margin - 1e-9) for _ in range(3)], busy) is None
    assert _null_judged([_window([0.0], wall=0.05 + margin + 0.005) for _ in range(3)], busy) is not None


def test_slow_null_windows_between_two_timed_ones_are_the_harnesss_time() -> None:
    ledger = TimingLedger()
    now = 0.0
    for _ in range(10):
        ledger.go(0, 0, now)
        ledger.timed(0, [1.0], now + 0.0011)
        now += 0.0012
        ledger.go(0, 0, now, null=True)  # 3 ms null windows: 27 ms between the timed ones in all
        ledger.timed(0, [0.001], now + 0.003)
        now += 0.0031
    assert judge(ledger, "gpumode-benchmark", CAL, configs=["a"], fresh_audits_possible=False) is None


def test_null_windows_holding_calls_are_forged() -> None:
    """A candidate that writes ``timed`` then a null-marked ``go`` on the channel inside its call would put the
    harness's real sample in a null window, out of the score (red-team review of 2026-11-27): a null window's sample is
    two events recorded back to back, never a call. The typical one is held tight, a single one loosely (an H100 read
    honest null samples of 0.016-0.027 ms in median, single ones up to 0.074 ms)."""
    timed = [_window([0.03], wall=0.05) for _ in range(3)]
    honest = [_null(0.004, wall=0.02) for _ in range(3)]
    assert _null_judged(timed, honest) is None
    swallowed = _null_judged(timed, honest[:1] + [_null(0.3, wall=0.32) for _ in range(2)])
    assert swallowed is not None and swallowed.rule == "timing_forgery" and "median of 3 null" in swallowed.evidence
    assert (
        _null_judged(timed, honest[:1] + [_null(0.1, wall=0.12) for _ in range(2)]) is None
    )  # the median at its bound
    assert _null_judged(timed, honest[:2] + [_null(0.3, wall=0.32)]) is None  # one slow null: the host descheduled
    assert _null_judged(timed, honest[:2] + [_null(1.0, wall=1.02)]) is None  # a single one at its bound
    one = _null_judged(timed, honest[:2] + [_null(1.2, wall=1.22)])
    assert one is not None and "a null window" in one.evidence
    few = _ledger(timed + [_null(0.3, wall=0.32)])  # fewer nulls than the median needs: only the bound of each
    assert ledger_rules._null_problem("a", timed, few.nulls(0), few) is None
    host = _ledger(timed + [_null(1.5, wall=1.6) for _ in range(3)])
    host.host_timing = True  # the CPU's clocks on busy cores: two reads may be a millisecond apart
    assert ledger_rules._null_problem("a", timed, host.nulls(0), host) is None
    host.windows.append(_null(15.0, wall=15.1))
    assert ledger_rules._null_problem("a", timed, host.nulls(0), host) is None
    host.windows.append(_null(25.0, wall=25.1))
    assert ledger_rules._null_problem("a", timed, host.nulls(0), host) is not None
    host.windows[-1:] = [_null(2.5, wall=2.6) for _ in range(3)]
    assert ledger_rules._null_problem("a", timed, host.nulls(0), host) is not None


# ---- a staging buffer in host memory -----------------------------------------------------------------------------


def test_host_staging_adds_the_crossings_at_the_measured_host_rate() -> None:
    """Where CUDA IPC is unavailable the outputs and handed inputs cross through host memory: an audit's output goes
    back to the device to be compared, a fresh set's handed inputs go to it (an H100, 2026-12-07: ~23 ms audit gaps
    where the device-only allowance gave ~7, every honest TriMul evaluation rejected)."""
    plain = METHOD_SHAPES["gpumode-benchmark"]
    facts = ConfigFacts(input_bytes=4 * 10**6, generation_ms=2.0, digest_ms=4.0)
    host = CAL_GAP.model_copy(update={"host_copy_gbps": 2.0, "staging_on_host": True})  # 1.5 / 2e6 ms a byte
    audited = _pair(audits=("audit",), staged=10**6)
    device_only = gap_allowance_ms(*audited, plain, CAL_GAP, facts)
    assert gap_allowance_ms(*audited, plain, host, facts) == pytest.approx(device_only + 0.75, rel=1e-12)
    fresh = _pair(fresh=True)
    assert gap_allowance_ms(*fresh, plain, host, facts) == pytest.approx(
        gap_allowance_ms(*fresh, plain, CAL_GAP, facts) + 3.0, rel=1e-12
    )
    # a worker that measured no host rate: the floor of 1 GB/s
    unmeasured = CAL_GAP.model_copy(update={"staging_on_host": True})
    assert gap_allowance_ms(*audited, plain, unmeasured, facts) == pytest.approx(device_only + 1.5, rel=1e-12)
    # in a window, the staged copy crosses once more
    window = Window(config=0, run=0, opened=0.0, closed=0.0, samples_ms=[0.0], staged_bytes=10**6)
    (on_device,) = window_allowances([window], plain, CAL_GAP, False, 0)
    (on_host,) = window_allowances([window], plain, host, False, 0)
    assert on_host == pytest.approx(on_device + 0.75, rel=1e-12)


def test_where_the_staging_buffer_lies_is_the_parents_word_never_the_workers() -> None:
    from ksearch.contracts.exchange import StagingHandle
    from ksearch.tools.evaluator.parent.outcome import staging_on_host

    assert not Calibration.of_worker({"copy_gbps": 9.0, "staging_on_host": 1.0}, staging_on_host=False).staging_on_host
    assert Calibration.of_worker({"host_copy_gbps": 7.0}, staging_on_host=True).host_copy_gbps == 7.0
    shm = StagingHandle(kind="shm", nbytes=1 << 20, generation=1, shm_name="x")
    ipc = StagingHandle(kind="cuda_ipc", nbytes=1 << 20, generation=1, ipc="y")
    assert staging_on_host(shm, "cuda:0") and not staging_on_host(ipc, "cuda:0")
    assert not staging_on_host(shm, "cpu") and not staging_on_host(None, "cuda")
