"""The fidelity bench's pure parts (no GPU): the ratio interval, upstream's case lines, and the POPCORN_FD plumbing
that drives a copy of GPU MODE's own eval.py (here a stand-in that speaks the same protocol)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers.bench_scripts import load_bench

fidelity = load_bench("fidelity")
upstream = load_bench("upstream_trimul")


def test_the_ratio_interval_holds_the_ratio_and_narrows_with_agreeing_processes() -> None:
    noisy = fidelity.ratio_interval([0.355, 0.313, 0.369, 0.317], [0.362, 0.344, 0.336, 0.354])
    tight = fidelity.ratio_interval([1.001, 1.002, 1.000, 1.001], [0.950, 0.951, 0.949, 0.950])
    assert noisy[0] < 0.97 < 1.0 < 1.03 < noisy[1]  # 10 % process-to-process noise cannot resolve 3 %
    assert 1.05 < tight[0] < 1.0537 < tight[1] < 1.06  # a clear 5 % difference is resolved
    assert all(v != v for v in fidelity.ratio_interval([1.0], [1.0, 1.1]))  # one process: no interval (NaN)


def test_the_same_process_report_flags_only_shapes_over_the_bar(capsys: pytest.CaptureFixture[str]) -> None:
    centre, low, high = fidelity.log_interval([1.01, 0.99, 1.00, 1.02])
    assert low < centre < high and abs(centre - 1.005) < 0.002
    entry: dict = {}
    rows = [[1.00, 1.06, 0.99], [1.01, 1.05, 1.00], [0.99, 1.07, 1.01]]  # shape b1 reads 6 % high in every process
    failures = fidelity.same_process_report("k.py", entry, rows)
    assert failures == ["k.py b1 (same process): ratio 1.060"]
    assert entry["same_process"]["ratios"][1] == pytest.approx(1.06, abs=1e-3)
    assert "b1      1.060" in capsys.readouterr().out


def test_case_lines_are_upstreams_format() -> None:
    line = upstream.case_line(upstream.BENCHMARKS[0])
    assert line == "seqlen: 256; bs: 2; dim: 128; hiddendim: 128; seed: 9371; nomask: True; distribution: normal"


FAKE_EVAL = textwrap.dedent(
    """
    import os, sys
    mode, cases = sys.argv[1], open(sys.argv[2]).read().splitlines()
    out = os.fdopen(int(os.environ["POPCORN_FD"]), "w")
    assert open("submission.py").read().startswith("# the submission")
    if mode not in ("test", "private"):
        sys.exit(2)
    for i, line in enumerate(cases):
        assert line.startswith("seqlen: ")
        if mode == "test":
            print(f"test.{i}.status: pass", file=out)
        else:
            stats = (("runs", 3), ("mean", 1e6 * (i + 1)), ("std", 1.0), ("err", 0.5), ("best", 1.0), ("worst", 2.0))
            for key, value in stats:
                print(f"benchmark.{i}.{key}: {value}", file=out)
    print("check: pass", file=out)
    out.close()
    """
)


@pytest.mark.parametrize("mode", ["test", "benchmark"])
def test_run_official_drives_eval_py_through_popcorn_fd(tmp_path: Path, mode: str) -> None:
    official = tmp_path / "trimul"
    official.mkdir()
    (official / "eval.py").write_text(FAKE_EVAL + '\n# modes: "test", "private", "public"\n', encoding="utf-8")
    submission = tmp_path / "kernel.py"
    submission.write_text("# the submission\n", encoding="utf-8")
    result = upstream.run_official(official, mode, submission)
    assert result["passed"], result
    if mode == "test":
        assert len(result["cases"]) == len(upstream.TESTS) and all(c["passed"] for c in result["cases"])
    else:
        assert result["official_mode"] == "private"  # newer eval.py copies call benchmark mode "private"
        assert [c["mean"] for c in result["cases"]] == [1e6 * (i + 1) for i in range(len(upstream.BENCHMARKS))]
