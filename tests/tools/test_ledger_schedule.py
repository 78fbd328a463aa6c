"""The parent holds each config's windows to the loop the timing method makes (``ledger.judge_loops``).

Each method's real loop runs here against a fake device (``FakeRunner``: every call takes 1 ms of a fake clock) whose
windows, null windows and audits go into a ``TimingLedger`` as the worker's messages would: the honest loop passes,
and the same loop with a candidate writing ``timed`` then ``go`` on the harness's channel inside its call (one call
read as two windows, the first with a forged sample) is caught. That attack passed every per-window rule (2026-11-27:
a ledger replay read 0.164 ms for 0.300 ms calls)."""

from __future__ import annotations

import itertools
import random

import pytest

from ksearch.tools import timing
from ksearch.tools.evaluator.parent import ledger_loops
from ksearch.tools.evaluator.parent.ledger import TimingLedger, Window
from ksearch.tools.evaluator.parent.ledger_loops import STOP_WALL_BAND_S, judge_loops
from tests.tools.test_timing import FakeCall, FakeRunner

FORGED_MS = 0.03


class LedgerRunner(FakeRunner):
    """A ``FakeRunner`` whose windows and audits reach a ``TimingLedger`` stamped with the fake clock; ``inject``:
    which timed calls (0-based, in the order made) a candidate splits by writing on the channel, and how many forged
    samples it claims."""

    def __init__(
        self, ledger: TimingLedger, config: int = 0, inject: dict[int, int] | None = None, numbered: bool = False
    ) -> None:
        super().__init__()
        self.ledger, self.config, self.inject, self.numbered = ledger, config, inject or {}, numbered
        self._seeds = itertools.count(1000)
        self._activation: dict[int, int] = {}
        self.timed_calls = 0
        self.closed = 0
        """Timed windows closed (the harness's number of the window each audit follows)."""

    def _now(self) -> float:
        return self.clock[0] / 1e3

    def open_window(self) -> None:
        super().open_window()
        self.ledger.go(self.config, 0, self._now())

    def close_window(self, events: list) -> list[float]:
        samples = super().close_window(events)
        self.closed += 1
        self.clock[0] += 0.02  # the synchronisation and the message
        self.ledger.timed(self.config, samples, self._now())
        return samples

    def null_window(self) -> None:
        super().null_window()
        self.ledger.go(self.config, 0, self._now(), null=True)
        self.clock[0] += 0.02
        self.ledger.timed(self.config, [0.004], self._now())

    def rerandomise(self, call: FakeCall, values: object) -> None:
        super().rerandomise(call, values)
        self._activation[call.index] = next(self._seeds)

    def audit(self, call: FakeCall, output: object, staged: object = None) -> None:
        super().audit(call, output, staged)
        seed = self._activation.get(call.index)
        self.ledger.handoff(
            "audit" if seed is not None else "bench",
            self.config,
            7,
            seed,
            0,
            window=self.closed if self.numbered else None,
        )
        self.clock[0] += 0.1  # the checker's answer

    def call_on(self, index: int, **kwargs: bool) -> FakeCall:
        call = super().call_on(index, **kwargs)
        runner = self

        class _Split(FakeCall):
            def __call__(self) -> int:
                ordinal = runner.timed_calls if runner.open else None
                runner.timed_calls += runner.open
                out = super().__call__()
                forged = runner.inject.get(ordinal) if ordinal is not None else None
                if forged is not None and runner.open:  # inside a timed window: close it early, open another
                    runner.ledger.timed(runner.config, [FORGED_MS] * forged, runner._now() - 0.9)
                    runner.ledger.go(runner.config, 0, runner._now() - 0.89)
                return out

        return _Split(self, call.index, call.args, call.kind)


def _run(
    method_name: str, inject: dict[int, int] | None = None, configs: int = 2, *, numbered: bool = False
) -> TimingLedger:
    """The ledger of ``configs`` configs timed by the method; the candidate splits calls of the last one;
    ``numbered``: each handoff names its window (``Handoff.window``; off: the rules before it must catch alone)."""
    ledger = TimingLedger()
    method = timing.get_method(method_name)
    for config in range(configs):
        runner = LedgerRunner(ledger, config, inject if config == configs - 1 else None, numbered)
        runner.clock[0] = 10_000.0 * config
        method.run(runner, flush_l2=False)
    return ledger


METHODS = ["gpumode-benchmark", "gpumode", "confirm", "flashinfer", "robust"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("numbered", [False, True])
def test_the_methods_own_loops_pass(method: str, numbered: bool) -> None:
    for _ in range(5):  # the audits' positions and robust's block lengths are random
        ledger = _run(method, numbered=numbered)
        assert judge_loops(ledger, method, ["a", "b"]) is None
        if numbered:
            assert all(w.numbers for w in ledger.by_config()[1][-1:])  # the last window is named


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("where", ["first", "middle", "every"])
def test_a_call_split_in_two_windows_by_the_candidate_is_caught(method: str, where: str) -> None:
    chosen = {"first": [0], "middle": [1], "every": range(100_000)}[where]  # GPU MODE's loops time 3 calls at least
    for _ in range(3):
        ledger = _run(method, {i: 1 for i in chosen})
        finding = judge_loops(ledger, method, ["a", "b"])
        assert finding is not None and finding.rule == "timing_forgery", (method, where)
        assert "config b" in finding.evidence and "added to the harness's loop" in finding.evidence, finding


def test_a_robust_split_that_claims_a_legal_block_is_caught_by_the_block_after_it() -> None:
    """The forger sizes its forged window as the harness would; the harness's own remainder of the block then holds
    the calls sized by the harness's previous block, not by the forged one (1 ms calls: 5-15 a block; after a forged
    0.03 ms median, 32-96). Robust hands every block to the checker, so the forged block stands out first by having
    no handoff; compare mode (which checks nothing) has only the block sizes."""
    for _ in range(3):
        ledger = _run("robust", {4: 8})  # the second block's first call (the first block holds 4)
        finding = judge_loops(ledger, "robust", ["a", "b"])
        assert finding is not None and "not followed by exactly one handoff" in finding.evidence, finding
        for _config, windows in ledger.by_config().items():  # compare: no handoffs, each run ends with a count,
            for window in windows:  # here one that agrees with the parent's (an in-process count bumped to match)
                window.audits.clear()
                window.numbers.clear()
            windows[-1].numbers.append(len(windows))
        finding = judge_loops(ledger, "compare", ["a", "b"])
        assert finding is not None and "block 3 holds" in finding.evidence, finding


def test_every_robust_block_is_handed_to_the_checker_once() -> None:
    ledger = _run("robust", configs=1)
    assert judge_loops(ledger, "robust", ["a"]) is None
    ledger.by_config()[0][-1].audits.append("bench")
    finding = judge_loops(ledger, "robust", ["a"])
    assert finding is not None and "1 of" in finding.evidence and "exactly one handoff" in finding.evidence


def test_runs_are_numbered_in_order_and_only_compare_has_more_than_one() -> None:
    """A red-team review (2026-11-28) wrote a whole forged run (150 one-call windows numbered run 1) inside one call
    of a flashinfer loop: each run was judged alone, and the mean read 47-75 % low."""
    ledger = _run("flashinfer", configs=1)
    assert judge_loops(ledger, "flashinfer", ["a"]) is None
    ledger.windows[-1].run = 1
    finding = judge_loops(ledger, "flashinfer", ["a"])
    assert finding is not None and "numbers the runs" in finding.evidence, finding
    compare = TimingLedger()
    for run, now in ((0, 0.0), (1, 1.0), (0, 2.0)):  # a run 0 again after run 1
        compare.go(0, run, now)
        compare.timed(0, [1.0] * 4, now + 0.01)
        compare.ran(0, run, 1)
    finding = judge_loops(compare, "compare", ["a"])
    assert finding is not None and "numbers the runs" in finding.evidence, finding
    compare.windows[-1].run = 2
    assert judge_loops(compare, "compare", ["a"]) is None  # 0, 1, 2: three runs of four calls each
    compare.windows[-1].run = 3
    assert judge_loops(compare, "compare", ["a"]) is not None  # a run skipped


def test_a_null_window_missing_or_out_of_place_is_caught() -> None:
    ledger = _run("gpumode-benchmark", configs=1)
    second_null = [w for w in ledger.windows if w.null][1]
    ledger.windows.remove(second_null)
    finding = judge_loops(ledger, "gpumode-benchmark", ["a"])
    assert finding is not None and "N null, T timed" in finding.evidence and "'NTT'" in finding.evidence, finding
    ledger = _run("gpumode-benchmark", configs=1)
    end = ledger.windows[-1].closed
    ledger.go(0, 0, end + 0.001, null=True)  # a null window after the last repeat
    ledger.timed(0, [0.004], end + 0.002)
    finding = judge_loops(ledger, "gpumode-benchmark", ["a"])
    assert finding is not None and "N null, T timed" in finding.evidence, finding


def test_gpumode_windows_of_more_than_one_call_are_forged() -> None:
    ledger = _run("gpumode", configs=1)
    ledger.by_config()[0][-1].samples_ms.append(1.0)
    finding = judge_loops(ledger, "gpumode", ["a"])
    assert finding is not None and "other than one call" in finding.evidence


def test_a_loop_cut_short_or_run_on_against_its_stop_rule_is_caught() -> None:
    ledger = _run("gpumode-benchmark", configs=1)
    timed = ledger.by_config()[0]
    # run on: two more repeats after the rule said stop (each like the last one), in the harness's schedule
    longer = TimingLedger(windows=list(ledger.windows), relays=list(ledger.relays))
    last, now = timed[-1], timed[-1].closed
    for index in range(len(timed), len(timed) + 2):
        if index % 8 == 0:
            longer.go(0, 0, now + 1e-4, null=True)
            longer.timed(0, [0.004], now + 2e-4)
        longer.go(0, 0, now + 3e-4)
        longer.timed(0, list(last.samples_ms), now + 3e-4 + last.samples_ms[0] / 1e3)
        now += 0.002
    finding = judge_loops(longer, "gpumode-benchmark", ["a"])
    assert finding is not None and "stops after" in finding.evidence, finding
    # cut short: the stop rule cannot have stopped after the first three repeats with two samples far apart
    short = TimingLedger()
    now = 0.0
    for i, sample in enumerate([1.0, 3.0, 1.0, 3.0]):
        if i < 3:
            short.go(0, 0, now, null=True)
            short.timed(0, [0.004], now + 1e-5)
        short.go(0, 0, now + 2e-5)
        short.timed(0, [sample], now + 2e-5 + sample / 1e3)
        short.handoff("audit", 0, 7, 1000 + i, 0)
        now += 0.01
    finding = judge_loops(short, "gpumode-benchmark", ["a"])
    assert finding is not None and "goes on" in finding.evidence, finding


def test_the_wall_time_the_worker_read_is_bounded_by_the_checkers_answers() -> None:
    """Robust audits a block before it judges its stop rule: the wall time it reads then reaches the checker's
    answer, which the parent's clock saw; the band covers the clocks' difference."""
    ledger = TimingLedger()
    ledger.go(0, 0, 1.0)
    ledger.timed(0, [1.0], 1.002)
    ledger.relay(1.003, 1.5)
    ledger.go(0, 0, 1.6)
    early, late = ledger_loops._stop_walls(ledger.windows[0], 1.0, ledger_loops._Timeline.of(ledger))
    assert early == pytest.approx(0.002 - STOP_WALL_BAND_S) and late == pytest.approx(0.5 + STOP_WALL_BAND_S)
    ledger.relay(1.7, 1.9)  # after the next window opened: not the first window's
    assert ledger_loops._stop_walls(ledger.windows[0], 1.0, ledger_loops._Timeline.of(ledger))[1] == pytest.approx(
        0.5 + STOP_WALL_BAND_S
    )


def test_block_length_range_matches_the_robust_loop() -> None:
    loop = timing.Robust(rng=random.Random(3))
    for per_call_s in (None, 1e-6, 1e-4, 1e-3, 0.02, 1.0):
        low, high = timing.methods.block_length_range(per_call_s, loop.block_target_s, loop.max_block)
        lengths = {loop.block_length(per_call_s) for _ in range(300)}
        assert min(lengths) == low and max(lengths) == high, per_call_s


@pytest.mark.parametrize("method", METHODS)
def test_numbered_handoffs_catch_a_split_call(method: str) -> None:
    ledger = _run(method, {1: 1}, numbered=True)
    finding = ledger_loops._numbering_problem("b", ledger.by_config()[1], method)
    assert finding is not None and "the harness named its timed window" in finding.evidence, finding


def test_a_loop_completed_with_forged_windows_after_the_harness_stopped_is_caught() -> None:
    """A red-team review (2026-11-28): a quiet kernel lets GPU MODE's stop rule end the harness's loop after a few
    repeats; the candidate predicts the last call and writes, inside it, forged windows (nulls where the schedule
    puts them) up to a 100-repeat loop, which the replayed stop rule accepts (at 100 it stops), 52-83 % low. The
    harness's handoff after its last window names it by its own count."""
    ledger = _run("gpumode-benchmark", configs=1, numbered=True)
    loop = ledger.loop(0)
    last = loop[-1]
    harness_count = len([w for w in loop if not w.null])
    forged: list[Window] = []
    now = last.opened
    for index in range(harness_count - 1, 99):
        if index < 3 or index % 8 == 0:
            forged.append(Window(0, 0, now, now + 1e-6, [0.004], null=True))
        forged.append(Window(0, 0, now + 2e-6, now + 3e-6, [0.03]))
        now += 4e-6
    at = ledger.windows.index(last)
    ledger.windows[at:at] = forged
    timed = ledger.by_config()[0]
    assert len(timed) == 100 and timed[-1].numbers == [harness_count]
    finding = judge_loops(ledger, "gpumode-benchmark", ["a"])
    assert finding is not None and f"timed window {harness_count}, the 100th" in finding.evidence, finding


def test_a_last_window_without_a_handoff_is_forged_where_the_harness_names_its_windows() -> None:
    ledger = _run("robust", configs=1, numbered=True)
    last = ledger.by_config()[0][-1]
    ledger.windows.append(Window(0, 0, last.closed + 1e-4, last.closed + 2e-4, list(last.samples_ms)))
    finding = ledger_loops._numbering_problem("a", ledger.by_config()[0], "robust")
    assert finding is not None and "was not handed to the checker" in finding.evidence
    finding = ledger_loops._numbering_problem("a", ledger.by_config()[0], "compare")  # its runs' ends name them
    assert finding is not None and "nor named at the end of its run" in finding.evidence


def _compare_ledger(rounds: int = 4, forged_in: int | None = None) -> TimingLedger:
    """Compare mode's runs as its worker sends them: robust blocks of 1 ms calls, each run ended by the harness's
    count of its windows (``ran``); ``forged_in``: in that run, the candidate closes the last block after 5 calls and
    chains a forged block of 10 calls before the harness's own close, every block of a size the loop could make."""
    ledger, now = TimingLedger(), 0.0
    for run in range(2 * rounds):
        blocks = [4, 10, 10, 10]
        for k, calls in enumerate(blocks):
            ledger.go(0, run, now)
            now += calls * 1e-3 + (0.05 if k == 0 else 0.01)  # each block behind its spin kernel
            if run == forged_in and k == len(blocks) - 1:
                ledger.timed(0, [1.0] * 5, now - 6e-3)
                ledger.go(0, run, now - 5.9e-3)
                ledger.timed(0, [1.0] * 10, now - 0.5e-3)
                ledger.go(0, run, now - 0.49e-3)
            ledger.timed(0, [1.0] * calls, now)
        ledger.ran(0, run, len(blocks))
        now += 0.2
    return ledger


def test_compare_runs_end_with_the_harness_count_of_their_blocks() -> None:
    """Compare mode hands nothing to the checker, so a red-team review (2026-11-28) could chain forged blocks inside a
    block; the harness's message that ends each run counts the run's blocks, and names its last one."""
    honest = _compare_ledger()
    assert judge_loops(honest, "compare", ["a"]) is None
    assert all(w.numbers == ([4] if i % 4 == 3 else []) for i, w in enumerate(honest.by_config()[0]))
    forged = _compare_ledger(forged_in=3)
    finding = judge_loops(forged, "compare", ["a"])
    assert finding is not None and "the harness named its timed window 4, the 6th" in finding.evidence, finding
    for window in forged.windows:  # without the count, the loop's other rules see blocks it could have made
        window.numbers.clear()
    finding = judge_loops(forged, "compare", ["a"])  # and a compare run that ends without the count is refused
    assert finding is not None and "nor named at the end of its run" in finding.evidence, finding
    by_run: dict[int, list[Window]] = {}
    for window in forged.by_config()[0]:
        by_run.setdefault(window.run, []).append(window)
    for windows in by_run.values():  # a count bumped in the worker's process to the parent's: the block sizes pass
        windows[-1].numbers.append(len(windows))
    assert judge_loops(forged, "compare", ["a"]) is None


def test_a_runs_end_that_names_no_window_of_it_is_out_of_order() -> None:
    ledger = _compare_ledger(rounds=1)
    ledger.ran(0, 0, 4)  # run 0 ended again after run 1's windows
    ledger.ran(0, 1, True)  # a count that is no number
    assert ledger.malformed[0].startswith("config 0: the end of run 0 where no window")
    assert ledger.malformed[1] == "the end of a run without its config, run or window count"
    finding = judge_loops(ledger, "compare", ["a"])
    assert finding is not None and "out of order" in finding.evidence


class CostlyRunner(LedgerRunner):
    """The harness's own work takes fake time as on a GPU: an L2 flush 0.1 ms, a clone of the arguments 0.15 ms, a
    trial's (or a config's) inputs 2 ms to make."""

    def flush(self) -> None:
        super().flush()
        self.clock[0] += 0.1

    def call_on(self, index: int, **kwargs: bool) -> FakeCall:
        made = not kwargs.get("fresh") and index not in self._set_args
        call = super().call_on(index, **kwargs)
        self.clock[0] += (0.15 if kwargs.get("clone") else 0.0) + (2.0 if made else 0.0)
        return call


def test_the_flashinfer_loop_with_the_harness_s_own_costs_passes_every_rule() -> None:
    """flashinfer-bench's loop as ksearch runs it, its flush, clones, trial inputs and warm-up taking time, judged by
    every rule (``ledger_rules.judge``): it passes. Before 2026-12-07 each window held the next iteration's flush and
    clone, and the gap before a trial's first window (its inputs and 10 warm-up iterations) counted in full: an H100
    rejected every honest flashinfer-method evaluation; this loop read 28.5 ms over then."""
    from ksearch.tools.evaluator.parent.ledger import Calibration
    from ksearch.tools.evaluator.parent.ledger_rules import judge

    calibration = Calibration(window_overhead_ms=0.02, gap_overhead_ms=0.05, flush_ms=0.1, copy_gbps=1000.0)
    facts = {"input_bytes": {0: 10**8, 1: 10**8}, "generation_ms": {0: 2.0, 1: 2.0}, "digest_ms": {0: 0.0, 1: 0.0}}
    for _ in range(3):  # the fresh audits' positions are random
        ledger = TimingLedger()
        method = timing.get_method("flashinfer")
        for config in range(2):
            runner = CostlyRunner(ledger, config)
            runner.clock[0] = 10_000.0 * config
            method.run(runner, flush_l2=False)
        assert judge_loops(ledger, "flashinfer", ["a", "b"]) is None
        assert judge(ledger, "flashinfer", calibration, configs=["a", "b"], **facts) is None
