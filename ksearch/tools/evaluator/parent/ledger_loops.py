"""The ledger's rule on each config's loop (``judge_loops``): the windows the timing method's loop makes, where it
makes them and where its stop rule ends it, replayed on the samples the parent received. Pure logic."""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterator
from dataclasses import dataclass

from ksearch.tools.evaluator.parent.ledger import Finding, TimingLedger, Window, out_of_order
from ksearch.tools.timing import methods as timing_methods
from ksearch.tools.timing.primitives import FreshPlan
from ksearch.tools.timing.stats import UndisturbedSamples, gpumode_should_stop, robust_should_stop

STOP_WALL_BAND_S = 0.25
"""Where a loop's stop rule reads the wall time, the parent's clock and the worker's may differ by this much (the
worker starts its clock before the first window and reads it after each ``timed``): at the wall cap, stopping and
going on are both accepted."""


def _runs(windows: list[Window]) -> Iterator[list[Window]]:
    """``windows`` split into method runs (compare mode runs one config several times)."""
    run: list[Window] = []
    for window in windows:
        if run and window.run != run[-1].run:
            yield run
            run = []
        run.append(window)
    if run:
        yield run


def judge_loops(ledger: TimingLedger, method: str, configs: list[str]) -> Finding | None:
    """The first config whose windows are not the ones the method's loop makes (``_schedule_problem``), or None.
    Judged after ``judge`` (each window, and the windows of a config together), whose findings name the harm more
    precisely where both apply (a loop that ran on because its audits were switched off is ``audit_evasion``)."""
    disorder = out_of_order(ledger)
    if disorder is not None:
        return disorder
    timeline = _Timeline.of(ledger)
    for index, name in enumerate(configs):
        problem = _schedule_problem(name, ledger.loop(index), method, timeline)
        if problem is not None:
            return problem
    return None


def _schedule_problem(name: str, loop: list[Window], method: str, timeline: _Timeline) -> Finding | None:
    """The windows the harness's loop makes, where it makes them: a candidate writing on the harness's channel from
    inside its call can add windows (a ``timed`` with a small sample, then a ``go``: one call read as two), and every
    other rule judges each window on its own. The parent knows each method's loop: GPU MODE's puts its null windows
    before repeats 0, 1, 2 and every eighth and stops where its stop rule first says so (replayed here on the samples
    the parent received); flashinfer-bench's times a fixed number of iterations; robust sizes each block from the
    previous block's median, hands every block's last output to the checker and stops by its own rule; the runs of a
    config are numbered 0, 1, ... in order, and only compare mode has more than one. An added window moves all of
    these (a red-team review of this rule, 2026-11-28, added the last two: forged windows numbered as a run of their
    own, and forged robust blocks sized to keep the harness's next block in range)."""
    runs = [w.run for w in loop]
    steps_ok = all(b - a in (0, 1) for a, b in zip(runs, runs[1:])) and (not runs or runs[0] == 0)
    if not steps_ok or (method != "compare" and any(runs)):
        return Finding(
            "timing_forgery",
            f"config {name}: windows of method runs {sorted(set(runs))[:8]} in the order "
            f"{runs[:12]}...; the harness numbers the runs of a config 0, 1, 2, ... in order, and only "
            "compare mode runs a config more than once: windows were added to the harness's loop",
        )
    for run in _runs(loop):
        timed = [w for w in run if not w.null]
        problem = _numbering_problem(name, timed, method)
        if problem is not None:
            return problem
        if method in ("gpumode-benchmark", "gpumode", timing_methods.CONFIRM_METHOD):
            problem = _gpumode_schedule(name, run, timed, method, timeline)
        elif method == "flashinfer":
            problem = _flashinfer_schedule(name, run, timed)
        elif method in ("robust", "compare"):
            problem = _robust_schedule(name, run, timed, timeline, stop_rule=method == "robust")
        else:
            problem = None
        if problem is not None:
            return problem
    return None


def _numbering_problem(name: str, timed: list[Window], method: str) -> Finding | None:
    """Every handoff names the window it audits by the harness's count of the run's timed windows; the parent's count
    must agree, and the run's last window (which every method hands to the checker, and which compare mode, checking
    nothing, names in the message that ends the run: ``TimingLedger.ran``) must be named, which pins the number of
    windows to the harness's own (a red-team review of 2026-11-28: a candidate that predicted where GPU MODE's stop rule
    would end the harness's loop wrote the rest of a 100-repeat loop as forged windows inside the last call, 52-83 %
    low, every rule above passing; in compare mode, forged blocks chained inside a block)."""
    for position, window in enumerate(timed, start=1):
        named = [n for n in window.numbers if n is not None]
        if any(n != position for n in named):
            return Finding(
                "timing_forgery",
                f"config {name}: the harness named its timed window {named[0]}, the "
                f"{position}th window the evaluator saw (in a handoff to the checker, or at the end of its "
                "run): windows were added to the harness's loop",
            )
    if timed and not any(n is not None for n in timed[-1].numbers):
        # Compare mode's every run ends with the harness's count (``ran``); the other methods' ledgers are judged
        # this way once the harness named any window of the run (hand-built ledgers of the rules before it name none).
        if method == "compare" or any(n is not None for w in timed for n in w.numbers):
            return Finding(
                "timing_forgery",
                f"config {name}: the last of {len(timed)} timed windows was not handed to "
                "the checker (nor named at the end of its run), as the harness does with the last window of "
                "every loop: windows were added after it",
            )
    return None


def _stop_breach(name: str, stops: list[tuple[bool, bool]], rule: str) -> Finding | None:
    """``stops``: per timed window, whether the loop's rule says stop there with the wall time read early and late
    (``STOP_WALL_BAND_S``). The loop must run on while the rule surely says go on and end where it may say stop."""
    for k, (early, _) in enumerate(stops[:-1]):
        if early:
            return Finding(
                "timing_forgery",
                f"config {name}: {len(stops)} timed windows reached the evaluator, but "
                f"{rule} stops after {k + 1}: windows were added to the harness's loop",
            )
    if stops and not stops[-1][1]:
        return Finding(
            "timing_forgery",
            f"config {name}: the loop ended after {len(stops)} timed windows, where "
            f"{rule} goes on: windows were added to the harness's loop",
        )
    return None


def _gpumode_schedule(
    name: str, run: list[Window], timed: list[Window], method: str, timeline: _Timeline
) -> Finding | None:
    first, every = timing_methods.NULL_FIRST, timing_methods.NULL_EVERY
    expected = "".join(("N" if i < first or i % every == 0 else "") + "T" for i in range(len(timed)))
    seen = "".join("N" if w.null else "T" for w in run)
    if seen != expected:
        at = next((i for i, (a, b) in enumerate(zip(seen, expected)) if a != b), min(len(seen), len(expected)))
        return Finding(
            "timing_forgery",
            f"config {name}: the loop's windows (N null, T timed) read {seen[: at + 1]!r} "
            f"where the harness puts {expected[: at + 1]!r} (a null window before repeats 0-{first - 1} and "
            f"every {every}th): windows were added to the harness's loop",
        )
    if any(len(w.samples_ms) != 1 for w in timed):
        return Finding("timing_forgery", f"config {name}: a window of GPU MODE's loop holds other than one call")
    loop_method = timing_methods.get_method(method)
    caps = {name: getattr(loop_method, name) for name in ("max_time_s", "max_wall_s", "max_repeats")}
    fresh_loop = method == "gpumode-benchmark"
    minimum = FreshPlan().minimum
    samples: list[float] = []
    undisturbed = UndisturbedSamples() if fresh_loop else None  # as the worker's loop keeps it
    stops, fresh_done = [], 0
    for k, window in enumerate(timed):
        samples.append(window.samples_ms[0])
        if undisturbed is not None:
            undisturbed.add(window.samples_ms[0], window.fresh)
        fresh_done += window.fresh
        walls = _stop_walls(window, run[0].opened, timeline)
        satisfied = (
            not fresh_loop or fresh_done >= minimum or k + 1 >= timing_methods.FRESH_WAIT_FACTOR * caps["max_repeats"]
        )
        stops.append(
            tuple(
                satisfied
                and (
                    undisturbed.should_stop(wall, **caps)
                    if undisturbed is not None
                    else gpumode_should_stop(samples, wall, **caps)
                )
                for wall in walls
            )
        )
    return _stop_breach(name, stops, "GPU MODE's stop rule")  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Timeline:
    """When the ledger's windows opened and its relays were sent and answered, in time order: ``_stop_walls`` finds
    its bounds by bisection instead of scanning the whole ledger once per window."""

    opened: list[float]
    relays: list[tuple[float, float]]

    @classmethod
    def of(cls, ledger: TimingLedger) -> _Timeline:
        return cls(sorted(w.opened for w in ledger.windows), sorted(ledger.relays))


def _stop_walls(window: Window, started: float, timeline: _Timeline) -> tuple[float, float]:
    """The earliest and the latest wall time (s) the worker's loop may have read when it judged its stop rule after
    ``window``: from the run's first window, to the window's close, or to the last answer of the checker the worker
    waited for before it judged (robust audits a block first), ``STOP_WALL_BAND_S`` either side."""
    closed = window.closed if window.closed is not None else window.opened
    following = bisect.bisect_left(timeline.opened, closed)
    bound = timeline.opened[following] if following < len(timeline.opened) else float("inf")
    latest = closed
    for sent, answered in timeline.relays[bisect.bisect_left(timeline.relays, (closed,)) :]:
        if sent > bound:  # answered >= sent (``TimingLedger.relay``): none later is answered by the bound
            break
        if answered <= bound:
            latest = max(latest, answered)
    return closed - started - STOP_WALL_BAND_S, latest - started + STOP_WALL_BAND_S


def _flashinfer_schedule(name: str, run: list[Window], timed: list[Window]) -> Finding | None:
    loop = timing_methods.FlashInfer()
    expected = loop.trials * loop.iterations
    if len(run) != len(timed) or len(timed) != expected or any(len(w.samples_ms) != 1 for w in timed):
        return Finding(
            "timing_forgery",
            f"config {name}: {len(run)} windows reached the evaluator; flashinfer-bench's "
            f"loop makes {expected} of one call each: windows were added to the harness's loop",
        )
    return None


def _robust_schedule(
    name: str, run: list[Window], timed: list[Window], timeline: _Timeline, *, stop_rule: bool
) -> Finding | None:
    loop = timing_methods.Robust()
    if len(run) != len(timed):
        return Finding("timing_forgery", f"config {name}: a null window in a robust loop, which makes none")
    unchecked = sum(1 for w in timed if len(w.audits) != 1)
    if stop_rule and unchecked:
        return Finding(
            "timing_forgery",
            f"config {name}: {unchecked} of {len(timed)} robust blocks were not followed "
            "by exactly one handoff to the checker; the harness hands every block's last output to it: "
            "windows were added to the harness's loop",
        )
    previous: list[float] | None = None
    samples: list[float] = []
    stops, fresh_done = [], 0
    for k, window in enumerate(timed):
        per_call_s = None if previous is None else statistics.median(previous) / 1e3
        low, high = timing_methods.block_length_range(per_call_s, loop.block_target_s, loop.max_block)
        if not low <= len(window.samples_ms) <= high:
            return Finding(
                "timing_forgery",
                f"config {name}: block {k + 1} holds {len(window.samples_ms)} calls; "
                f"after the block before it the harness makes {low}-{high}: windows were added to the "
                "harness's loop",
            )
        previous = window.samples_ms
        samples.extend(window.samples_ms)
        fresh_done += window.fresh
        walls = _stop_walls(window, run[0].opened, timeline)
        satisfied = fresh_done >= FreshPlan().minimum or k + 1 >= timing_methods.FRESH_WAIT_BLOCKS
        stops.append(
            tuple(
                satisfied
                and robust_should_stop(
                    samples,
                    wall,
                    min_samples=loop.stop_min_samples,
                    target_rel_se=loop.target_rel_se,
                    time_cap_s=loop.time_cap_s,
                    max_samples=loop.max_samples,
                )
                for wall in walls
            )
        )
    return _stop_breach(name, stops, "the robust loop's stop rule") if stop_rule else None  # type: ignore[arg-type]
