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
