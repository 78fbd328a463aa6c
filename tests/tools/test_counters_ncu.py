"""Nsight Compute's raw CSV page read into typed counters; its log read into a typed status; the cost rules.

The fixtures in ``tests/tools/ncu/`` follow ncu's raw page (``ncu --import R --csv --page raw --print-units base``): a
header row, a units row, a row per profiled launch, numbers with thousands separators, one of ncu's own messages
before the header; ``raw_page_by_range.csv`` is the same report read with ``--print-nvtx-rename kernel``. The
launches: a TriMul-like call on two shapes, one kernel launched twice in the first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ksearch.contracts.counters import CounterStatus, KernelCounters
from ksearch.contracts.evaluation import Timing
from ksearch.tools.counters import budget, ncu_command
from ksearch.tools.counters.ncu_csv import (
    RawPageError,
    kernel_counters,
    parse_raw_page,
    range_of,
    shape_counters,
)

HERE = Path(__file__).parent / "ncu"
RAW = (HERE / "raw_page.csv").read_text()
BY_RANGE = (HERE / "raw_page_by_range.csv").read_text()


def _shapes():
    launches = parse_raw_page(RAW)
    shape_of = {launch.id: range_of(launch.name) for launch in parse_raw_page(BY_RANGE)}
    return shape_counters(launches, shape_of, ["b5", "b2"], {"b5": 402653184.0})


def test_every_launch_row_is_read_with_its_metrics_in_base_units() -> None:
    launches = parse_raw_page(RAW)
    assert [launch.id for launch in launches] == [0, 1, 2, 3, 4, 5]
    first = launches[0]
    assert first.name == "_ln_proj_rows"
    assert first.values["launch__registers_per_thread"] == 162
    assert first.values["dram__bytes_read.sum"] == 268435456  # "268,435,456"
    assert first.units["gpu__time_duration.sum"] == "nsecond"
    assert "Block Size" not in first.values  # identity columns are no metrics


def test_a_kernel_reads_as_a_kernel_engineer_would_ask() -> None:
    b5, _ = _shapes()
    ln = next(k for k in b5.kernels if k.name == "_ln_proj_rows")
    assert ln.launches == 2 and ln.time_us == pytest.approx(212.48 + 209.92)
    assert (ln.compute_pct, ln.memory_pct, ln.dram_pct, ln.l2_pct, ln.l2_hit_pct) == (33.0, 45.1, 40.3, 22.4, 61.2)
    assert (ln.achieved_occupancy_pct, ln.theoretical_occupancy_pct) == (18.2, 25.0)
    assert ln.occupancy_limiter == "registers"  # 1 block per SM, the fewest
    assert (ln.registers, ln.shared_bytes, ln.block_size, ln.grid_size, ln.waves) == (162, 49152, 256, 4096, 3.1)
    assert ln.tensor_pct == 12.3  # the busiest tensor pipe of its architecture's names
    assert [s.reason for s in ln.stalls] == ["long scoreboard", "barrier", "mio throttle"]  # 'selected' is no stall
    assert ln.stalls[0].per_issue == pytest.approx(8.14)  # the longest launch's figures
    assert ln.dram_bytes == pytest.approx(2 * (268435456 + 402653184))
    assert ln.bound == "latency"  # neither unit reaches 60 % of its peak


def test_shapes_come_from_the_nvtx_ranges_longest_kernel_first() -> None:
    b5, b2 = _shapes()
    assert (b5.config, b2.config) == ("b5", "b2")
    assert [k.name for k in b5.kernels] == ["_ln_proj_rows", "_contract_bmm", "_out_gate_ln"]
    assert b5.launches == 4 and b2.launches == 2
    mm = b5.kernels[1]
    assert mm.tensor_pct == 55.7 and mm.bound == "memory" and mm.occupancy_limiter == "shared memory"
    assert b5.kernels[2].bound == "memory" and b5.kernels[2].tensor_pct == 0.0
    assert b5.minimal_bytes == 402653184.0 and b5.traffic_ratio == pytest.approx(b5.dram_bytes / 402653184.0)
    assert b2.minimal_bytes is None and b2.traffic_ratio is None


def test_a_launch_outside_every_range_and_a_cap_on_kernels_per_shape() -> None:
    launches = parse_raw_page(RAW)
    shapes = shape_counters(launches, {0: 0, 1: 0, 3: 0}, ["b5"], limit=1)
    assert shapes[0].launches == 3 and shapes[0].other_kernels == 2 and len(shapes[0].kernels) == 1
    assert range_of("ksearch_counters_12") == 12 and range_of("_ln_proj_rows") is None


def test_a_missing_metric_is_unknown_never_zero() -> None:
    text = '"ID","Kernel Name","gpu__time_duration.sum"\n"","","usecond"\n"0","k","1.5"\n'
    (launch,) = parse_raw_page(text)
    k = kernel_counters("b0", [launch])
    assert k.time_us == 1.5 and k.compute_pct is None and k.registers is None and k.bound == "" and k.stalls == []


def test_text_that_is_not_the_raw_page_is_refused() -> None:
    with pytest.raises(RawPageError, match="Kernel Name"):
        parse_raw_page("==ERROR== something\nnot,a,report\n")


def test_kernel_bounds() -> None:
    assert KernelCounters(config="b", name="k", compute_pct=80, memory_pct=30).bound == "compute"
    assert KernelCounters(config="b", name="k", compute_pct=20, memory_pct=70).bound == "memory"
    assert KernelCounters(config="b", name="k", compute_pct=59, memory_pct=59).bound == "latency"


# ---- ncu's log: a typed status and a sentence, never silence ------------------------------------------------------


def test_no_counter_permission_is_said_plainly() -> None:
    log = (
        "==PROF== Connected to process 35989 (/usr/bin/python3.12)\n"
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters\n"
    )
    status, detail = ncu_command.diagnose(log, returncode=1, report_exists=False)
    assert status == CounterStatus.NO_PERMISSION and "NVreg_RestrictProfilingToAdminUsers=0" in detail


def test_nothing_profiled_and_ncus_own_errors_are_failures_with_the_reason() -> None:
    status, detail = ncu_command.diagnose("==WARNING== No kernels were profiled.\n", returncode=0, report_exists=False)
    assert status == CounterStatus.FAILED and "no kernel inside the marked calls" in detail
    status, detail = ncu_command.diagnose(
        "==ERROR== The application returned an error code (11).\n", returncode=11, report_exists=False
    )
    assert status == CounterStatus.FAILED and detail == "==ERROR== The application returned an error code (11)."
    status, detail = ncu_command.diagnose("", returncode=3, report_exists=False)
    assert status == CounterStatus.FAILED and "status 3" in detail
    assert ncu_command.diagnose("==PROF== Disconnected\n", returncode=0, report_exists=True) == (
        CounterStatus.COLLECTED,
        "",
    )


def test_ncu_is_found_by_variable_then_path_and_missing_is_none(tmp_path: Path) -> None:
    tool = tmp_path / "ncu"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert ncu_command.find_ncu({"KSEARCH_NCU": str(tool), "PATH": ""}) == str(tool)
    assert ncu_command.find_ncu({"PATH": str(tmp_path)}) == str(tool)
    assert ncu_command.find_ncu({"KSEARCH_NCU": str(tmp_path / "absent"), "PATH": str(tmp_path)}) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    found = ncu_command.find_ncu({"PATH": str(empty)})
    assert found is None or found in ncu_command.DEFAULT_LOCATIONS


def test_the_command_profiles_only_the_marked_calls_into_its_folder(tmp_path: Path) -> None:
    argv = ncu_command.profile_argv("ncu", tmp_path, 2, 32, ["python", "-m", "worker"])
    assert argv[-3:] == ["python", "-m", "worker"]
    text = " ".join(argv)
    assert "--nvtx-include ksearch_counters_0/ --nvtx-include ksearch_counters_1/" in text
    assert "--launch-count 32" in text and "--replay-mode kernel" in text and "--config-file off" in text
    assert f"--export {tmp_path / 'counters'}" in text and f"--log-file {tmp_path / 'ncu.log'}" in text
    assert all(f"--section {s}" in text for s in ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats"))
    assert ncu_command.import_argv("ncu", tmp_path / "r.ncu-rep", by_range=True)[-2:] == [
        "--print-nvtx-rename",
        "kernel",
    ]
    version = "NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.0.0 (build 36273991) (public-release)\n"
    assert ncu_command.version_of(version) == "ncu 2025.3.0.0" and ncu_command.version_of("") == ""


# ---- the cost bound ----------------------------------------------------------------------------------------------


def _timing(config: str, ms: float) -> Timing:
    return Timing(config=config, median_ms=ms, mean_ms=ms, stdev_ms=0.0, samples=10)


def test_the_longest_shapes_are_profiled() -> None:
    timings = [_timing("b0", 0.3), _timing("b5", 4.0), _timing("b2", 1.0), _timing("b6", 4.0)]
    assert budget.choose_shapes(timings, 2) == ["b5", "b6"]
    assert budget.choose_shapes(timings, 0) == [] and budget.choose_shapes([], 2) == []
    assert budget.launch_cap(2) == 2 * budget.LAUNCHES_PER_SHAPE
    assert budget.timeout_s(2) <= budget.TIMEOUT_S


def test_a_run_keeps_its_counters_under_their_share_of_gpu_time() -> None:
    assert budget.Spend(evaluations_s=100.0, counters_s=0.0).allows()  # the first collection always may
    assert budget.Spend(evaluations_s=100.0, counters_s=14.0).allows()
    assert not budget.Spend(evaluations_s=100.0, counters_s=15.0).allows()
    assert not budget.Spend(evaluations_s=0.0, counters_s=5.0).allows()
    assert "15%" in budget.Spend(100.0, 20.0).describe()
