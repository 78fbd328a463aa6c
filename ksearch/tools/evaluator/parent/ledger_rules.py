"""The ledger's rules on each config's windows and the gaps between them (``judge``): their samples against the
evaluator's clock and the harness's own work, null windows, spread and audits. Pure logic."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from ksearch.tools.evaluator.parent.ledger import (
    METHOD_SHAPES,
    Calibration,
    ConfigFacts,
    Finding,
    MethodShape,
    TimingLedger,
    Window,
    out_of_order,
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
loop is held to this, and ``ledger_loops`` to where the harness puts them."""
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
HOST_EVASION_RATIO = 8.0
HOST_EVASION_FLOOR_MS = 2.0
"""``EVASION_RATIO`` and ``EVASION_FLOOR_MS`` when the CPU times (tests only): a call right after the worker waited
for the checker's prepared audit runs on cold caches of a busy 2-core machine while the checker still computes (an
honest TriMul reference read 3.08 times its other calls on 2026-12-07, 8.42 against 2.73 ms, and 3.49 times in a CI
run the day after, 19.75 against 5.66 ms). A kernel that replays its output between audits reads hundreds of times
its replays there, so the wider bound still catches it."""
SPREAD_RATIO = 0.5
"""A block's median call must be at least this share of its mean: the calls of one kernel on one shape, not all the
time on one call and none on the others (which would forge a median)."""
HOLD_CAP_MS = 50.0
"""The longest spin kernel ``robust`` puts before a block (``timing.Robust.hold_cap_ms``)."""


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
            _audit_problem(name, windows, shape, fresh_audits_possible, host_timing=ledger.host_timing),
        ):
            if problem is not None:
                return problem
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
    copy_ms_per_byte = device_ms_per_byte(calibration, passes=2)
    per_call = 0.0
    if blocks:
        per_call += max(MIN_CALL_OVERHEAD_MS, calibration.call_overhead_ms) * OVERHEAD_FACTOR
    if shape.flush_per_call and flush_l2:
        per_call += calibration.flush_ms * 1.5
    staged_ms_per_byte = copy_ms_per_byte + host_ms_per_byte(calibration)
    allowances = []
    previous: list[float] | None = None
    run = None
    for window in windows:
        allowed = per_window + len(window.samples_ms) * per_call + window.staged_bytes * staged_ms_per_byte
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


HOST_COPY_FLOOR_GBPS = 1.0
"""The slowest crossing to host memory the rules assume, whatever a worker measured (or where it measured none)."""


def gap_allowance_ms(
    before: Window,
    after: Window,
    shape: MethodShape,
    calibration: Calibration,
    facts: ConfigFacts,
    *,
    trial_start: bool = False,
    typical_call_ms: float = 0.0,
) -> float:
    """The wall time (ms) the harness's own work may take between two windows, besides waiting for the checker: its
    loop overhead; after an audited window, staging, comparing and digesting its output and inputs; before a window
    on fresh inputs (or fresh activation values), making and digesting them; the L2 flush and the arguments' clone
    where the method does them between windows. Making and digesting inputs may take ``GENERATION_FACTOR`` times what
    the checker took for the same work (it makes and digests the same inputs). Before a trial's first window
    (``trial_start``), the trial's inputs are made and ``shape.trial_warmup`` untimed iterations run, each allowed an
    iteration's harness work and ``typical_call_ms`` (the config's median sample) of the call."""
    overhead = max(MIN_CALL_OVERHEAD_MS, calibration.gap_overhead_ms) * OVERHEAD_FACTOR
    copy_ms_per_byte = device_ms_per_byte(calibration, passes=3)  # staged, then compared (read twice)
    host = host_ms_per_byte(calibration)  # host staging: the staged copy back to the device, the handed inputs to it
    iteration = 0.0
    if shape.flush_per_gap:
        iteration += calibration.flush_ms * 1.5
    if shape.clone_per_gap:
        iteration += facts.input_bytes * device_ms_per_byte(calibration, passes=2)
    allowed = overhead + iteration
    if before.audits:
        allowed += overhead + DIGEST_MS + GENERATION_FACTOR * facts.digest_ms
        allowed += before.staged_bytes * (copy_ms_per_byte + host)
    if shape.fresh_inputs_every_window or after.fresh or trial_start:
        allowed += overhead + DIGEST_MS + GENERATION_FACTOR * (facts.generation_ms + facts.digest_ms)
        allowed += facts.input_bytes * host
    if trial_start:
        allowed += shape.trial_warmup * (overhead + iteration + typical_call_ms * (1 + RELATIVE_SLACK))
    return allowed


def device_ms_per_byte(calibration: Calibration, *, passes: int) -> float:
    """Per byte, what ``passes`` passes over it on the device may take (a copy reads and writes: 2), at 1.5x the
    calibrated rate (at least 1 GB/s)."""
    return 1.5 * passes / (max(calibration.copy_gbps, 1.0) * 1e6)


def host_ms_per_byte(calibration: Calibration) -> float:
    """Per byte, what a crossing between the device and a staging buffer in host memory may take (1.5x the measured
    rate); 0 where the buffer is on the device. Without it every honest TriMul evaluation on host staging was rejected
    for the time between windows (an H100, 2026-12-07: ~23 ms audit gaps where the device allowance gave ~7)."""
    if not calibration.staging_on_host:
        return 0.0
    return 1.5 / (max(calibration.host_copy_gbps, HOST_COPY_FLOOR_GBPS) * 1e6)


def _trimmed_sum(values: list[float]) -> float:
    ordered = sorted(values)
    if len(ordered) >= 10:
        ordered = ordered[: len(ordered) - int(len(ordered) * TRIMMED)]
    return sum(ordered)


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


def _pairs(windows: list[Window], shape: MethodShape) -> Iterator[tuple[Window, Window, bool]]:
    """Consecutive windows of one method run (compare mode warms up between its runs: no pair spans two), and whether
    the second begins a trial of the method's (``MethodShape.trial_windows``)."""
    positions: dict[int, int] = {}
    indices = []
    for window in windows:
        indices.append(positions.get(window.run, 0))
        positions[window.run] = indices[-1] + 1
    for index in range(1, len(windows)):
        before, after = windows[index - 1], windows[index]
        if before.run == after.run and before.closed is not None:
            yield before, after, bool(shape.trial_windows) and indices[index] % shape.trial_windows == 0


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
    typical_call_ms = statistics.median(x for w in windows for x in w.samples_ms) if shape.trial_windows else 0.0
    for before, after, trial_start in _pairs(windows, shape):
        assert before.closed is not None
        gap_ms = (
            after.opened
            - before.closed
            - ledger.relayed_between(before.closed, after.opened)
            - ledger.nulls_between(before.closed, after.opened)
        ) * 1e3
        total += max(0.0, gap_ms)
        allowed = gap_allowance_ms(
            before, after, shape, calibration, facts, trial_start=trial_start, typical_call_ms=typical_call_ms
        )
        excess = max(0.0, gap_ms - allowed)
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


def _audit_problem(
    name: str, windows: list[Window], shape: MethodShape, fresh_possible: bool, *, host_timing: bool = False
) -> Finding | None:
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
            ratio, floor = (
                (HOST_EVASION_RATIO, HOST_EVASION_FLOOR_MS) if host_timing else (EVASION_RATIO, EVASION_FLOOR_MS)
            )
            if statistics.median(audited) > ratio * typical + floor:
                return Finding(
                    "audit_evasion",
                    f"config {name}: the calls on re-randomised inputs took "
                    f"{statistics.median(audited):.4f} ms (median of {len(audited)}), the other timed calls "
                    f"{typical:.4f} ms ({shape.headline}): the kernel works only when it sees new values",
                )
    return None
