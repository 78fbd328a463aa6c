"""bench/audit_share.py: the mean a ledger scores beside the mean without the audits' windows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.bench_scripts import load_bench


def _window(config: int, sample: float, audits: list[str] | None = None) -> dict:
    return {"config": config, "run": 0, "opened": 0.0, "closed": 1.0, "samples_ms": [sample], "audits": audits or []}


def test_the_audited_window_and_the_one_after_it_are_left_out_of_the_mean_without() -> None:
    bench = load_bench("audit_share")
    windows = [_window(0, 1.0), _window(0, 3.0, ["audit"]), _window(0, 5.0), _window(0, 1.0), _window(1, 2.0)]
    null = {**_window(0, 0.002), "null": True}  # the harness around no call: not a window of the kernel
    rows = bench.shares({"windows": [null] + windows + [{**_window(0, 9.0), "closed": None}]}, "l")
    first, second = rows
    assert (first.config, first.windows, first.audited) == (0, 4, 1)
    assert first.mean_ms == pytest.approx(2.5) and first.mean_without_ms == pytest.approx(1.0)
    assert first.audited_mean_ms == pytest.approx(3.0) and first.after_mean_ms == pytest.approx(5.0)
    assert first.inflation == pytest.approx(2.5)
    assert second.audited_mean_ms is None and second.inflation == pytest.approx(1.0)


def test_the_command_reads_a_dump_folder_and_says_when_it_is_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bench = load_bench("audit_share")
    assert bench.main([str(tmp_path)]) == 1 and "KSEARCH_LEDGER_DUMP" in capsys.readouterr().out
    (tmp_path / "ledger-1.json").write_text(json.dumps({"windows": [_window(0, 1.0, ["audit"]), _window(0, 1.0)]}))
    assert bench.main([str(tmp_path), "--json", str(tmp_path / "rows.json")]) == 0
    assert json.loads((tmp_path / "rows.json").read_text())[0]["audited"] == 1


def test_the_gap_after_each_fresh_audit_and_the_loop_span_are_measured() -> None:
    bench = load_bench("audit_share")

    def timed(opened: float, closed: float, *, audits: list[str] | None = None, fresh: bool = False) -> dict:
        return {**_window(0, 1.0, audits), "opened": opened, "closed": closed, "fresh": fresh}

    windows = [
        timed(0.0, 0.001),
        timed(0.002, 0.003, audits=["audit"], fresh=True),
        timed(0.033, 0.034),
        timed(0.035, 0.036, audits=["bench"]),
        timed(0.046, 0.047),
    ]
    (row,) = bench.shares({"windows": windows}, "l")
    assert row.fresh_audits == 1 and row.fresh_gap_ms == pytest.approx(30.0)
    assert row.audit_gaps_s == pytest.approx(0.040) and row.loop_s == pytest.approx(0.047)


def test_a_lower_rate_places_fewer_audits_never_under_the_minimum_and_misses_replays_more_often() -> None:
    bench = load_bench("audit_share")
    higher, lower = bench.expected_fresh_audits(0.125, trials=500), bench.expected_fresh_audits(0.04, trials=500)
    assert 12 < higher < 16 and 4 < lower < 8 and bench.expected_fresh_audits(0.0, trials=200) == pytest.approx(2.0)
    table = bench.rate_table([], 1, rates=(0.125, 0.04)).splitlines()
    assert len(table) == 3 and table[1].startswith("0.125") and table[2].startswith("0.04")
    escape = [float(line.split()[-2]) for line in table[1:]]
    assert escape[0] < escape[1]
