"""The loop schedule (``ledger.judge_loops``) at its edges: each stop rule's caps and fallbacks at the window where
they bite and one window either side, the wall-time band at its width, the windows that bound the wall time the
worker read, the run numbering, the window numbering and each method's count of windows.

Unlike ``test_ledger_schedule`` (the methods' real loops through a fake device, random audit positions and block
lengths), every ledger here is built by hand, so each count is exact and every run is the same. Times are chosen
exact in binary floating point where a test sits on a boundary, elsewhere well inside the smallest change a wrong
constant or comparison would make."""

from __future__ import annotations

from ksearch.tools.evaluator.parent import ledger_loops, ledger_rules
from ksearch.tools.evaluator.parent.ledger import TimingLedger, Window
from ksearch.tools.evaluator.parent.ledger_loops import STOP_WALL_BAND_S, judge_loops
from ksearch.tools.evaluator.parent.ledger_rules import NULL_SAMPLE_MEDIAN_MAX_MS
from ksearch.tools.timing import methods as timing_methods

NULL_MS = 0.004
"""A null window's sample (two events back to back)."""
NOISY = (1.0, 3.0)
"""Samples far apart: GPU MODE's error target (std_err/mean < 0.001) is never met, so only a cap stops the loop."""


def _null_before(repeat: int) -> bool:
    return repeat < timing_methods.NULL_FIRST or repeat % timing_methods.NULL_EVERY == 0


def _gpumode(
    closes: list[float],
    samples: list[float] | None = None,
    *,
    fresh: frozenset[int] = frozenset(),
    numbered: bool = False,
) -> TimingLedger:
    """One config's GPU MODE loop: timed window ``i`` closes at ``closes[i]`` (s) and opens 3 ms before, its null
    window (where the harness puts one) 4 ms before; so with ``closes[0] == 0.004`` the run starts at 0 s. The
    windows in ``fresh`` and the last are handed to the checker (``numbered``: naming the window by its count)."""
    ledger = TimingLedger()
    samples = samples if samples is not None else [NOISY[i % 2] for i in range(len(closes))]
    for i, (close, sample) in enumerate(zip(closes, samples)):
        if _null_before(i):
            ledger.go(0, 0, close - 0.004, null=True)
            ledger.timed(0, [NULL_MS], close - 0.0039)
        ledger.go(0, 0, close - 0.003)
        ledger.timed(0, [sample], close)
        if i in fresh or i == len(closes) - 1:
            ledger.handoff(
                "audit" if i in fresh else "bench",
                0,
                7,
                1000 + i if i in fresh else None,
                0,
                window=i + 1 if numbered else None,
            )
    return ledger


def _spaced(count: int) -> list[float]:
    """``count`` close stamps 10 ms apart, the run starting at 0 s: far from every wall cap."""
    return [0.004 + 0.01 * i for i in range(count)]


def _robust(blocks: list[list[float]], *, fresh: frozenset[int] = frozenset(), spacing: float = 0.05) -> TimingLedger:
    """One config's robust loop: block ``k`` opens at ``k * spacing`` s and closes when its calls' time has passed
    (plus 1 ms), then one handoff to the checker (on re-randomised activations for the blocks in ``fresh``)."""
    ledger = TimingLedger()
    for k, block in enumerate(blocks):
        opened = k * spacing
        ledger.go(0, 0, opened)
        ledger.timed(0, block, opened + sum(block) / 1e3 + 0.001)
        ledger.handoff("audit" if k in fresh else "bench", 0, 7, 1000 + k if k in fresh else None, 0)
    return ledger


def _flashinfer(extra: int = 0) -> TimingLedger:
    """One config's flashinfer-bench loop (3 trials of 50 one-call windows, the last window handed off), ``extra``
    windows more."""
    ledger = TimingLedger()
    count = timing_methods.FlashInfer().trials * timing_methods.FlashInfer().iterations + extra
    for i in range(count):
        ledger.go(0, 0, i * 0.01)
        ledger.timed(0, [1.0], i * 0.01 + 0.002)
    ledger.handoff("bench", 0, 7, None, 0)
    return ledger


def _evidence(ledger: TimingLedger, method: str) -> str:
    finding = judge_loops(ledger, method, ["a"])
    assert finding is not None and finding.rule == "timing_forgery"
    return finding.evidence


# ---- the constants ------------------------------------------------------------------------------------------------


def test_the_schedules_constants_are_the_documented_ones() -> None:
    assert (STOP_WALL_BAND_S, NULL_SAMPLE_MEDIAN_MAX_MS) == (0.25, 0.1)
    assert (timing_methods.NULL_FIRST, timing_methods.NULL_EVERY) == (3, 8)


def test_the_median_null_window_is_held_to_a_tenth_of_a_millisecond() -> None:
    """Null windows of 0.1 ms pass (the limit is inclusive); a median of 0.15 ms means calls were timed in them."""

    def nulls(sample: float) -> list[Window]:
        return [Window(0, 0, i, i + 0.001, [sample], null=True) for i in range(3)]

    assert ledger_rules._null_problem("a", [], nulls(0.1), TimingLedger()) is None
    finding = ledger_rules._null_problem("a", [], nulls(0.15), TimingLedger())
    assert finding is not None and "median of 3 null windows" in finding.evidence


# ---- the windows judged -------------------------------------------------------------------------------------------


def test_a_window_never_closed_is_not_part_of_the_loop() -> None:
    """A window opened after the loop's last (the worker ended before it closed it) holds no samples: the loop is the
    closed windows, 150 of them here, as flashinfer-bench's."""
    ledger = _flashinfer()
    ledger.go(0, 0, 10.0)
    assert judge_loops(ledger, "flashinfer", ["a"]) is None


def test_a_config_without_windows_has_no_loop_to_judge() -> None:
    """``judge`` reports a config that no window reached; the schedule has nothing to hold to a loop."""
    assert judge_loops(_flashinfer(), "flashinfer", ["a", "b"]) is None


def test_a_compare_config_whose_runs_start_at_one_is_forged() -> None:
    """Compare mode numbers its runs 0, 1, 2, ...: runs 1 and 2 alone mean a run was renumbered."""
    ledger = TimingLedger()
    for run, now in ((1, 0.0), (2, 1.0)):
        ledger.go(0, run, now)
        ledger.timed(0, [1.0] * 4, now + 0.01)
        ledger.ran(0, run, 1)  # the harness's count of the run's windows
    assert "numbers the runs" in _evidence(ledger, "compare")
    for window in ledger.windows:
        window.run -= 1
    assert judge_loops(ledger, "compare", ["a"]) is None


# ---- window numbering ---------------------------------------------------------------------------------------------


def test_every_number_a_window_is_handed_off_with_must_agree() -> None:
    """Two handoffs after the parent's third window, naming windows 3 and 2: one of them disagrees."""
    ledger = _gpumode(_spaced(5), numbered=True)
    third = ledger.by_config()[0][2]
    third.numbers[:] = [3, 2]
    finding = ledger_loops._numbering_problem("a", ledger.by_config()[0], "gpumode")
    assert finding is not None and "the harness named its timed window" in finding.evidence


def test_a_numbered_loop_whose_last_handoff_names_no_window_is_forged() -> None:
    """Once one handoff of a loop names its window, the harness names them all: a last window handed off without a
    number was not the harness's last."""
    ledger = _gpumode(_spaced(5), numbered=True)
    ledger.by_config()[0][-1].numbers[:] = [None]
    ledger.by_config()[0][1].numbers.append(2)
    finding = ledger_loops._numbering_problem("a", ledger.by_config()[0], "gpumode")
    assert finding is not None and "was not handed to the checker" in finding.evidence


def test_a_loop_of_null_windows_alone_is_not_the_harness_loop() -> None:
    """The harness puts a null window before a repeat, never without one."""
    ledger = TimingLedger()
    ledger.go(0, 0, 0.0, null=True)
    ledger.timed(0, [NULL_MS], 0.001)
    assert "N null, T timed" in _evidence(ledger, "gpumode")


# ---- GPU MODE's schedule and stop rule ----------------------------------------------------------------------------


def test_null_windows_after_the_last_repeat_are_shown_from_the_first_out_of_place() -> None:
    """Two null windows after the last repeat: the evidence reads up to the first of them."""
    ledger = _gpumode(_spaced(4))
    for at in (1.0, 1.1):
        ledger.go(0, 0, at, null=True)
        ledger.timed(0, [NULL_MS], at + 0.001)
    evidence = _evidence(ledger, "gpumode")
    assert "read 'NTNTNTTN' where the harness puts 'NTNTNTT'" in evidence, evidence


def test_gpumode_stops_at_its_hundredth_repeat() -> None:
    ledger = _gpumode(_spaced(100))
    assert judge_loops(ledger, "gpumode", ["a"]) is None
    assert "stops after 100:" in _evidence(_gpumode(_spaced(101)), "gpumode")
    assert "ended after 99 timed windows" in _evidence(_gpumode(_spaced(99)), "gpumode")


def test_gpumode_runs_on_until_its_wall_cap() -> None:
    """120 s of wall time, not the 30 s of kernel time: a slow loop past 30 s goes on, and may stop past 120 s."""
    ledger = _gpumode([0.004, 5.0, 40.0, 60.0, 121.0])
    assert judge_loops(ledger, "gpumode", ["a"]) is None
    ledger = _gpumode([0.004, 5.0, 40.0, 60.0, 121.0, 122.0])
    assert "stops after 5:" in _evidence(ledger, "gpumode")


def test_a_repeat_that_closes_past_the_wall_cap_and_its_band_is_the_last() -> None:
    """The third repeat closes 120.3 s into the run: even read 0.25 s early, past the 120 s cap."""
    assert "stops after 3:" in _evidence(_gpumode([0.004, 0.01, 120.3, 120.31]), "gpumode")


def test_a_loop_may_end_within_the_band_below_the_wall_cap() -> None:
    """Ending 119.8 s into the run is accepted (the worker's clock may have read 120.05 s); 119.7 s is not."""
    assert judge_loops(_gpumode([0.004, 0.01, 0.02, 119.8]), "gpumode", ["a"]) is None
    assert "ended after 4 timed windows" in _evidence(_gpumode([0.004, 0.01, 0.02, 119.7]), "gpumode")


def test_the_wall_time_counts_from_the_null_window_before_the_first_repeat() -> None:
    """The worker starts its clock before the loop's first (null) window; in leaderboard mode the first repeat's
    fresh inputs are made after it (0.5 s here). Ending 119.8 s after the null window may be the cap, read late."""
    ledger = _gpumode([0.504, 0.51, 0.52, 119.8])
    first = ledger.windows[0]
    assert first.null
    first.opened, first.closed = 0.0, 0.0001
    assert judge_loops(ledger, "gpumode", ["a"]) is None


def test_gpumode_benchmark_without_fresh_audits_stops_at_four_hundred_repeats() -> None:
    """The loop goes on past its 100 repeats until two re-randomised repeats were checked, or 4 x 100 repeats."""
    assert judge_loops(_gpumode(_spaced(400)), "gpumode-benchmark", ["a"]) is None
    assert "stops after 400:" in _evidence(_gpumode(_spaced(401)), "gpumode-benchmark")
    assert "ended after 399 timed windows" in _evidence(_gpumode(_spaced(399)), "gpumode-benchmark")


def test_gpumode_benchmark_stops_at_its_hundredth_repeat_once_two_fresh_audits_were_made() -> None:
    ledger = _gpumode(_spaced(100), fresh=frozenset({1, 50}))
    assert judge_loops(ledger, "gpumode-benchmark", ["a"]) is None
    ledger = _gpumode(_spaced(101), fresh=frozenset({1, 50}))
    assert "stops after 100:" in _evidence(ledger, "gpumode-benchmark")


# ---- the wall time the worker read --------------------------------------------------------------------------------


def _walls(window: Window, others: list[Window], relays: list[tuple[float, float]]) -> tuple[float, float]:
    ledger = TimingLedger(windows=[window, *others], relays=relays)
    return ledger_loops._stop_walls(window, 1.0, ledger_loops._Timeline.of(ledger))


def test_the_wall_band_is_a_quarter_second_either_side() -> None:
    assert _walls(Window(0, 0, 1.25, 1.5, [1.0]), [], []) == (0.25, 0.75)


def test_a_relay_sent_at_the_windows_close_is_waited_for() -> None:
    """The checker's answer (2 s) bounds the wall time the worker read, the request sent on the window's stamp."""
    assert _walls(Window(0, 0, 1.25, 1.5, [1.0]), [Window(0, 0, 3.0, 3.5, [1.0])], [(1.5, 2.0)]) == (0.25, 1.25)


def test_an_answer_after_the_next_window_opened_was_not_waited_for() -> None:
    """The next window opened on this one's close stamp: the loop judged its rule before, not after the answer."""
    assert _walls(Window(0, 0, 1.25, 1.5, [1.0]), [Window(0, 0, 1.5, 1.75, [1.0])], [(1.625, 2.0)]) == (0.25, 0.75)


def test_only_the_next_window_bounds_the_answers_waited_for() -> None:
    """Answered at 3 s, between the next window (2.5 s) and the one after it (4 s): not this window's."""
    later = [Window(0, 0, 2.5, 2.75, [1.0]), Window(0, 0, 4.0, 4.25, [1.0])]
    assert _walls(Window(0, 0, 1.25, 1.5, [1.0]), later, [(1.625, 3.0)]) == (0.25, 0.75)


def test_an_answer_on_the_next_windows_stamp_was_waited_for() -> None:
    assert _walls(Window(0, 0, 1.25, 1.5, [1.0]), [Window(0, 0, 2.0, 2.25, [1.0])], [(1.625, 2.0)]) == (0.25, 1.25)


def test_a_request_sent_and_answered_on_the_next_windows_stamp_was_waited_for() -> None:
    """The bound is inclusive for the request too: stamps are coarse, and one sent on the next window's stamp may have
    been answered before that window opened."""
    assert _walls(Window(0, 0, 1.25, 1.5, [1.0]), [Window(0, 0, 2.0, 2.25, [1.0])], [(2.0, 2.0)]) == (0.25, 1.25)


# ---- flashinfer-bench's count -------------------------------------------------------------------------------------


def test_flashinfer_makes_150_windows() -> None:
    assert judge_loops(_flashinfer(), "flashinfer", ["a"]) is None
    assert "151 windows reached the evaluator" in _evidence(_flashinfer(extra=1), "flashinfer")


def test_a_null_window_in_a_flashinfer_loop_is_forged() -> None:
    """flashinfer-bench's loop makes no null window: 150 timed windows and one null are 151 windows."""
    ledger = _flashinfer()
    ledger.go(0, 0, 0.005, null=True)
    ledger.timed(0, [NULL_MS], 0.006)
    ledger.windows.insert(1, ledger.windows.pop())  # between the first and the second iteration
    assert "151 windows reached the evaluator" in _evidence(ledger, "flashinfer")


def test_one_flashinfer_window_of_two_calls_is_forged() -> None:
    ledger = _flashinfer()
    ledger.windows[75].samples_ms.append(1.0)
    assert "of one call each" in _evidence(ledger, "flashinfer")


# ---- robust's stop rule -------------------------------------------------------------------------------------------

SLOW_MS = 20.0
"""Calls of 20 ms: a block after a block of them holds 2-3 calls."""


def test_robust_without_fresh_audits_stops_at_its_thousandth_block() -> None:
    """Constant samples meet the error target at once, but the loop goes on until two blocks ended with a checked
    call on re-randomised activations, or 1000 blocks."""

    def loop(blocks: int) -> TimingLedger:
        return _robust([[SLOW_MS] * 4] + [[SLOW_MS] * 2] * (blocks - 1))

    assert judge_loops(loop(1000), "robust", ["a"]) is None
    assert "stops after 1000:" in _evidence(loop(1001), "robust")
    assert "ended after 999 timed windows" in _evidence(loop(999), "robust")


def test_robust_takes_ten_samples_at_least() -> None:
    """Nine constant samples and two fresh audits: the rule goes on to ten samples, so a third block is the
    harness's."""
    blocks = [[1.0] * 4, [1.0] * 5, [1.0] * 5]
    assert judge_loops(_robust(blocks, fresh=frozenset({0, 1})), "robust", ["a"]) is None
    assert "ended after 2 timed windows" in _evidence(_robust(blocks[:2], fresh=frozenset({0, 1})), "robust")


def _spread_blocks(count: int) -> list[list[float]]:
    """A block of 4 calls then ``count - 1`` of 10, calls of 1.0 and 1.2 ms alternating (relative SE about 0.0915 /
    sqrt(n)): the error target (1 %) is first met at 84 samples, after the ninth block (74, after the eighth, read
    1.06 %)."""
    return [[1.0, 1.2] * 2] + [[1.0, 1.2] * 5] * (count - 1)


def test_robust_runs_on_until_its_error_target() -> None:
    fresh = frozenset({0, 1})
    assert judge_loops(_robust(_spread_blocks(9), fresh=fresh), "robust", ["a"]) is None
    assert "ended after 8 timed windows" in _evidence(_robust(_spread_blocks(8), fresh=fresh), "robust")
    assert "stops after 9:" in _evidence(_robust(_spread_blocks(10), fresh=fresh), "robust")


def test_robust_stops_at_its_time_cap() -> None:
    """Calls of 1 and 3 ms never meet the error target in 100 samples; with blocks 0.6 s apart the 2 s cap may be
    read from the fourth block on (it closes 1.813 s into the run, read a quarter second late) and surely is after the
    fifth (2.413 s)."""
    blocks = [[1.0, 3.0] * 2] + [[1.0, 3.0] * 3] * 5

    def loop(count: int) -> TimingLedger:
        return _robust(blocks[:count], fresh=frozenset({0, 1}), spacing=0.6)

    assert judge_loops(loop(4), "robust", ["a"]) is None
    assert judge_loops(loop(5), "robust", ["a"]) is None
    assert "ended after 3 timed windows" in _evidence(loop(3), "robust")
    assert "stops after 5:" in _evidence(loop(6), "robust")


# ---- the stop rule's verdict --------------------------------------------------------------------------------------


def test_no_timed_window_breaks_no_stop_rule() -> None:
    assert ledger_loops._stop_breach("a", [], "a rule") is None


def test_a_runs_end_is_malformed_without_a_closed_window_of_it_or_with_a_count_that_is_no_int() -> None:
    """``TimingLedger.ran``: the end of a run names the run's last closed window; before any window, while one is
    open, or with a count that is not an int (a string, a float, a bool), it is a record out of order."""
    empty = TimingLedger()
    empty.ran(0, 0, 1)
    assert empty.malformed == ["config 0: the end of run 0 where no window of it was just closed"]
    open_window = TimingLedger()
    open_window.go(0, 0, 1.0)
    open_window.ran(0, 0, 1)
    assert open_window.malformed == ["config 0: the end of run 0 where no window of it was just closed"]
    for count in ("1", 1.0, True):
        ledger = TimingLedger()
        ledger.go(0, 0, 1.0)
        ledger.timed(0, [1.0], 1.1)
        ledger.ran(0, 0, count)
        assert ledger.malformed == ["the end of a run without its config, run or window count"], count
        assert ledger.windows[-1].numbers == []
    ledger.ran(0, 0, 1)
    assert ledger.windows[-1].numbers == [1]


def test_gpumode_benchmarks_replayed_stop_rule_reads_the_repeats_no_audit_disturbed() -> None:
    """As the worker's loop: the re-randomised repeats (1 and 3) and the repeats after them read 3 ms, the others
    1 ms. Without the four disturbed ones the repeats agree from the seventh, but the loop goes on until the score can
    leave them out (half its windows and three, its audited last one apart): it must stop at the tenth (counting every
    repeat, it would have to run on)."""
    samples = [1.0, 3.0, 3.0, 3.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert judge_loops(_gpumode(_spaced(10), samples[:10], fresh=frozenset({1, 3})), "gpumode-benchmark", ["a"]) is None
    assert "stops after 10:" in _evidence(_gpumode(_spaced(11), samples, fresh=frozenset({1, 3})), "gpumode-benchmark")
    assert "ended after 9 timed windows" in _evidence(
        _gpumode(_spaced(9), samples[:9], fresh=frozenset({1, 3})), "gpumode-benchmark"
    )
    assert not timing_methods.gpumode_should_stop(samples[:10], 0.0)  # what counting every repeat would say
