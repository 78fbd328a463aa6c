"""How much of a timed score comes from the audits inside the loop? Read the ledgers an evaluation dumped
(``KSEARCH_LEDGER_DUMP=DIR``) and, per config, set the mean of every sample beside the mean without the audited
windows and the window right after each audit.

The timing loops re-randomise inputs and audit at random positions (``FreshPlan``), and each audit waits for the
checker's answer (milliseconds) with nothing running on the device. If the audited call, or the call after that
gap, runs slower than a call in upstream's uninterrupted loop, the mean that ``gpumode-benchmark`` scores rises with
the audit rate. On 2026-11-27 ksearch read 8-13 % above GPU MODE's loop on TriMul's geomean on an H200, most on the
launch-bound shapes (bench/RESULTS.md, "Timing fidelity"): this tells whether the audits account for it.

    KSEARCH_LEDGER_DUMP=/tmp/ledgers ksearch eval trimul KERNEL --device cuda --timing-method gpumode-benchmark
    python bench/audit_share.py /tmp/ledgers [--json OUT.json]

Runs anywhere (it only reads JSON); the ledgers come from a GPU, or from the CPU under ``KSEARCH_CPU_TIMING=1``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class ConfigShare:
    """One config of one ledger: the scored mean, and the mean without the audits' windows."""

    ledger: str
    config: int
    windows: int
    audited: int
    """Windows followed by an audit on re-randomised inputs (``fresh``) or any audit."""
    mean_ms: float
    """Every sample: what ``gpumode-benchmark`` scores."""
    mean_without_ms: float
    """Without the audited windows and the window right after each."""
    audited_mean_ms: float | None
    after_mean_ms: float | None
    """The windows right after an audited one (the call after the checker's gap)."""
    fresh_audits: int = 0
    """Windows whose last call ran on re-randomised activations (each needs a new reference in the checker)."""
    fresh_gap_ms: float | None = None
    """Median wall time from such a window's close to the next window's open: the audit's cost to the loop."""
    audit_gaps_s: float = 0.0
    """Sum of the gaps after every audited window."""
    loop_s: float = 0.0
    """The config's loop: first window opened to last closed (null windows included)."""

    @property
    def inflation(self) -> float:
        return self.mean_ms / self.mean_without_ms if self.mean_without_ms > 0 else 1.0


def _mean(windows: list[dict]) -> float | None:
    samples = [x for w in windows for x in w["samples_ms"]]
    return statistics.fmean(samples) if samples else None


def _gaps(windows: list[dict]) -> tuple[list[float], float, float]:
    """Over one config's closed windows in order (null ones included): the gaps after fresh audits (s), the sum of
    the gaps after any audit (s), and the loop's span (s)."""
    fresh: list[float] = []
    audited = 0.0
    for this, following in zip(windows, windows[1:]):
        gap = following["opened"] - this["closed"]
        if this.get("fresh"):
            fresh.append(gap)
        if this["audits"]:
            audited += gap
    span = windows[-1]["closed"] - windows[0]["opened"] if windows else 0.0
    return fresh, audited, span


def shares(ledger: dict, name: str = "") -> list[ConfigShare]:
    """Per config of one dumped ledger (``verdicts._dump_ledger``'s JSON)."""
    by_config: dict[int, list[dict]] = {}
    every: dict[int, list[dict]] = {}
    for window in ledger["windows"]:
        if window.get("closed") is not None:
            every.setdefault(window["config"], []).append(window)
        if window.get("closed") is not None and window["samples_ms"] and not window.get("null"):  # null: no call
            by_config.setdefault(window["config"], []).append(window)
    out = []
    for config, windows in sorted(by_config.items()):
        audited = {i for i, w in enumerate(windows) if w["audits"]}
        after = {i + 1 for i in audited if i + 1 < len(windows)} - audited
        rest = [w for i, w in enumerate(windows) if i not in audited and i not in after]
        everything = _mean(windows)
        assert everything is not None
        fresh_gaps, audit_gaps, span = _gaps(every.get(config, []))
        out.append(
            ConfigShare(
                ledger=name,
                config=config,
                windows=len(windows),
                audited=len(audited),
                mean_ms=everything,
                mean_without_ms=_mean(rest) or everything,
                audited_mean_ms=_mean([windows[i] for i in sorted(audited)]),
                after_mean_ms=_mean([windows[i] for i in sorted(after)]),
                fresh_audits=len(fresh_gaps),
                fresh_gap_ms=statistics.median(fresh_gaps) * 1e3 if fresh_gaps else None,
                audit_gaps_s=audit_gaps,
                loop_s=span,
            )
        )
    return out


def _relays_in(relays: list[list[float]], start: float, end: float) -> list[tuple[float, float]]:
    return sorted((a, b) for a, b in relays if start <= a <= end)


def anatomy(ledger: dict) -> dict[int, dict[str, float]]:
    """Per config, the median of each phase (ms) of the wall time a re-randomised audit adds, read from the parent's
    stamps: before the audited window, its lead (the last window's close to the first request), the seed request's
    round trip, the worker's making of the values (to the next request), the wait for the checker's preparation (the
    settle), its tail (to the window's open); after it, the worker's checks and staging (to the handoff), the
    checker's judgement (the handoff's round trip) and the tail to the next window. ``plain``: the median gap between
    two windows with no audit or request between them, the loop's floor."""
    every: dict[int, list[dict]] = {}
    for window in ledger["windows"]:
        if window.get("closed") is not None:
            every.setdefault(window["config"], []).append(window)
    relays = ledger.get("relays", [])
    out: dict[int, dict[str, float]] = {}
    for config, windows in sorted(every.items()):
        phases: dict[str, list[float]] = {}
        plain: list[float] = []
        for before, this, after in zip(windows, windows[1:], windows[2:]):
            pre = _relays_in(relays, before["closed"], this["opened"])
            post = _relays_in(relays, this["closed"], after["opened"])
            if not this.get("fresh"):
                if not pre and not before["audits"]:
                    plain.append(this["opened"] - before["closed"])
                continue
            if len(pre) != 2 or len(post) != 1:
                continue  # not the prepared audit's shape (seed request, settle; handoff)
            (s1, a1), (s2, a2) = pre
            ((s3, a3),) = post
            for name, value in (
                ("lead", s1 - before["closed"]),
                ("seed", a1 - s1),
                ("make", s2 - a1),
                ("settle", a2 - s2),
                ("tail", this["opened"] - a2),
                ("checks", s3 - this["closed"]),
                ("judge", a3 - s3),
                ("next", after["opened"] - a3),
            ):
                phases.setdefault(name, []).append(value * 1e3)
        if phases:
            row = {name: statistics.median(values) for name, values in phases.items()}
            row["audits"] = float(len(phases["lead"]))
            row["plain"] = statistics.median(plain) * 1e3 if plain else float("nan")
            out[config] = row
    return out


def fresh_audit_counts(rate: float, repeats: int = 100, trials: int = 4000, seed: int = 0) -> list[int]:
    """How many re-randomised audits ``FreshPlan`` places in each of ``trials`` simulated loops of ``repeats``
    (a seeded generator; the loop waits for the plan's minimum, as GPU MODE's benchmark loop does)."""
    from ksearch.tools.timing.primitives import FreshPlan

    rng = random.Random(seed)
    counts = []
    for _ in range(trials):
        plan = FreshPlan(rate=rate, rng=rng)
        position = 0
        while position < repeats or not plan.satisfied():
            if plan.wants(position):
                plan.done += 1
            position += 1
        counts.append(plan.done)
    return counts


def expected_fresh_audits(rate: float, repeats: int = 100, trials: int = 4000) -> float:
    """Mean number of re-randomised audits ``FreshPlan`` places in a loop of ``repeats``."""
    return statistics.fmean(fresh_audit_counts(rate, repeats, trials, seed=0))


def rate_table(
    rows: list[ConfigShare], evaluations: int, rates: tuple[float, ...] = (0.125, 0.08, 0.0625, 0.04)
) -> str:
    """What other re-randomisation rates would cost and buy, from these ledgers' gaps: per rate, the audits a loop
    of 100 repeats expects, the audit gaps per evaluation (each config's median fresh gap times that count), and the
    chance that two replaying kernels go unseen in one loop: one computing honestly on its first 10 calls only
    (no fresh audit among the other 90), one computing honestly on a random half of its calls (every fresh audit
    lands on an honest call). The leaderboard-mode confirmation of every new best checks every repeat regardless."""
    lines = ["rate    audits/loop  audit gaps s/eval  escape: honest first 10  escape: honest half"]
    for rate in rates:
        count = expected_fresh_audits(rate)
        gaps = sum((r.fresh_gap_ms or 0.0) / 1e3 * count for r in rows) / max(1, evaluations)
        late = (1 - rate) ** 90
        half = _mean_power(rate, 0.5)
        lines.append(f"{rate:<6}  {count:>11.1f}  {gaps:>17.2f}  {late:>23.2e}  {half:>19.2e}")
    return "\n".join(lines)


def _mean_power(rate: float, honest: float, trials: int = 4000) -> float:
    """E[honest ** k] over the number k of fresh audits FreshPlan places in a loop of 100 at ``rate``."""
    return statistics.fmean(honest**k for k in fresh_audit_counts(rate, 100, trials, seed=1))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the KSEARCH_LEDGER_DUMP folder")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    files = sorted(args.folder.glob("ledger-*.json"))
    if not files:
        print(f"no ledger-*.json in {args.folder}: run the evaluation with KSEARCH_LEDGER_DUMP={args.folder}")
        return 1
    rows = [row for path in files for row in shares(json.loads(path.read_text(encoding="utf-8")), path.name)]
    print("ledger                          config  windows  audited  mean ms   without   audited   after     inflation")
    for r in rows:
        print(
            f"{r.ledger:<32}{r.config:>6}  {r.windows:>7}  {r.audited:>7}  {r.mean_ms:.4f}  {r.mean_without_ms:.4f}  "
            f"{_ms(r.audited_mean_ms):>8}  {_ms(r.after_mean_ms):>8}  {r.inflation:.3f}"
        )
    print(f"geomean inflation: {statistics.geometric_mean([r.inflation for r in rows]):.3f}")
    print()
    print("ledger                          config  fresh  gap ms   audit gaps s  loop s")
    for r in rows:
        print(
            f"{r.ledger:<32}{r.config:>6}  {r.fresh_audits:>5}  {_ms(r.fresh_gap_ms):>7}  {r.audit_gaps_s:>12.3f}  "
            f"{r.loop_s:.3f}"
        )
    per_ledger = len(files)
    print(
        f"per evaluation: audit gaps {sum(r.audit_gaps_s for r in rows) / per_ledger:.2f} s of "
        f"{sum(r.loop_s for r in rows) / per_ledger:.2f} s of timing loops"
    )
    print()
    print("what one re-randomised audit adds, per phase (median ms; the parent's stamps; see anatomy):")
    names = ("lead", "seed", "make", "settle", "tail", "checks", "judge", "next", "plain")
    print("ledger                          config  audits  " + "  ".join(f"{n:>6}" for n in names))
    for path in files:
        for config, row in anatomy(json.loads(path.read_text(encoding="utf-8"))).items():
            print(
                f"{path.name:<32}{config:>6}  {int(row['audits']):>6}  " + "  ".join(f"{row[n]:>6.2f}" for n in names)
            )
    print()
    print(rate_table(rows, per_ledger))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
