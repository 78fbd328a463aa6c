"""How much of a timed score comes from the audits inside the loop? Read the ledgers an evaluation dumped
(``KSEARCH_LEDGER_DUMP=DIR``) and, per config, set the mean of every sample beside the mean without the audited
windows and the window right after each audit.

The timing loops re-randomise inputs and audit at random positions (``FreshPlan``), and each audit waits for the
checker's answer (milliseconds) with nothing running on the device. If the audited call, or the call after that
gap, runs slower than a call in upstream's uninterrupted loop, the mean that ``gpumode-benchmark`` scores rises with
the audit rate. Session 16 measured ksearch 13 % above GPU MODE's loop on TriMul's geomean on an H200, most on the
launch-bound shapes (bench/RESULTS.md): this tells whether the audits account for it.

    KSEARCH_LEDGER_DUMP=/tmp/ledgers ksearch eval trimul KERNEL --device cuda --timing-method gpumode-benchmark
    python bench/audit_share.py /tmp/ledgers [--json OUT.json]

Runs anywhere (it only reads JSON); the ledgers come from a GPU, or from the CPU under ``KSEARCH_CPU_TIMING=1``.
"""

from __future__ import annotations

import argparse
import json
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

    @property
    def inflation(self) -> float:
        return self.mean_ms / self.mean_without_ms if self.mean_without_ms > 0 else 1.0


def _mean(windows: list[dict]) -> float | None:
    samples = [x for w in windows for x in w["samples_ms"]]
    return statistics.fmean(samples) if samples else None


def shares(ledger: dict, name: str = "") -> list[ConfigShare]:
    """Per config of one dumped ledger (``verdicts._dump_ledger``'s JSON)."""
    by_config: dict[int, list[dict]] = {}
    for window in ledger["windows"]:
        if window.get("closed") is not None and window["samples_ms"] and not window.get("null"):  # null: no call
            by_config.setdefault(window["config"], []).append(window)
    out = []
    for config, windows in sorted(by_config.items()):
        audited = {i for i, w in enumerate(windows) if w["audits"]}
        after = {i + 1 for i in audited if i + 1 < len(windows)} - audited
        rest = [w for i, w in enumerate(windows) if i not in audited and i not in after]
        everything = _mean(windows)
        assert everything is not None
        out.append(ConfigShare(
            ledger=name, config=config, windows=len(windows), audited=len(audited), mean_ms=everything,
            mean_without_ms=_mean(rest) or everything,
            audited_mean_ms=_mean([windows[i] for i in sorted(audited)]),
            after_mean_ms=_mean([windows[i] for i in sorted(after)]),
        ))  # fmt: skip
    return out


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
        print(f"{r.ledger:<32}{r.config:>6}  {r.windows:>7}  {r.audited:>7}  {r.mean_ms:.4f}  {r.mean_without_ms:.4f}  "
              f"{_ms(r.audited_mean_ms):>8}  {_ms(r.after_mean_ms):>8}  {r.inflation:.3f}")  # fmt: skip
    print(f"geomean inflation: {statistics.geometric_mean([r.inflation for r in rows]):.3f}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
