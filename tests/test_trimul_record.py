"""examples/trimul-record (issue 33): its hand-written replies replay on the CPU, every recorded round, each kernel
passing the interpreter's configs; the same kernels the GPU evaluated, by content hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ksearch.agent.config import RunConfig
from ksearch.flows import run as runner

pytestmark = pytest.mark.slow

RECORD = Path(__file__).resolve().parents[1] / "examples" / "trimul-record"


def test_the_recorded_trimul_search_replays_every_round_on_the_cpu(tmp_path):
    lines = [json.loads(line) for line in (RECORD / "replies.jsonl").read_text().splitlines() if line.startswith("{")]
    assert lines[0]["note"].startswith("HAND-WRITTEN")
    kernels = [entry["call_key"] for entry in lines if entry["call_key"].startswith("write:")]
    config = RunConfig(
        run_id="replayed",
        task="trimul",
        model=f"replay:{RECORD / 'replies.jsonl'}",
        device="cpu",
        max_rounds=len(kernels),
        max_attempts_per_cycle=2,
        stagnation_window=2,
        parallel_cycles=2,
        explore_every=0,  # the record was driven before exploration slots (issue 57): replay its selection
    )
    outcome = runner.start_run(config, workspace=tmp_path / "ws")
    assert outcome.status == "finished" and outcome.rounds_used == len(kernels) >= 10
    store = runner.open_store(tmp_path / "ws")
    try:
        attempts = store.list_attempts("replayed")
        assert [a["verdict"] for a in attempts if a["round_index"] > 0] == ["passed"] * len(kernels)
    finally:
        store.close()
