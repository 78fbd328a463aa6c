"""The timing ledger: what the parent saw of a worker's timed loops, on a clock the candidate cannot set, and what it
concludes.

A timed loop runs in the candidate's process, so everything it reports could be forged there. The worker therefore
announces each timed window as it happens: ``go`` right before the first start event of a repeat (or block, or
iteration), and ``timed`` with the window's samples right after the synchronisation that ends it. Both travel on a
Unix seqpacket socket whose receiving end asks the kernel to stamp every record with the moment it was sent
(``processes.message_channel``): the candidate cannot set those stamps, and they do not depend on how late the
parent reads. The parent relays every request to the checker in between (handoffs of outputs, and the seeds of fresh
inputs, which the checker draws when the worker needs them, so they cannot be known earlier), and notes when it
answered. So it knows, from records the candidate cannot rewrite after the fact:

- the samples of every window, as they were sent (the score is computed from these, never from the worker's final
  report);
- how much wall time each window took, which bounds its samples from both sides: no more device time than the wall
  time, and no less than the wall time minus the harness's own work in the window;
- how much wall time passed between two windows of a config apart from the checker's answers, which bounds the work
  the worker may do there to the harness's own (fresh inputs made, outputs staged and compared): a kernel that does
  its real work between windows, where its samples do not count, shows there;
- which windows were followed by an audit of the checker, on which inputs;
- how much wall time the harness's own procedure takes around no call at the same time in the same process: the
  null windows GPU MODE's loops put between their repeats, which the typical timed window is held to
  (``NULL_MARGIN_MS``).

The harness's own costs come from the worker's measurement before it read its request (``Calibration``: no
candidate code had run) and from the checker (the size of the inputs, how long making them takes). ``judge`` turns
the ledger into the rules ``timing_forgery`` and ``audit_evasion``. Pure logic: no processes, no clocks.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from ksearch.tools.timing import methods as timing_methods
from ksearch.tools.timing.primitives import FreshPlan
from ksearch.tools.timing.stats import (
    SCORED_MIN_SHARE,
    SCORED_MIN_WINDOWS,
    UndisturbedSamples,
    gpumode_should_stop,
    robust_should_stop,
)

KERNEL_JITTER_S = 0.010
"""Per config, with the kernel's send stamps: scheduling of the worker between an event and its message, and the
GPU's clocks after an idle gap (the smoke suite on an H100 read honest kernels 4-15 ms over the harness's own work
per config when several evaluations shared the GPU)."""
READ_JITTER_S = 0.025
"""Per config, where the kernel does not stamp messages and the parent stamps them when it reads them (its loop,
the GIL, the scheduler)."""
HOST_TIMING_JITTER_S = 0.1
"""Per config when the CPU times (tests only, ``KSEARCH_CPU_TIMING``): the worker, the checker and the tests share a
few busy cores."""
HOST_GAP_SLACK = 0.25
"""``GAP_SLACK`` when the CPU times (a 2-core machine running the test suite descheduled honest workers for a quarter
of the time between windows)."""
WINDOW_JITTER_MS = 0.5
"""With the kernel's stamps, how far one window's samples may exceed its wall time (event and stamp granularity)."""
RELATIVE_SLACK = 0.05
"""Wall time over the claimed device time allowed in proportion (event and clock granularity, launch latency that
grows with the work queued)."""
GAP_SLACK = 0.10
"""Time between windows beyond the harness's work allowed in proportion to all of it (its cost varies with the
machine's load more than the calibration sees)."""
MIN_CALL_OVERHEAD_MS = 0.02
"""Floor of the harness's per-call and per-window allowances, whatever the calibration measured."""
OVERHEAD_FACTOR = 3.0
"""The calibrated overheads are multiplied by this (each CPU of the cloud hosts flips between two speeds ~1.8x
apart, so the loop may run slower than when it was calibrated)."""
GENERATION_FACTOR = 1.5
"""The worker's ``make_inputs`` and input digests between windows may take this times the checker's."""
DIGEST_MS = 0.3
"""The input digest (an evenly strided sample of every input copied to the host) and its synchronisation."""
TRIMMED = 0.1
"""From 10 windows (or gaps) on, the tenth with the largest unexplained time is left out: the worker can be
descheduled for a few milliseconds on a busy host; a forgery shows in every window. Gaps around an audit are trimmed
among themselves only (``_gap_problem``)."""
WINDOW_OVERHEAD_CAP_MS = 0.05
"""Where each window holds one call (GPU MODE's loops), the calibrated window overhead counts for at most this much.
The calibration's 90th percentile is taken in a few milliseconds of a fresh worker and read 0.027-0.53 ms on one
H200 (2026-11-27), three times which was each window's allowance: up to 1.6 ms a window a forger could leave out of
its samples unseen on a 0.3 ms shape. The windows themselves held at most 0.143 ms beyond their samples (1700
windows of 17 honest TriMul evaluations, their median at most 0.054 ms); three times this cap covers that."""
MEDIAN_UNEXPLAINED_MS = 0.1
"""The typical window (the median) may hold at most this much wall time beyond its samples and the harness's own
work (or ``MEDIAN_UNEXPLAINED_SHARE`` of its samples, if more), with the kernel's stamps: honest windows on an H100
held 0.05-0.13 ms beyond their samples, on an H200 a median of at most 0.054 ms (2026-11-27), nearly all of it the
harness's calibrated work (0 ms beyond it in 28 honest evaluations' ledgers). The per-config total alone let a
forger through whose loop stopped after a few windows (constant forged samples meet the stop rule at once), since a
few windows' unexplained time stays under ``KERNEL_JITTER_S``."""
NULL_MARGIN_MS = 0.05
"""With the kernel's stamps, in loops of one-call windows with ``MEDIAN_MIN_WINDOWS`` null windows or more: the
median timed window may hold at most this much more wall time beyond its samples than the median null window holds
beyond its own. A null window is the harness's own procedure around no call, at the same time in the same process,
which the candidate cannot move (its code does not run then); a forger that leaves a constant part of each call out
of its samples shows here. On an H100 (2026-11-28) honest loops read between -0.49 and +0.003 ms (8 softmax loops of
GPU MODE's two modes, TriMul's 7 shapes: their large calls leave the device busy, so their windows hold less than
the null windows' synchronisation on an idle device); it was 0.1 ms, set on 2026-11-27 before any GPU run."""
NULL_SAMPLE_MEDIAN_MAX_MS = 0.1
"""A null window's sample is two events recorded back to back, as far apart as the host's Python between the two
records: a median of 0.016-0.027 ms on an H100 (2026-11-28; single ones up to 0.074 ms). A call is timed in a null
window only where a candidate marked the window null by writing on the harness's channel (found by a red-team review of
2026-11-27: its forged null windows would have taken the real samples out of the score); the typical null window of a
loop is held to this, and ``_schedule_problem`` to where the harness puts them."""
NULL_SAMPLE_MAX_MS = 1.0
"""Any one null window's sample: the host descheduled between the two records, never longer. (The rule of 2026-11-27
held every null window to 0.05 ms, untested on a GPU: on an H100 that rejected 2 of 4 honest GPU MODE loops at first
try.)"""
HOST_NULL_SAMPLE_MEDIAN_MAX_MS = 2.0
"""``NULL_SAMPLE_MEDIAN_MAX_MS`` when the CPU times (tests only: two host clock reads on busy shared cores)."""
HOST_NULL_SAMPLE_MAX_MS = 20.0
READ_MEDIAN_UNEXPLAINED_MS = 1.0
"""``MEDIAN_UNEXPLAINED_MS`` where the parent stamps records when it reads them."""
HOST_MEDIAN_UNEXPLAINED_MS = 2.0
"""``MEDIAN_UNEXPLAINED_MS`` when the CPU times (tests only: busy shared cores)."""
MEDIAN_UNEXPLAINED_SHARE = 0.1
MEDIAN_MIN_WINDOWS = 3
"""The median rule needs this many windows (upstream's stop rule times at least 3): one descheduled window of a config
timed once or twice is the per-config total's to judge."""
EVASION_RATIO = 3.0
"""Audited calls on re-randomised inputs slower (in median) than this times the other calls' headline statistic mean
the kernel did its work only when it could see the inputs had changed. Honest kernels read up to 2x there on an H100:
a MoE whose routing changes with the values, a 0.1 ms softmax after the gap an audit leaves (the GPU's clocks drop
while it idles), so only a kernel that skips most of its work stands out; the confirmation, where every repeat has
new inputs, is what catches the rest."""
EVASION_FLOOR_MS = 0.2
SPREAD_RATIO = 0.5
"""A block's median call must be at least this share of its mean: the calls of one kernel on one shape, not all the
time on one call and none on the others (which would forge a median)."""
STOP_WALL_BAND_S = 0.25
"""Where a loop's stop rule reads the wall time, the parent's clock and the worker's may differ by this much (the
worker starts its clock before the first window and reads it after each ``timed``): at the wall cap, stopping and
going on are both accepted."""
HOLD_CAP_MS = 50.0
"""The longest spin kernel ``robust`` puts before a block (``timing.Robust.hold_cap_ms``)."""


class Calibration(BaseModel):
    """The harness's own costs, measured by the worker before it read its request (no candidate code had run)."""

    model_config = ConfigDict(extra="ignore")

    window_overhead_ms: float = 0.05
    """Wall time of a synchronised one-call window beyond its events (launch latency, sync wake-up, the message)."""
    window_overhead_median_ms: float = 0.0
    """The median of the same windows (the figure above is their 90th percentile; 0 from a worker that did not
    measure it). Recorded, not yet used by a rule:
    whether it predicts the typical honest window's overhead better than the 90th percentile does (which read
    0.027-0.53 ms on one H200 whose windows held a median of at most 0.054 ms) is for the ledgers of a GPU run to
    show."""
    call_overhead_ms: float = 0.1
    """Host time of the harness's own work per call of a back-to-back block (events, checks, flush launch)."""
    gap_overhead_ms: float = 0.2
    """Host time of the harness's own work between two windows (stop rule, checks, events, a synchronisation)."""
    flush_ms: float = 0.2
    """Device time of one L2 flush (a 256 MB write)."""
    copy_gbps: float = 1000.0
    """Device-to-device copy rate (bytes read plus written per second / 1e9)."""


@dataclass
class Window:
    """One timed window as the parent saw it."""

    config: int
    run: int
    opened: float
    closed: float | None = None
    samples_ms: list[float] = field(default_factory=list)
    audits: list[str] = field(default_factory=list)
    """Kinds of the checker's handoffs that followed it ('bench', 'audit' for re-randomised inputs)."""
    input_seeds: list[int | None] = field(default_factory=list)
    """The input seed of each of those handoffs."""
    fresh: bool = False
    """An audit after it introduced activation values no earlier call of the config had seen."""
    staged_bytes: int = 0
    """Bytes of the outputs staged for the audits that followed it."""
    numbers: list[int | None] = field(default_factory=list)
    """The harness's number of this window (timed windows of its run closed so far) in each handoff that followed it
    (``Handoff.window``; None from a harness that did not send it)."""
    null: bool = False
    """A null window: the harness's own go, events, synchronisation and timed record around no call (GPU MODE's
    loops put some between their repeats). Never a sample of the score; the reference of ``NULL_MARGIN_MS``."""

    @property
    def wall_ms(self) -> float:
        return 0.0 if self.closed is None else (self.closed - self.opened) * 1e3


@dataclass
class TimingLedger:
    """Every window of one worker's timing phase, in order, with the audits that followed each and the intervals in
    which the worker waited for the checker."""

    windows: list[Window] = field(default_factory=list)
    relays: list[tuple[float, float]] = field(default_factory=list)
    """(the worker's request sent, the parent's answer written) for every request relayed during timing."""
    malformed: list[str] = field(default_factory=list)
    kernel_clock: bool = True
    """Every stamp is the kernel's send time (else some are the parent's read times: a wider jitter allowance)."""
    host_timing: bool = False
    """The CPU timed (tests only): host clocks, busy cores."""
    _seen_activations: set[tuple[int, int | None, int | None]] = field(default_factory=set)

    def go(self, config: object, run: object, stamp: float, null: bool = False) -> None:
        if not isinstance(config, int) or not isinstance(run, int):
            self.malformed.append("a window without a config or run index")
            return
        if self.windows and self.windows[-1].closed is None:
            self.malformed.append(f"config {config}: a window opened before the previous one was closed")
        self.windows.append(Window(config=config, run=run, opened=stamp, null=null))

    def timed(self, config: object, samples: object, stamp: float) -> None:
        last = self.windows[-1] if self.windows else None
        if last is None or last.closed is not None or last.config != config:
            self.malformed.append(f"config {config}: samples for a window that was never opened")
            return
        if not isinstance(samples, list) or not samples or not all(isinstance(x, (int, float)) for x in samples):
            self.malformed.append(f"config {config}: a window closed without samples")
            return
        last.closed = stamp
        last.samples_ms = [float(x) for x in samples]

    def handoff(
        self,
        kind: str,
        config: int,
        input_seed: int | None,
        activation_seed: int | None,
        nbytes: int,
        window: int | None = None,
    ) -> None:
        """A handoff relayed during timing: it audits the timed window just closed (``window``: the harness's number
        of that window)."""
        last = next((w for w in reversed(self.windows) if not w.null), None)
        if last is None or last.closed is None or last.config != config:
            return  # the first checked call of a config comes before its first window
        last.audits.append(kind)
        last.numbers.append(window)
        last.input_seeds.append(input_seed)
        last.staged_bytes += nbytes
        key = (config, input_seed, activation_seed)
        if activation_seed is not None and key not in self._seen_activations:
            last.fresh = True
        self._seen_activations.add(key)

    def ran(self, config: object, run: object, windows: object) -> None:
        """The end of a method run that hands nothing to the checker (compare mode): the harness's count of the run's
        timed windows names the run's last window, as a handoff names the window it audits (``_numbering_problem``)."""
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (config, run, windows)):
            self.malformed.append("the end of a run without its config, run or window count")
            return
        last = next((w for w in reversed(self.windows) if not w.null), None)
        if last is None or last.closed is None or (last.config, last.run) != (config, run):
            self.malformed.append(f"config {config}: the end of run {run} where no window of it was just closed")
            return
        last.numbers.append(windows)  # type: ignore[arg-type]

    def relay(self, sent: float, answered: float) -> None:
        self.relays.append((sent, max(sent, answered)))

    def by_config(self) -> dict[int, list[Window]]:
        """The closed timed windows of each config (null windows apart: ``nulls``)."""
        grouped: dict[int, list[Window]] = {}
        for window in self.windows:
            if window.closed is not None and not window.null:
                grouped.setdefault(window.config, []).append(window)
        return grouped

    def loop(self, config: int) -> list[Window]:
        """The closed windows of ``config``, timed and null, in the order they were opened."""
        return [w for w in self.windows if w.config == config and w.closed is not None]

    def nulls(self, config: int) -> list[Window]:
        """The closed null windows of ``config``."""
        return [w for w in self.windows if w.null and w.closed is not None and w.config == config]

    def nulls_between(self, start: float, end: float) -> float:
        """Seconds of ``[start, end]`` spent in null windows (the harness's own work between two timed windows)."""
        return _overlap_s(((w.opened, w.closed) for w in self.windows if w.null and w.closed is not None), start, end)

    def samples(self, config: int) -> list[float]:
        return [x for w in self.by_config().get(config, []) for x in w.samples_ms]

    def relayed_between(self, start: float, end: float) -> float:
        """Seconds of ``[start, end]`` in which the worker waited for the checker."""
        return _overlap_s(self.relays, start, end)


def _overlap_s(spans: Iterable[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of ``[start, end]`` covered by ``spans`` (each counted apart: they do not overlap each other)."""
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in spans)


@dataclass(frozen=True)
class MethodShape:
    """What a timing method does in and between its windows, for the allowances and the audits it must make."""

    flush_per_call: bool = False
    hold_per_window: bool = False
    clone_per_call: bool = False
    every_window_audited: bool = False
    """Every timed call is checked, each on inputs of its own (GPU MODE's leaderboard procedure)."""
    fresh_inputs_every_window: bool = False
    """A whole input set is made between any two windows."""
    min_fresh_audits: int = 0
    headline: str = "mean"
    one_kernel_per_window: bool = False
    """Windows of back-to-back calls: their samples must be spread like one kernel's (``SPREAD_RATIO``)."""


_LEADERBOARD = MethodShape(every_window_audited=True, fresh_inputs_every_window=True)
METHOD_SHAPES: dict[str, MethodShape] = {
    "gpumode-benchmark": MethodShape(min_fresh_audits=2),
    "gpumode": _LEADERBOARD,
    "confirm": _LEADERBOARD,
    "robust": MethodShape(
        flush_per_call=True, hold_per_window=True, min_fresh_audits=2, headline="median", one_kernel_per_window=True
    ),
    "flashinfer": MethodShape(flush_per_call=True, clone_per_call=True, min_fresh_audits=2),
    "compare": MethodShape(
        flush_per_call=True, hold_per_window=True, min_fresh_audits=2, headline="median", one_kernel_per_window=True
    ),
}


@dataclass(frozen=True)
class Finding:
    rule: str
    evidence: str


@dataclass(frozen=True)
class ConfigFacts:
    """What the checker learnt of one benchmark config (trusted): its inputs' size, how long making them and
    digesting them took there."""

    input_bytes: int = 0
    generation_ms: float = 0.0
    digest_ms: float = 0.0


def scored_samples(ledger: TimingLedger, config: int, method: str) -> tuple[list[float], int]:
    """The samples a config's score is computed from, and how many windows were left out of it.

    Upstream's loops (GPU MODE's benchmark mode, flashinfer-bench, a robust median) run their repeats back to back;
    ksearch stops its loop after some windows to hand the output to the checker and wait for its answer (the audits a
    candidate cannot tell from timed repeats), and some of them run on activations re-randomised just before. The window
    an audit follows and the one right after its gap run with the host and the device just back from idle: on an H200
    they read 0.1-0.2 ms slower on TriMul's launch-bound shapes and put ksearch's mean 1-9 % above the same loop without
    them (bench/audit_share.py; bench/RESULTS.md, "Timing fidelity"). Those windows are still judged like every other
    (``judge``); they are only left out of the statistic, which then reads what upstream's uninterrupted loop reads. A
    candidate gains nothing: it cannot tell which windows these are, and where it can tell an audited call from the
    others, ``audit_evasion`` and the leaderboard-mode confirmation judge it. Methods that check every window (GPU
    MODE's leaderboard mode, ``confirm``) do so upstream too: all their windows count."""
    windows = ledger.by_config().get(config, [])
    everything = [x for w in windows for x in w.samples_ms]
    if METHOD_SHAPES.get(method, MethodShape()).every_window_audited:
        return everything, 0
    disturbed = {i for i, w in enumerate(windows) if w.audits}
    disturbed |= {i + 1 for i in disturbed}
    kept = [w for i, w in enumerate(windows) if i not in disturbed]
    if len(kept) < max(SCORED_MIN_WINDOWS, SCORED_MIN_SHARE * len(windows)):
        return everything, 0
    return [x for w in kept for x in w.samples_ms], len(windows) - len(kept)


def judge(
    ledger: TimingLedger,
    method: str,
    calibration: Calibration,
    *,
    configs: list[str],
    flush_l2: bool = True,
    input_bytes: dict[int, int] | None = None,
    generation_ms: dict[int, float] | None = None,
    digest_ms: dict[int, float] | None = None,
    fresh_audits_possible: bool = True,
) -> Finding | None:
    """The first rule the ledger breaks, or None. ``configs``: the benchmark configs' names, in order (every one must
    have windows); ``input_bytes`` and ``generation_ms``: per config, from the checker; ``fresh_audits_possible``:
    the task declares inputs that may be re-randomised."""
    disorder = out_of_order(ledger)
    if disorder is not None:
        return disorder
    shape = METHOD_SHAPES.get(method, MethodShape())
    grouped = ledger.by_config()
    for index, name in enumerate(configs):
        windows = grouped.get(index, [])
        if not windows:
            return Finding("timing_forgery", f"config {name}: no timed window reached the evaluator")
        facts = ConfigFacts(
            (input_bytes or {}).get(index, 0), (generation_ms or {}).get(index, 0.0), (digest_ms or {}).get(index, 0.0)
        )
        for problem in (
            _wall_problem(name, windows, shape, calibration, flush_l2, facts, ledger),
            _null_problem(name, windows, ledger.nulls(index), ledger),
            _gap_problem(name, windows, shape, calibration, facts, ledger),
            _spread_problem(name, windows, shape),
            _audit_problem(name, windows, shape, fresh_audits_possible),
        ):
            if problem is not None:
                return problem
    return None


def out_of_order(ledger: TimingLedger) -> Finding | None:
    """Timing messages out of order: only a candidate writing on the harness's channel sends them."""
    if ledger.malformed:
        return Finding("timing_forgery", f"the timing messages were out of order: {ledger.malformed[0]}")
    return None


def _median_unexplained_floor_ms(ledger: TimingLedger) -> float:
    if ledger.host_timing:
        return HOST_MEDIAN_UNEXPLAINED_MS
    return MEDIAN_UNEXPLAINED_MS if ledger.kernel_clock else READ_MEDIAN_UNEXPLAINED_MS


def _jitter_ms(ledger: TimingLedger) -> float:
    if ledger.host_timing:
        return HOST_TIMING_JITTER_S * 1e3
    return (KERNEL_JITTER_S if ledger.kernel_clock else READ_JITTER_S) * 1e3


def window_allowances(
    windows: list[Window], shape: MethodShape, calibration: Calibration, flush_l2: bool, input_bytes: int
) -> list[float]:
    """Per window, the wall time (ms) the harness's own work may add beyond the samples it claims: the window's
    overhead, per call the harness's host work between back-to-back calls, the L2 flush and the argument clone where
    the method does them, the outputs staged for the checker, the spin kernel before a robust block (about the
    previous block's device time; a full one for a run's first block), and the in-window copy of re-randomised
    activations in a robust block."""
    blocks = any(len(w.samples_ms) > 1 for w in windows)  # back-to-back calls in a window: the harness between them
    overhead = calibration.window_overhead_ms
    if not blocks:  # one call per window: the calibration's own procedure
        overhead = min(overhead, WINDOW_OVERHEAD_CAP_MS)
    per_window = max(MIN_CALL_OVERHEAD_MS, overhead) * OVERHEAD_FACTOR
    copy_ms_per_byte = 1.5 * 2 / (max(calibration.copy_gbps, 1.0) * 1e6)
    per_call = 0.0
    if blocks:
        per_call += max(MIN_CALL_OVERHEAD_MS, calibration.call_overhead_ms) * OVERHEAD_FACTOR
    if shape.flush_per_call and flush_l2:
        per_call += calibration.flush_ms * 1.5
    if shape.clone_per_call:
        per_call += input_bytes * copy_ms_per_byte
    allowances = []
    previous: list[float] | None = None
    run = None
    for window in windows:
        allowed = per_window + len(window.samples_ms) * per_call + window.staged_bytes * copy_ms_per_byte
        if window.run != run:  # a new method run (compare mode): its first hold comes from its own warm-up
            previous, run = None, window.run
        if shape.hold_per_window:
            calls = len(window.samples_ms)
            allowed += HOLD_CAP_MS if previous is None else min(HOLD_CAP_MS, calls * statistics.median(previous))
            if window.fresh:
                allowed += input_bytes * copy_ms_per_byte
            previous = window.samples_ms
        allowances.append(allowed)
    return allowances


def allowance_ms(
    windows: list[Window], shape: MethodShape, calibration: Calibration, flush_l2: bool, input_bytes: int
) -> float:
    """Wall time the harness's own work may add to ``windows`` beyond the samples they claim, in all."""
    return sum(window_allowances(windows, shape, calibration, flush_l2, input_bytes))


def gap_allowance_ms(
    before: Window, after: Window, shape: MethodShape, calibration: Calibration, facts: ConfigFacts
) -> float:
    """The wall time (ms) the harness's own work may take between two windows, besides waiting for the checker: its
    loop overhead; after an audited window, staging, comparing and digesting its output and inputs; before a window
    on fresh inputs (or fresh activation values), making and digesting them. Making and digesting inputs may take
    ``GENERATION_FACTOR`` times what the checker took for the same work (it makes and digests the same inputs)."""
    overhead = max(MIN_CALL_OVERHEAD_MS, calibration.gap_overhead_ms) * OVERHEAD_FACTOR
    copy_ms_per_byte = 1.5 * 3 / (max(calibration.copy_gbps, 1.0) * 1e6)  # staged, then compared (read twice)
    allowed = overhead
    if before.audits:
        allowed += overhead + DIGEST_MS + GENERATION_FACTOR * facts.digest_ms + before.staged_bytes * copy_ms_per_byte
    if shape.fresh_inputs_every_window or after.fresh:
        allowed += overhead + DIGEST_MS + GENERATION_FACTOR * (facts.generation_ms + facts.digest_ms)
    return allowed


def _trimmed_sum(values: list[float]) -> float:
    ordered = sorted(values)
    if len(ordered) >= 10:
        ordered = ordered[: len(ordered) - int(len(ordered) * TRIMMED)]
    return sum(ordered)


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


def _wall_problem(
    name: str,
    windows: list[Window],
    shape: MethodShape,
    calibration: Calibration,
    flush_l2: bool,
    facts: ConfigFacts,
    ledger: TimingLedger,
) -> Finding | None:
    wall = sum(w.wall_ms for w in windows)
    claimed = sum(sum(w.samples_ms) for w in windows)
    jitter = _jitter_ms(ledger)
    calls = sum(len(w.samples_ms) for w in windows)
    if claimed > wall * (1 + RELATIVE_SLACK) + jitter:
        return Finding(
            "timing_forgery",
            f"config {name}: {calls} timed calls report {claimed:.3f} ms of device time, "
            f"but their windows took {wall:.3f} ms on the evaluator's clock",
        )
    if ledger.kernel_clock and not ledger.host_timing:  # each window's events lie inside it
        for window in windows:
            if sum(window.samples_ms) > window.wall_ms * (1 + RELATIVE_SLACK) + WINDOW_JITTER_MS:
                return Finding(
                    "timing_forgery",
                    f"config {name}: a window reports {sum(window.samples_ms):.3f} ms of "
                    f"device time but took {window.wall_ms:.3f} ms on the evaluator's clock",
                )
    allowances = window_allowances(windows, shape, calibration, flush_l2, facts.input_bytes)
    per_window = [
        max(0.0, w.wall_ms - sum(w.samples_ms) * (1 + RELATIVE_SLACK) - allowed)
        for w, allowed in zip(windows, allowances)
    ]
    unexplained = _trimmed_sum(per_window)
    if unexplained > jitter:
        return Finding(
            "timing_forgery",
            f"config {name}: {calls} timed calls report {claimed:.3f} ms of device time "
            f"in windows that took {wall:.3f} ms on the evaluator's clock; {unexplained:.3f} ms of it is "
            f"beyond what the harness's own work accounts for ({sum(allowances):.3f} ms) and "
            f"{jitter:.0f} ms of scheduling",
        )
    if len(windows) >= MEDIAN_MIN_WINDOWS:
        typical = statistics.median(per_window)
        typical_claim = statistics.median(sum(w.samples_ms) for w in windows)
        limit = max(_median_unexplained_floor_ms(ledger), MEDIAN_UNEXPLAINED_SHARE * typical_claim)
        if typical > limit:
            return Finding(
                "timing_forgery",
                f"config {name}: the median timed window took {typical:.3f} ms on the "
                f"evaluator's clock beyond its samples ({typical_claim:.3f} ms) and the harness's own "
                f"work; at most {limit:.3f} ms is allowed",
            )
    return None


def _null_problem(name: str, windows: list[Window], nulls: list[Window], ledger: TimingLedger) -> Finding | None:
    """Null windows hold no call (``NULL_SAMPLE_MAX_MS`` each, ``NULL_SAMPLE_MEDIAN_MAX_MS`` the typical one); the
    typical timed window against the typical null window of the same loop (``NULL_MARGIN_MS``)."""
    limit = HOST_NULL_SAMPLE_MAX_MS if ledger.host_timing else NULL_SAMPLE_MAX_MS
    for window in nulls:
        if sum(window.samples_ms) > limit:
            return Finding(
                "timing_forgery",
                f"config {name}: a null window (the harness around no call) reports "
                f"{sum(window.samples_ms):.3f} ms of device time; at most {limit:.3f} ms is possible",
            )
    typical_limit = HOST_NULL_SAMPLE_MEDIAN_MAX_MS if ledger.host_timing else NULL_SAMPLE_MEDIAN_MAX_MS
    if len(nulls) >= MEDIAN_MIN_WINDOWS:
        typical_null = statistics.median(sum(w.samples_ms) for w in nulls)
        if typical_null > typical_limit:
            return Finding(
                "timing_forgery",
                f"config {name}: the median of {len(nulls)} null windows (the harness "
                f"around no call) reports {typical_null:.3f} ms of device time; at most "
                f"{typical_limit:.3f} ms is possible: calls were timed in them",
            )
    if not ledger.kernel_clock or ledger.host_timing or len(nulls) < MEDIAN_MIN_WINDOWS:
        return None
    if len(windows) < MEDIAN_MIN_WINDOWS or any(len(w.samples_ms) != 1 for w in windows):
        return None
    timed = statistics.median(w.wall_ms - sum(w.samples_ms) * (1 + RELATIVE_SLACK) for w in windows)
    null = statistics.median(max(0.0, w.wall_ms - sum(w.samples_ms)) for w in nulls)
    if timed > null + NULL_MARGIN_MS:
        return Finding(
            "timing_forgery",
            f"config {name}: the median timed window took {timed:.3f} ms on the "
            f"evaluator's clock beyond its samples, the median of {len(nulls)} null windows of the same "
            f"loop (the harness around no call) {null:.3f} ms; at most {NULL_MARGIN_MS:.3f} ms more is "
            "allowed",
        )
    return None


def _pairs(windows: list[Window]) -> Iterator[tuple[Window, Window]]:
    """Consecutive windows of one method run (compare mode warms up between its runs: no pair spans two)."""
    for before, after in zip(windows, windows[1:]):
        if before.run == after.run and before.closed is not None:
            yield before, after


def _gap_problem(
    name: str,
    windows: list[Window],
    shape: MethodShape,
    calibration: Calibration,
    facts: ConfigFacts,
    ledger: TimingLedger,
) -> Finding | None:
    """Time between windows beyond the checker's answers and the harness's own work: where a kernel whose samples
    claim little would do its real work. The gaps around an audit (after an audited window, before one on fresh
    values) are judged on their own: at the default audit rate they are the largest tenth of all gaps, the share the
    trim leaves out as descheduling, so a trim over all gaps credited whatever the worker did there (issue 59: a
    method of the output the harness ran did the kernel's work there). Each group is trimmed within itself, so a
    loop's few audit gaps (fewer than ten at the default rate) count in full, and where every gap is an audit gap
    (``confirm``) the trim is what it was."""
    excesses, audit_excesses, total = [], [], 0.0
    for before, after in _pairs(windows):
        assert before.closed is not None
        gap_ms = (
            after.opened
            - before.closed
            - ledger.relayed_between(before.closed, after.opened)
            - ledger.nulls_between(before.closed, after.opened)
        ) * 1e3
        total += max(0.0, gap_ms)
        excess = max(0.0, gap_ms - gap_allowance_ms(before, after, shape, calibration, facts))
        (audit_excesses if before.audits or after.fresh else excesses).append(excess)
    unexplained = _trimmed_sum(excesses) + _trimmed_sum(audit_excesses)
    jitter = _jitter_ms(ledger) + (HOST_GAP_SLACK if ledger.host_timing else GAP_SLACK) * total
    if unexplained > jitter:
        return Finding(
            "timing_forgery",
            f"config {name}: {unexplained:.3f} ms passed between timed windows beyond "
            f"the checker's answers, the harness's own work and {jitter:.1f} ms of slack ({total:.3f} "
            "ms in all): work done where no sample counts it",
        )
    return None


def _spread_problem(name: str, windows: list[Window], shape: MethodShape) -> Finding | None:
    if not shape.one_kernel_per_window:
        return None
    blocks = [w for w in windows if len(w.samples_ms) >= 3]
    medians = sum(statistics.median(w.samples_ms) * len(w.samples_ms) for w in blocks)
    sums = sum(sum(w.samples_ms) for w in blocks)
    if blocks and medians < SPREAD_RATIO * sums:
        return Finding(
            "timing_forgery",
            f"config {name}: in its blocks the median call reports {medians / sums:.0%} "
            "of the mean: the samples are not spread like calls of one kernel on one shape",
        )
    return None


def _audit_problem(name: str, windows: list[Window], shape: MethodShape, fresh_possible: bool) -> Finding | None:
    if shape.every_window_audited:
        unchecked = sum(1 for w in windows if not w.audits)
        if unchecked:
            return Finding(
                "audit_evasion",
                f"config {name}: {unchecked} of {len(windows)} timed calls were not "
                "handed to the checker (every timed output must be checked in this method)",
            )
        seeds = [w.input_seeds[0] for w in windows]
        if len(set(seeds)) < len(seeds):
            return Finding(
                "audit_evasion",
                f"config {name}: {len(seeds) - len(set(seeds))} timed calls were checked "
                "on inputs an earlier call had (every timed call must run on fresh inputs)",
            )
    fresh = [w for w in windows if w.fresh]
    needed = shape.min_fresh_audits if fresh_possible else 0
    if len(fresh) < needed:
        return Finding(
            "audit_evasion",
            f"config {name}: {len(fresh)} audits on re-randomised inputs reached the checker, {needed} are required",
        )
    if fresh:
        audited = [w.samples_ms[-1] for w in fresh]
        others = [x for w in windows for x in (w.samples_ms if not w.fresh else w.samples_ms[:-1])]
        if len(others) >= 2:
            typical = statistics.mean(others) if shape.headline == "mean" else statistics.median(others)
            if statistics.median(audited) > EVASION_RATIO * typical + EVASION_FLOOR_MS:
                return Finding(
                    "audit_evasion",
                    f"config {name}: the calls on re-randomised inputs took "
                    f"{statistics.median(audited):.4f} ms (median of {len(audited)}), the other timed calls "
                    f"{typical:.4f} ms ({shape.headline}): the kernel works only when it sees new values",
                )
    return None
