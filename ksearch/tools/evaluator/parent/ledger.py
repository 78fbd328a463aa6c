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
  (``ledger_rules.NULL_MARGIN_MS``).

The harness's own costs come from the worker's measurement before it read its request (``Calibration``: no
candidate code had run) and from the checker (the size of the inputs, how long making them takes). ``judge`` turns
the ledger into the rules ``timing_forgery`` and ``audit_evasion`` (``ledger_rules``), ``judge_loops`` holds its
windows to the method's loop (``ledger_loops``); this module keeps the records and what the score reads. Pure logic:
no processes, no clocks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from ksearch.tools.timing.methods import FlashInfer
from ksearch.tools.timing.stats import SCORED_MIN_SHARE, SCORED_MIN_WINDOWS


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
    host_copy_gbps: float = 0.0
    """The slower of a copy from the device to pageable host memory and back (bytes across per second / 1e9); 0 from
    a worker that did not measure it."""
    staging_on_host: bool = False
    """Set by the parent, never read from the worker: the evaluation's staging buffer lies in host memory (no CUDA
    IPC here), so its outputs and handed inputs cross to the device at ``host_copy_gbps``."""

    @classmethod
    def of_worker(cls, figures: dict[str, float], *, staging_on_host: bool) -> Calibration:
        """The worker's figures (measured before it read its request) and where the parent put the staging buffer,
        which is never the worker's word."""
        return cls.model_validate({**figures, "staging_on_host": staging_on_host})


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
    loops put some between their repeats). Never a sample of the score; the reference of
    ``ledger_rules.NULL_MARGIN_MS``."""

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
        timed windows names the run's last window, as a handoff names the window it audits
        (``ledger_loops._numbering_problem``)."""
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
    flush_per_gap: bool = False
    """An L2 flush between any two windows (flashinfer-bench's loop: it lies between the windows ksearch closes)."""
    clone_per_gap: bool = False
    """A clone of every argument between any two windows."""
    trial_windows: int = 0
    """Windows per trial (0: one trial): before a trial's first window the harness makes the trial's inputs and runs
    ``trial_warmup`` untimed iterations."""
    trial_warmup: int = 0
    every_window_audited: bool = False
    """Every timed call is checked, each on inputs of its own (GPU MODE's leaderboard procedure)."""
    fresh_inputs_every_window: bool = False
    """A whole input set is made between any two windows."""
    min_fresh_audits: int = 0
    headline: str = "mean"
    one_kernel_per_window: bool = False
    """Windows of back-to-back calls: their samples must be spread like one kernel's (``SPREAD_RATIO``)."""


_FLASHINFER = FlashInfer()
_LEADERBOARD = MethodShape(every_window_audited=True, fresh_inputs_every_window=True)
METHOD_SHAPES: dict[str, MethodShape] = {
    "gpumode-benchmark": MethodShape(min_fresh_audits=2),
    "gpumode": _LEADERBOARD,
    "confirm": _LEADERBOARD,
    "robust": MethodShape(
        flush_per_call=True, hold_per_window=True, min_fresh_audits=2, headline="median", one_kernel_per_window=True
    ),
    "flashinfer": MethodShape(
        flush_per_gap=True,
        clone_per_gap=True,
        min_fresh_audits=2,
        trial_windows=_FLASHINFER.iterations,
        trial_warmup=_FLASHINFER.warmup,
    ),
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


def out_of_order(ledger: TimingLedger) -> Finding | None:
    """Timing messages out of order: only a candidate writing on the harness's channel sends them."""
    if ledger.malformed:
        return Finding("timing_forgery", f"the timing messages were out of order: {ledger.malformed[0]}")
    return None
