"""The GPU's SM clock, power and temperature while each side of ``bench/fidelity.py`` ran.

Since 2026-11-27 ksearch's TriMul windows read 4-5 % faster than upstream's loop on the largest shapes while the same
loop in ksearch's own process reads alike (bench/RESULTS.md, "Timing fidelity"). One explanation to test: upstream's
loop keeps the GPU busy without a break and runs at lower clocks (power or heat), ksearch's audits leave gaps. Log the
GPU while the bench runs and split the log by process:

    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,nounits -lms 100 > smi.csv &
    OUT=. python bench/fidelity.py --rounds 3 examples/trimul_triton_fast.py; kill %1
    python bench/smi_by_run.py smi.csv fidelity.json

Prints, per run in order, its side, its length and the mean and 10th percentile of the SM clock (MHz) and the
mean power (W) and temperature (C) of the samples taken while it ran. Reads files only.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from datetime import datetime
from pathlib import Path


def read_smi(path: Path) -> list[tuple[float, float, float, float]]:
    """(Unix seconds, SM MHz, W, C) per line of ``nvidia-smi --format=csv,nounits`` (local time stamps)."""
    rows = []
    with path.open(encoding="utf-8") as handle:
        for record in csv.reader(handle):
            if len(record) < 4 or record[0].strip().startswith("timestamp"):
                continue
            try:
                stamp = datetime.strptime(record[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
                rows.append((stamp, float(record[1]), float(record[2]), float(record[3])))
            except ValueError:
                continue
    return rows


def by_run(samples: list[tuple[float, float, float, float]], runs: list[dict]) -> list[dict]:
    out = []
    for run in runs:
        inside = [s for s in samples if run["start"] <= s[0] <= run["end"]]
        row = {"side": run["side"], "seconds": round(run["end"] - run["start"], 1), "samples": len(inside)}
        if inside:
            clocks = sorted(s[1] for s in inside)
            row.update(
                sm_mhz=round(statistics.fmean(clocks)),
                sm_mhz_p10=round(clocks[len(clocks) // 10]),
                power_w=round(statistics.fmean(s[2] for s in inside)),
                temperature_c=round(statistics.fmean(s[3] for s in inside), 1),
            )
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("smi", type=Path)
    parser.add_argument("fidelity", type=Path, help="bench/fidelity.py's fidelity.json (with its runs)")
    args = parser.parse_args(argv)
    rows = by_run(read_smi(args.smi), json.loads(args.fidelity.read_text(encoding="utf-8")).get("runs", []))
    for row in rows:
        print("  ".join(f"{k}={v}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
