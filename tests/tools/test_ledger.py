"""The parent's ledger of timed windows (``ksearch.tools.evaluator.parent.ledger``): what it accepts and what it
refuses.

Pure: windows are built by hand with the wall times and samples an honest or a forging worker would produce."""

from __future__ import annotations

import pytest

from ksearch.tools.evaluator.parent.ledger import METHOD_SHAPES, Calibration, ConfigFacts, TimingLedger
from ksearch.tools.evaluator.parent.ledger_rules import allowance_ms, gap_allowance_ms, judge
from ksearch.tools.evaluator.shared.pairing import alternating

CAL = Calibration(window_overhead_ms=0.03, call_overhead_ms=0.05, flush_ms=0.1, copy_gbps=2000.0)


def _ledger(windows: list[tuple[int, float, list[float], list[str], int | None]]) -> TimingLedger:
    """(config, wall ms, samples, audit kinds, activation seed of the audit) per window, back to back."""
    ledger, now = TimingLedger(), 100.0
    for config, wall_ms, samples, audits, activation in windows:
        ledger.go(config, 0, now)
        now += wall_ms / 1e3
        ledger.timed(config, samples, now)
        for kind in audits:
            ledger.handoff(kind, config, 7, activation, 4096)
            ledger.relay(now + 0.0001, now + 0.0051)  # the worker waits 5 ms for the checker's answer
            now += 0.005
        now += 0.0002  # the harness between windows (not in any window)
    return ledger


def _repeats(config: int, n: int, sample: float, wall: float, fresh_at: tuple[int, ...] = (0, 2)) -> list:
    rows = []
    for i in range(n):
        fresh = i in fresh_at
        rows.append((config, wall, [sample], ["audit"] if fresh else [], 1000 + i if fresh else None))
    return rows


def test_honest_repeats_pass_and_their_samples_are_the_score() -> None:
    ledger = _ledger(_repeats(0, 20, 2.0, 2.05) + _repeats(1, 20, 0.05, 0.09))
    assert judge(ledger, "gpumode-benchmark", CAL, configs=["a", "b"]) is None
    assert ledger.samples(0) == [2.0] * 20 and ledger.samples(1) == [0.05] * 20


def test_samples_understating_the_wall_time_are_forged() -> None:
    """The issue's six forgers reported 0.4x of the real time: the parent's windows took the real time."""
    ledger = _ledger(_repeats(0, 20, 4.1, 10.25))
    finding = judge(ledger, "gpumode-benchmark", CAL, configs=["a"])
    assert finding is not None and finding.rule == "timing_forgery"
    assert "82.000 ms" in finding.evidence and "205.000 ms" in finding.evidence


def test_a_small_understatement_of_long_calls_is_caught_too() -> None:
    ledger = _ledger(_repeats(0, 30, 9.0, 10.0))  # 10 % off on 10 ms calls
    assert judge(ledger, "gpumode-benchmark", CAL, configs=["a"]).rule == "timing_forgery"


def test_samples_claiming_more_than_the_wall_time_are_forged() -> None:
    ledger = _ledger(_repeats(0, 10, 8.0, 2.0))
    finding = judge(ledger, "gpumode-benchmark", CAL, configs=["a"])
    assert finding is not None and finding.rule == "timing_forgery" and "took 20.000 ms" in finding.evidence


def test_out_of_order_or_missing_windows_are_forged() -> None:
    ledger = TimingLedger()
    ledger.timed(0, [1.0], 1.0)  # never opened
    assert judge(ledger, "gpumode", CAL, configs=["a"]).rule == "timing_forgery"
    assert (
        judge(_ledger(_repeats(0, 5, 1.0, 1.05)), "gpumode-benchmark", CAL, configs=["a", "b"]).rule == "timing_forgery"
    )
    nested = TimingLedger()
    nested.go(0, 0, 1.0)
    nested.go(0, 0, 1.1)
    assert nested.malformed


def test_robust_blocks_allow_the_hold_the_flushes_and_the_harness_between_calls() -> None:
    """A block: a spin kernel of about the previous block's device time, then calls with a flush before each."""
    rows = []
    previous = None
    for block in range(12):
        samples = [0.5] * 10
        hold = 50.0 if previous is None else 10 * 0.5
        wall = hold + sum(samples) + 10 * (0.1 + 0.05)
        fresh = block in (1, 5)
        rows.append((0, wall, samples, ["audit" if fresh else "bench"], 50 + block if fresh else None))
        previous = samples
    assert judge(_ledger(rows), "robust", CAL, configs=["a"]) is None
    forged = [(c, w, [x * 0.5 for x in s], a, f) for c, w, s, a, f in rows]
    assert judge(_ledger(forged), "robust", CAL, configs=["a"]).rule == "timing_forgery"


def test_launch_bound_honest_robust_calls_pass() -> None:
    """A host slower than the device: the candidate's own launch time is inside its events; only the harness's work
    between calls is outside them."""
    rows = [(0, 50.0 + 64 * (0.3 + 0.05), [0.3] * 64, ["bench"], None)]
    rows += [(0, 64 * 0.3 + 64 * (0.3 + 0.05), [0.3] * 64, ["audit"], 9 + k) for k in range(3)]
    assert judge(_ledger(rows), "robust", CAL, configs=["a"], flush_l2=False) is None


def test_every_timed_output_must_be_checked_in_the_leaderboard_methods() -> None:
    rows = [(0, 1.05, [1.0], ["bench"], None)] * 5 + [(0, 1.05, [1.0], [], None)]
    finding = judge(_ledger(rows), "gpumode", CAL, configs=["a"])
    assert finding.rule == "audit_evasion" and "1 of 6" in finding.evidence


def test_re_randomised_audits_are_required_where_the_task_allows_them() -> None:
    rows = _repeats(0, 10, 1.0, 1.05, fresh_at=(3,))
    assert judge(_ledger(rows), "gpumode-benchmark", CAL, configs=["a"]).rule == "audit_evasion"
    assert judge(_ledger(rows), "gpumode-benchmark", CAL, configs=["a"], fresh_audits_possible=False) is None
    again = _repeats(0, 10, 1.0, 1.05, fresh_at=(3,)) + [(0, 1.05, [1.0], ["audit"], 1003)]  # the same values again
    assert judge(_ledger(again), "gpumode-benchmark", CAL, configs=["a"]).rule == "audit_evasion"


def test_a_kernel_that_works_only_when_the_values_change_is_caught() -> None:
    """It replays its last output unless a sample of the inputs changed: correct on every audit, fast otherwise."""
    rows = []
    for i in range(12):
        fresh = i in (1, 6)
        sample = 2.0 if fresh else 0.02
        rows.append((0, sample + 0.04, [sample], ["audit"] if fresh else [], 70 + i if fresh else None))
    finding = judge(_ledger(rows), "gpumode-benchmark", CAL, configs=["a"])
    assert finding is not None and finding.rule == "audit_evasion" and "new values" in finding.evidence
    noisy = [
        (0, s[0] + 0.04, [s[0] * (1.2 if f else 1.0)], a, f) for (_, _, s, a, f) in _repeats(0, 12, 1.0, 0, (1, 6))
    ]
    assert judge(_ledger(noisy), "gpumode-benchmark", CAL, configs=["a"]) is None  # 20 % slower: within noise


def test_the_allowance_grows_with_what_the_method_puts_in_a_window() -> None:
    """flashinfer-bench's flush and clone lie between ksearch's windows (each closes right after its call): the
    windows get no allowance for them, the gaps do (a 1 GB clone at 2 TB/s read and written: 1 ms, with its margin)."""
    windows = _ledger(_repeats(0, 10, 1.0, 1.0)).by_config()[0]
    plain = allowance_ms(windows, METHOD_SHAPES["gpumode-benchmark"], CAL, True, 0)
    clone = allowance_ms(windows, METHOD_SHAPES["flashinfer"], CAL, True, 10**9)
    assert plain == pytest.approx(10 * 0.09 + 10 * 4096 * 3 / 2e9, rel=0.01)
    assert clone == pytest.approx(plain, rel=1e-9)
    before, after = windows[0], windows[1]
    facts = ConfigFacts(input_bytes=10**9)
    gap_plain = gap_allowance_ms(before, after, METHOD_SHAPES["gpumode-benchmark"], CAL, facts)
    gap_clone = gap_allowance_ms(before, after, METHOD_SHAPES["flashinfer"], CAL, facts)
    assert gap_clone == pytest.approx(gap_plain + 0.1 * 1.5 + 1.5, rel=1e-9)


def test_work_done_between_windows_is_forged_time() -> None:
    """The red team's first hole: a kernel that holds back its window's opening until its work is done claims an
    empty window; the work shows as time between windows that the checker's answers and the harness do not explain."""
    honest = _ledger(_repeats(0, 20, 5.0, 5.05))
    assert judge(honest, "gpumode-benchmark", CAL, configs=["a"]) is None
    rows = [(c, 0.01, [0.002], a, f) for c, _, _, a, f in _repeats(0, 20, 5.0, 0)]
    held = _ledger(rows)
    for _window, later in zip(held.windows, held.windows[1:]):  # 5 ms of work before every go
        later.opened += 0.005 * (held.windows.index(later))
        later.closed += 0.005 * (held.windows.index(later))
    finding = judge(held, "gpumode-benchmark", CAL, configs=["a"])
    assert finding is not None and finding.rule == "timing_forgery" and "between timed windows" in finding.evidence


def test_making_fresh_inputs_between_windows_is_the_harness_own_work() -> None:
    """In the leaderboard methods every window's inputs are made between windows: as long as the checker takes to
    make them (twice, and the digest) is allowed; every window must be checked on inputs of its own."""
    ledger, now = TimingLedger(), 0.0
    for k in range(12):
        ledger.go(0, 0, now)
        now += 0.00105
        ledger.timed(0, [1.0], now)
        ledger.handoff("bench", 0, 1000 + k, None, 4096)
        ledger.relay(now, now + 0.004)
        now += 0.004 + 0.006  # 6 ms making the next inputs
    assert judge(ledger, "confirm", CAL, configs=["a"], generation_ms={0: 2.5}, digest_ms={0: 1.0}) is None
    assert (
        judge(ledger, "confirm", CAL, configs=["a"], generation_ms={0: 0.1}, digest_ms={0: 0.1}).rule
        == "timing_forgery"
    )
    ledger.windows[5].input_seeds = [1000]  # a repeat checked on the first repeat's inputs
    assert (
        judge(ledger, "confirm", CAL, configs=["a"], generation_ms={0: 2.5}, digest_ms={0: 1.0}).rule == "audit_evasion"
    )


def test_confirm_requires_a_check_of_every_window() -> None:
    rows = [(0, 1.05, [1.0], ["bench"], None)] * 5 + [(0, 1.05, [1.0], [], None)]
    assert judge(_ledger(rows), "confirm", CAL, configs=["a"]).rule == "audit_evasion"


def test_the_evasion_check_compares_with_the_statistic_the_score_uses() -> None:
    """Replays padded to most of an honest call on 60 % of the repeats, the rest instant: the others' median is close
    to the audited calls, their mean (gpumode-benchmark's headline) is not."""
    rows = []
    for i in range(20):
        fresh = i in (2, 9, 15)
        sample = 2.0 if fresh else (0.9 if i % 5 < 3 else 0.001)
        rows.append((0, sample + 0.04, [sample], ["audit"] if fresh else [], 300 + i if fresh else None))
    assert judge(_ledger(rows), "gpumode-benchmark", CAL, configs=["a"]).rule == "audit_evasion"
    assert judge(_ledger(rows), "robust", CAL, configs=["a"], flush_l2=False) is None  # robust's headline: the median


def test_a_block_whose_time_sits_on_one_call_is_forged() -> None:
    """Moving a block's time onto its first call keeps every window's sum and forges the median."""
    rows = []
    for block in range(8):
        samples = [10 * 0.5] + [0.0005] * 9
        hold = 50.0 if block == 0 else 10 * 0.0005  # the worker's own (forged) median sizes the next hold
        fresh = block in (1, 5)
        rows.append(
            (0, hold + 5.0 + 10 * 0.15, samples, ["audit" if fresh else "bench"], 50 + block if fresh else None)
        )
    finding = judge(_ledger(rows), "robust", CAL, configs=["a"])
    assert finding is not None and finding.rule == "timing_forgery" and "one kernel" in finding.evidence


def test_runs_alternate_in_abba_order() -> None:
    assert "".join(alternating(3)) == "abbaab"


def test_an_honest_window_stretched_by_the_scheduler_is_not_a_forgery() -> None:
    """The worker descheduled for 10 ms inside one window of twenty: left out as the tenth with the largest excess;
    the same 10 ms in every window is not."""
    rows = _repeats(0, 20, 1.0, 1.05)
    rows[7] = (0, 11.05, [1.0], [], None)
    assert judge(_ledger(rows), "gpumode-benchmark", CAL, configs=["a"]) is None
    every = [(c, 11.05, s, a, f) for c, _, s, a, f in _repeats(0, 20, 1.0, 0)]
    assert judge(_ledger(every), "gpumode-benchmark", CAL, configs=["a"]).rule == "timing_forgery"


def test_the_parents_read_times_widen_the_scheduling_allowance() -> None:
    rows = _repeats(0, 5, 1.0, 1.05)
    rows[3] = (0, 21.05, [1.0], [], None)  # too few windows to leave one out
    kernel = _ledger(rows)
    assert judge(kernel, "gpumode-benchmark", CAL, configs=["a"]).rule == "timing_forgery"
    kernel.kernel_clock = False  # stamps taken when the parent read them: 25 ms of scheduling allowed
    assert judge(kernel, "gpumode-benchmark", CAL, configs=["a"]) is None


def test_compare_assigns_each_run_to_a_side_by_its_place_in_the_abba_order() -> None:
    """The paired comparison is computed from the windows the parent received, never from the worker's report; which
    candidate a run timed follows from its index in the ABBA order."""
    from ksearch.tools.evaluator.parent.compare import samples_from_ledger
    from ksearch.tools.evaluator.parent.outcome import Outcome

    ledger, now = TimingLedger(), 10.0
    medians = {"a": 2.0, "b": 1.0}
    for run, side in enumerate(alternating(3)):
        for calls in (4, 6):  # two blocks per run, each behind a spin kernel (the first one's from the warm-up)
            ledger.go(0, run, now)
            now += (calls * medians[side] + (50.0 if calls == 4 else 4 * medians[side])) / 1e3
            ledger.timed(0, [medians[side]] * calls, now)
        ledger.ran(0, run, 2)  # the harness's count of the run's blocks
    outcome = Outcome(ledger=ledger, calibration=CAL.model_dump())
    [config] = samples_from_ledger(outcome, ["a"], 3, flush_l2=False)
    assert config.incumbent_ms == [2.0, 2.0, 2.0] and config.challenger_ms == [1.0, 1.0, 1.0]
    ledger.windows[-1].samples_ms = [10.0] * 6  # a run that claims more than its window could hold is refused
    ledger.windows[-1].opened = ledger.windows[-1].closed - 0.0001
    with pytest.raises(Exception, match="timing_forgery"):
        samples_from_ledger(outcome, ["a"], 3, flush_l2=False)


def test_the_score_leaves_out_the_windows_an_audit_disturbed() -> None:
    """Audited windows and the one after each audit's gap are judged but not scored; the rest reads like upstream's
    uninterrupted loop (2026-11-27 on an H200: those windows read 0.1-0.2 ms slower on launch-bound shapes)."""
    from ksearch.tools.evaluator.parent.ledger import scored_samples

    rows = []
    for i in range(20):
        audited = i in (3, 11)
        after = i in (4, 12)
        sample = 0.5 if audited or after else 0.3
        rows.append((0, sample + 0.04, [sample], ["audit"] if audited else [], 1000 + i if audited else None))
    ledger = _ledger(rows)
    assert judge(ledger, "gpumode-benchmark", CAL, configs=["a"]) is None
    scored, left_out = scored_samples(ledger, 0, "gpumode-benchmark")
    assert left_out == 4 and scored == [0.3] * 16
    assert scored_samples(ledger, 0, "robust") == (scored, 4)
    # Leaderboard mode checks every repeat upstream too: every window counts.
    assert scored_samples(ledger, 0, "gpumode") == (ledger.samples(0), 0)


def test_the_score_counts_every_window_when_too_few_would_remain() -> None:
    from ksearch.tools.evaluator.parent.ledger import scored_samples

    short = _ledger([(0, 0.35, [0.3], ["audit"], 1), (0, 0.35, [0.3], [], None), (0, 0.35, [0.31], ["bench"], None)])
    assert scored_samples(short, 0, "gpumode-benchmark") == ([0.3, 0.3, 0.31], 0)
    dense = _ledger([(0, 0.35, [0.3], ["audit"] if i % 2 == 0 else [], i if i % 2 == 0 else None) for i in range(10)])
    assert scored_samples(dense, 0, "gpumode-benchmark") == (dense.samples(0), 0)  # none left undisturbed
    assert scored_samples(dense, 5, "gpumode-benchmark") == ([], 0)  # a config never timed


def test_a_timed_evaluation_scores_the_undisturbed_windows_and_says_how_many_it_left_out() -> None:
    from ksearch.contracts.exchange import ConfigSamples
    from ksearch.tasks.registry import resolve_task
    from ksearch.tools.evaluator.parent.verdicts import timings_from_samples

    task = resolve_task("softmax")
    names = [c.name for c in task.benchmark_configs("cpu")]
    samples = [
        ConfigSamples(config=n, method="gpumode-benchmark", samples_ms=[1.0, 1.0, 1.0], windows_left_out=2)
        for n in names
    ]
    timings, problem = timings_from_samples(task, "gpumode-benchmark", samples, wall_s=60.0, device="cpu")
    assert problem == "" and all(t.windows_left_out == 2 and t.samples == 3 for t in timings)


def test_a_high_calibration_reading_does_not_widen_one_call_windows_allowance() -> None:
    """A fresh worker's calibration read 0.275 ms of window overhead on an H200 whose windows then held a median of
    0.05 ms beyond their samples (2026-11-27): three times that reading let a forger claim 0.05 ms for a 0.3 ms call."""
    slow_start = Calibration(window_overhead_ms=0.275, call_overhead_ms=0.15, flush_ms=0.1, copy_gbps=2000.0)
    honest = _ledger(_repeats(0, 100, 0.28, 0.33, fresh_at=(1, 40)))
    assert judge(honest, "gpumode-benchmark", slow_start, configs=["b0"]) is None
    forged = _ledger(_repeats(0, 100, 0.05, 0.33, fresh_at=(1, 40)))
    finding = judge(forged, "gpumode-benchmark", slow_start, configs=["b0"])
    assert finding is not None and finding.rule == "timing_forgery", finding


def test_the_score_keeps_the_undisturbed_windows_down_to_half_of_them() -> None:
    from ksearch.tools.evaluator.parent.ledger import scored_samples

    def ten(audited_at: tuple[int, ...]) -> TimingLedger:
        return _ledger([(0, 0.35, [0.3 + 0.01 * i], ["bench"] if i in audited_at else [], None) for i in range(10)])

    half = ten((0, 3, 9))  # disturbed: 0, 1, 3, 4, 9 (the last has no window after it): five of ten remain
    scored, left_out = scored_samples(half, 0, "gpumode-benchmark")
    assert left_out == 5 and scored == pytest.approx([0.32, 0.35, 0.36, 0.37, 0.38])
    fewer = ten((0, 3, 6))  # disturbed: 0, 1, 3, 4, 6, 7: four of ten would remain, under half: every window counts
    assert scored_samples(fewer, 0, "gpumode-benchmark") == (fewer.samples(0), 0)


def test_the_window_overhead_cap_is_for_loops_of_one_call_windows_only() -> None:
    from ksearch.tools.evaluator.parent.ledger import Window
    from ksearch.tools.evaluator.parent.ledger_rules import WINDOW_OVERHEAD_CAP_MS, window_allowances

    high = Calibration(window_overhead_ms=0.25, call_overhead_ms=0.05, flush_ms=0.1, copy_gbps=2000.0)
    one = [Window(config=0, run=0, opened=0.0, closed=0.001, samples_ms=[0.5]) for _ in range(2)]
    mixed = [one[0], Window(config=0, run=0, opened=0.0, closed=0.002, samples_ms=[0.5, 0.5, 0.5])]
    shape = METHOD_SHAPES["gpumode-benchmark"]
    assert window_allowances(one, shape, high, False, 0) == pytest.approx([3 * WINDOW_OVERHEAD_CAP_MS] * 2)
    assert window_allowances(mixed, shape, high, False, 0)[0] == pytest.approx(3 * 0.25 + 3 * 0.05)


def _with_nulls(shave: float, *, null_excess: float = 0.02, n: int = 40) -> TimingLedger:
    """A GPU MODE loop of 0.3 ms calls whose windows hold 0.05 ms of harness beyond the call, a null window before
    each of the first three repeats and every eighth; the forger reports each call ``shave`` ms short."""
    ledger, now = TimingLedger(), 100.0
    for i in range(n):
        if i < 3 or i % 8 == 0:
            ledger.go(0, 0, now, null=True)
            now += null_excess / 1e3
            ledger.timed(0, [0.002], now)
            now += 0.0001
        ledger.go(0, 0, now)
        now += 0.35 / 1e3
        ledger.timed(0, [0.3 - shave], now)
        if i in (1, 20):
            ledger.handoff("audit", 0, 7, 1000 + i, 4096)
            ledger.relay(now + 0.0001, now + 0.0021)
            now += 0.002
        now += 0.0002
    return ledger


def test_null_windows_are_the_reference_of_the_timed_ones_and_never_a_sample() -> None:
    honest = _with_nulls(0.0)
    assert len(honest.nulls(0)) == 3 + 4 and len(honest.by_config()[0]) == 40
    assert honest.samples(0) == [0.3] * 40
    assert judge(honest, "gpumode-benchmark", CAL, configs=["b0"]) is None
    assert all(w.audits == [] for w in honest.nulls(0))  # each audit follows the timed window before it
    forged = _with_nulls(0.15)  # still under the allowance and the median floor, not under the null windows
    finding = judge(forged, "gpumode-benchmark", Calibration(window_overhead_ms=0.05), configs=["b0"])
    assert finding is not None and finding.rule == "timing_forgery" and "null windows" in finding.evidence, finding


def test_the_null_windows_rule_waits_for_enough_of_them_and_the_kernels_stamps() -> None:
    from ksearch.tools.evaluator.parent import ledger_rules

    few = _with_nulls(0.15, n=2)  # two null windows: the rule does not apply
    assert ledger_rules._null_problem("b0", few.by_config()[0], few.nulls(0), few) is None
    host = _with_nulls(0.15)
    host.host_timing = True
    assert ledger_rules._null_problem("b0", host.by_config()[0], host.nulls(0), host) is None
    read = _with_nulls(0.15)
    read.kernel_clock = False
    assert ledger_rules._null_problem("b0", read.by_config()[0], read.nulls(0), read) is None
    stamped = _with_nulls(0.15)
    assert ledger_rules._null_problem("b0", stamped.by_config()[0], stamped.nulls(0), stamped) is not None


def test_time_in_null_windows_is_the_harness_between_two_timed_windows() -> None:
    ledger = _with_nulls(0.0, null_excess=0.5)  # slow null windows: half a millisecond each, between timed ones
    assert ledger.nulls_between(0.0, 1e9) * 1e3 == pytest.approx(7 * 0.5)
    assert judge(ledger, "gpumode-benchmark", CAL, configs=["b0"]) is None
