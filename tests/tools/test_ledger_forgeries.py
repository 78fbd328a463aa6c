"""Forgeries the red team of issue 30 got past the parent's ledger, rebuilt as the parent sees them: pure, with the
send stamps and samples that the exploit files in ``exploits/`` produce (``reach_*``, ``state_*``, ``audit_*``).

Each case is a ledger an honest worker cannot produce; ``judge`` must refuse it. (They were xfail until the ledger
accounted for the time between windows, held each window against its own wall time, required confirm's checks and
compared audited calls with the statistic the score uses.) Fake windows sent in one record with a real one are also
refused before the ledger sees them: a record holding several messages is malformed (``processes.LineReader``)."""

from __future__ import annotations

import pytest

from ksearch.tools.evaluator.parent.ledger import Calibration, TimingLedger
from ksearch.tools.evaluator.parent.ledger_rules import judge

CAL = Calibration(window_overhead_ms=0.03, call_overhead_ms=0.05, flush_ms=0.1, copy_gbps=2000.0)
CALL_MS = 5.0
"""What each call of the forgers really costs."""


class Timeline:
    """Send stamps on the parent's clock (seconds), advanced by hand."""

    def __init__(self) -> None:
        self.ledger = TimingLedger()
        self.now = 100.0

    def wait(self, ms: float) -> None:
        self.now += ms / 1e3

    def window(
        self, config: int, wall_ms: float, samples: list[float], audit: str | None = None, activation: int | None = None
    ) -> None:
        self.ledger.go(config, 0, self.now)
        self.wait(wall_ms)
        self.ledger.timed(config, samples, self.now)
        if audit is not None:
            self.ledger.handoff(audit, config, 7, activation, 4096)
        self.wait(0.05)  # the harness between two windows


def _fresh(i: int, at: tuple[int, ...] = (1, 9, 20)) -> tuple[str | None, int | None]:
    return ("audit", 1000 + i) if i in at else (None, None)


def test_a_go_held_back_to_its_timed_message_is_forged() -> None:
    """reach_match_hold_go.py: the go and the timed message leave in one record (one stamp), the 5 ms call happens
    before it, between windows; each window claims 2 microseconds."""
    line = Timeline()
    for i in range(30):
        line.wait(CALL_MS)
        line.window(0, 0.0, [0.002], *_fresh(i))
    finding = judge(line.ledger, "gpumode-benchmark", CAL, configs=["a"])
    assert finding is not None and finding.rule == "timing_forgery"


def test_fake_windows_beside_the_real_ones_are_forged() -> None:
    """reach_vars_inject_windows.py / reach_concat_frames_fd.py: every real window is followed, in the same record,
    by 40 empty windows claiming half a microsecond each; the median of the samples is the fake one."""
    line = Timeline()
    for i in range(30):
        line.window(0, CALL_MS, [CALL_MS], *_fresh(i))
        for _ in range(40):
            line.window(0, 0.0, [0.0005])
    finding = judge(line.ledger, "gpumode-benchmark", CAL, configs=["a"])
    assert finding is not None and finding.rule in ("timing_forgery", "audit_evasion")  # the real calls stand out


def test_time_moved_between_windows_is_forged() -> None:
    """state_runner_slot_redistribute.py, made to survive robust's holds: blocks of ten 1 ms calls behind a 10 ms
    spin kernel; of every three windows the first claims the three windows' calls (its median then pays the next
    hold), the other two claim 1 microsecond per call, so two thirds of the samples, and the median, are forged."""
    line = Timeline()
    real_wall = 10.0 + 10 * 1.0 + 10 * 0.15  # hold, calls, the harness between calls
    for block in range(30):
        samples = [3 * 1.0 - 0.002] * 10 if block % 3 == 0 else [0.001] * 10
        fresh = block in (4, 17)
        line.window(0, real_wall, samples, "audit" if fresh else "bench", 300 + block if fresh else None)
    assert judge(line.ledger, "robust", CAL, configs=["a"]) is not None


@pytest.mark.xfail(
    strict=True,
    reason="a documented residual: honest kernels read up to 2x on re-randomised inputs on "
    "an H100 (data-dependent routing, clocks after an audit's gap), so audit_evasion needs 3x; a replay "
    "padded to about half the honest time passes gpumode-benchmark and fails the confirmation",
)
def test_padded_replays_that_keep_the_median_are_audit_evasion() -> None:
    """audit_probe_pad_benchmark.py: the calls on fresh values compute (5 ms); of the others, 60 % are replays padded
    to 0.9 of a call and 40 % return at once, so their median is 4.5 ms and their mean 2.7 ms."""
    line = Timeline()
    for i in range(60):
        audit, activation = _fresh(i, at=(1, 13, 30, 47))
        sample = CALL_MS if audit else (0.9 * CALL_MS if i % 10 < 6 else 0.02)
        line.window(0, sample + 0.02, [sample], audit, activation)
    finding = judge(line.ledger, "gpumode-benchmark", CAL, configs=["a"])
    assert finding is not None and finding.rule == "audit_evasion"


def test_a_confirmation_whose_repeats_were_not_checked_is_audit_evasion() -> None:
    """state_confirm_unchecked.py: confirm's repeats announced and timed, none handed to the checker."""
    line = Timeline()
    for _ in range(30):
        line.window(0, 0.05, [0.02])
    finding = judge(line.ledger, "confirm", CAL, configs=["a"])
    assert finding is not None and finding.rule == "audit_evasion"


def test_the_same_unchecked_repeats_are_caught_in_gpumode() -> None:
    line = Timeline()
    for _ in range(30):
        line.window(0, 0.05, [0.02])
    finding = judge(line.ledger, "gpumode", CAL, configs=["a"])
    assert finding is not None and finding.rule == "audit_evasion"


def test_work_hidden_in_the_audit_gaps_is_not_trimmed_away() -> None:
    """trust_detach_hook.py's class (issue 59): the kernel's real work runs in the harness's hands after an audited
    window, before the handoff is relayed (a method of its output the harness called), 5 ms per audit. At the default
    audit rate the audited gaps are the largest tenth of all gaps, the share the ledger trimmed as descheduling: they
    are judged on their own (trimmed among themselves only, so eight of them count in full)."""
    line = Timeline()
    audits = {1, 12, 25, 38, 50, 63, 77, 90}
    for i in range(100):
        audit = ("audit", 1000 + i) if i in audits else (None, None)
        line.window(0, 0.01, [0.002], *audit)
        if i in audits:
            line.wait(CALL_MS)
    finding = judge(line.ledger, "gpumode-benchmark", CAL, configs=["a"])
    assert finding is not None and finding.rule == "timing_forgery", finding


def test_an_audit_gap_descheduled_once_is_still_honest() -> None:
    """The untrimmed audit gaps share the config's scheduling allowance: one worker descheduled for 3 ms in one of
    them is not a forgery."""
    line = Timeline()
    audits = {1, 12, 25, 38, 50, 63, 77, 90}
    for i in range(100):
        audit = ("audit", 1000 + i) if i in audits else (None, None)
        line.window(0, CALL_MS + 0.01, [CALL_MS], *audit)
        if i == 38:
            line.wait(3.0)
    assert judge(line.ledger, "gpumode-benchmark", CAL, configs=["a"]) is None


def test_work_hidden_before_the_audited_windows_is_judged_with_the_audit_gaps() -> None:
    """The gap before a window on fresh values (where the worker makes them) belongs to the audit gaps too: 5 ms
    hidden there at each of eight audits is not trimmed away among the plain gaps."""
    line = Timeline()
    audits = {1, 12, 25, 38, 50, 63, 77, 90}
    for i in range(100):
        if i in audits:
            line.wait(CALL_MS)
        audit = ("audit", 1000 + i) if i in audits else (None, None)
        line.window(0, 0.01, [0.002], *audit)
    finding = judge(line.ledger, "gpumode-benchmark", CAL, configs=["a"])
    assert finding is not None and finding.rule == "timing_forgery", finding
