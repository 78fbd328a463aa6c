"""bench/smi_by_run.py splits a log of the GPU's clocks by the processes bench/fidelity.py ran."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from tests.helpers.bench_scripts import load_bench


def test_each_run_gets_the_samples_taken_while_it_ran(tmp_path: Path, capsys) -> None:
    smi = load_bench("smi_by_run")
    base = datetime(2026, 11, 27, 12, 0, 0).timestamp()
    lines = ["timestamp, clocks.current.sm [MHz], power.draw [W], temperature.gpu"]
    for i in range(40):  # 4 s at 100 ms: upstream's run slower clocks, ksearch's faster
        stamp = datetime.fromtimestamp(base + i * 0.1).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        lines.append(f"{stamp}, {1700 if i < 20 else 1980}, {650 if i < 20 else 500}, 60")
    (tmp_path / "smi.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    runs = [
        {"side": "upstream", "start": base, "end": base + 1.95},
        {"side": "ksearch", "start": base + 2.0, "end": base + 3.95},
    ]
    (tmp_path / "fidelity.json").write_text(json.dumps({"runs": runs}), encoding="utf-8")
    rows = smi.by_run(smi.read_smi(tmp_path / "smi.csv"), runs)
    assert [(r["side"], r["samples"], r["sm_mhz"], r["power_w"]) for r in rows] == [
        ("upstream", 20, 1700, 650),
        ("ksearch", 20, 1980, 500),
    ]
    assert smi.main([str(tmp_path / "smi.csv"), str(tmp_path / "fidelity.json")]) == 0
    assert "side=ksearch" in capsys.readouterr().out
