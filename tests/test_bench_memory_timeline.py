"""bench/memory_timeline.py reads what a GPU process held at its allocation peak from an allocator history."""

from __future__ import annotations

import pickle
from pathlib import Path

from tests.helpers.bench_scripts import load_bench

GIB = 1 << 30


def _frames(*places: tuple[str, int, str]) -> list[dict]:
    return [{"filename": f, "line": line, "name": name} for f, line, name in places]


TORCH = ("/venv/lib/python3.12/site-packages/torch/cuda/memory.py", 10, "alloc")
DRAW = ("/repo/ksearch/tasks/kernelbench/__init__.py", 214, "make_inputs")
REFERENCE = ("/repo/ksearch/tools/evaluator/checker/references.py", 165, "compute")


def _history() -> dict:
    events = [
        {"action": "segment_alloc", "addr": 0, "size": 12 * GIB},
        {"action": "alloc", "addr": 1, "size": 6 * GIB, "frames": _frames(TORCH, DRAW)},
        {"action": "alloc", "addr": 2, "size": 6 * GIB, "frames": _frames(TORCH, REFERENCE)},
        {"action": "free_requested", "addr": 1, "size": 6 * GIB},
        {"action": "free_completed", "addr": 1, "size": 6 * GIB},
        {"action": "free_completed", "addr": 99, "size": 1 * GIB},  # allocated before the history began
        {"action": "segment_alloc", "addr": 3, "size": 2 * GIB},
        {"action": "alloc", "addr": 4, "size": 1 * GIB, "frames": _frames(TORCH, DRAW)},
        {"action": "oom", "size": 40 * GIB},
    ]
    return {"segments": [], "device_traces": [events]}


def test_the_peak_names_what_was_alive_and_where_it_was_allocated() -> None:
    timeline = load_bench("memory_timeline")
    found = timeline.peaks(_history()["device_traces"][0])
    assert found.allocated == 12 * GIB and found.reserved == 14 * GIB and found.out_of_memory == 1
    assert found.live_at_peak == {
        "ksearch/tasks/kernelbench/__init__.py:214 make_inputs": (6 * GIB, 1),
        "ksearch/tools/evaluator/checker/references.py:165 compute": (6 * GIB, 1),
    }


def test_the_script_prints_each_file_s_peaks(tmp_path: Path, capsys) -> None:
    timeline = load_bench("memory_timeline")
    path = tmp_path / "checker-1-ab-1.memory.pickle"
    path.write_bytes(pickle.dumps(_history()))
    assert timeline.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "allocated peak 12.00 GiB, reserved peak 14.00 GiB, 1 out of memory" in out
    assert "6.00 GiB     1 blocks  ksearch/tasks/kernelbench/__init__.py:214 make_inputs" in out
