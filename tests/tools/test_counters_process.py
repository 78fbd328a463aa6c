"""The counters collector's processes, on a machine without Nsight Compute: every way it cannot run is a typed
status with a sentence (no ncu, the CPU, no counter permission, nothing profiled, a hang killed at its limit), and
a collection that works reads ncu's report, never the candidate's output.

``ncu/fake_ncu.py`` stands in for the ncu executable only (it runs the real contained worker or probe it is given
and hands back the raw-page fixtures); the real ncu runs in ``test_counters_gpu.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.counters import CounterStatus
from ksearch.tools.counters import collect
from ksearch.tools.counters.collect import Rung, carried_ranges, collect_counters, ladder, requested_rungs
from ksearch.tools.counters.ncu_csv import Launch
from ksearch.tools.evaluator.parent.request import EvalRequest

FAKE = Path(__file__).parent / "ncu" / "fake_ncu.py"
SOFTMAX = "import torch\n\ndef kernel(x):\n    return torch.softmax(x, dim=-1)\n"


def _request(device: str = "cuda:0") -> EvalRequest:
    candidate = Candidate(task="softmax", language="triton", code=SOFTMAX, entry_point="kernel")
    return EvalRequest(candidate=candidate, task="softmax", device=device, timing=device != "cpu")


@pytest.fixture
def fake_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Install the stand-in as KSEARCH_NCU in a given mode; forget any earlier probe's choice."""
    monkeypatch.setattr(collect, "_chosen", {})

    def install(mode: str) -> Path:
        seen = tmp_path / f"argv-{mode}.txt"
        tool = tmp_path / f"ncu-{mode}"
        tool.write_text(f'#!/bin/sh\nFAKE_NCU_MODE={mode} FAKE_NCU_ARGV={seen} exec {sys.executable} {FAKE} "$@"\n')
        tool.chmod(0o755)
        monkeypatch.setenv("KSEARCH_NCU", str(tool))
        return seen

    return install


def _shapes() -> list[str]:
    from ksearch.tasks.registry import resolve_task

    return [c.name for c in resolve_task("softmax").benchmark_configs("cuda")][:2]


def test_the_cpu_has_no_counters() -> None:
    report = collect_counters(_request("cpu"), ["b0"])
    assert report.status == CounterStatus.NO_GPU and "interpreter" in report.detail


def test_without_ncu_the_report_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KSEARCH_NCU", str(tmp_path / "no-such-ncu"))
    report = collect_counters(_request(), _shapes())
    assert report.status == CounterStatus.NO_NCU and "KSEARCH_NCU" in report.detail


def test_no_counter_permission_is_found_by_the_probe_and_said_plainly(fake_ncu) -> None:
    fake_ncu("permission")
    report = collect_counters(_request(), _shapes())
    assert report.status == CounterStatus.NO_PERMISSION
    assert "NVreg_RestrictProfilingToAdminUsers=0" in report.detail


def test_a_probe_that_profiles_nothing_under_every_rung_fails_naming_each(fake_ncu) -> None:
    fake_ncu("nothing")
    report = collect_counters(_request(), _shapes())
    assert report.status == CounterStatus.FAILED
    assert "ncu could not profile a contained process here" in report.detail
    assert "all layers" in report.detail and "no network layers" in report.detail
    assert "the probe's stderr:" in report.detail  # the trusted probe's last words (here: no CUDA on this machine)


def test_a_collection_that_hangs_is_killed_at_its_limit(fake_ncu, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_ncu("hang")
    monkeypatch.setattr(collect, "_chosen", {"cuda": (Rung("off", (), True), "")})  # the probe is not what hangs
    report = collect_counters(_request(), _shapes(), timeout_s=2.0)
    assert report.status == CounterStatus.TIMEOUT and "killed after 2 s" in report.detail
    assert report.wall_s < 60


def test_a_collection_reads_ncus_report_by_shape(fake_ncu, tmp_path: Path) -> None:
    seen = fake_ncu("ok")
    shapes = _shapes()
    report = collect_counters(_request(), shapes, keep=tmp_path / "kept")
    assert report.status == CounterStatus.COLLECTED, report.detail
    assert [s.config for s in report.shapes] == shapes  # the fixture's two NVTX ranges, in the order asked
    assert report.shapes[0].kernels[0].name == "_ln_proj_rows" and report.tool == "ncu 2025.3.0.0"
    assert "userns" in report.layers.split(",") or report.layers == "none"  # the machine's layers, limits first
    assert report.launch_cap == 2 * 16 and report.wall_s > 0
    probe, worker = seen.read_text().splitlines()
    assert "ksearch.tools.counters.probe_kernel" in probe
    assert "--role counters" in worker and "--nvtx-include ksearch_counters_1/" in worker
    assert "ksearch.tools.containment.launcher" in worker  # the candidate runs contained, ncu outside
    kept = sorted(p.name for p in (tmp_path / "kept").iterdir())
    assert kept == ["counters.ncu-rep", "ncu.log", "raw_page.csv", "raw_page_by_range.csv"]


def test_the_ladder_goes_from_every_layer_down_never_below_userns_caps_and_landlock() -> None:
    machine = ("userns", "mountns", "netns", "ipcns", "caps", "landlock", "seccomp")
    rungs = ladder(machine)
    assert [r.layers for r in rungs] == [
        machine,
        ("userns", "mountns", "ipcns", "caps", "landlock"),
        ("userns", "ipcns", "caps", "landlock"),
    ]
    assert [r.network for r in rungs] == [False, True, True]
    assert ladder(()) == [Rung("all layers", (), False), Rung("no network layers", (), True)]


def test_the_user_may_choose_the_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert requested_rungs("cuda") is None
    monkeypatch.setenv("KSEARCH_COUNTERS_SANDBOX", "off")
    assert requested_rungs("cuda") == [Rung("off", (), True)]
    monkeypatch.setenv("KSEARCH_COUNTERS_SANDBOX", "userns, caps")
    assert requested_rungs("cuda") == [Rung("as asked", ("userns", "caps"), True)]


def test_a_launch_inside_the_candidates_own_nvtx_range_keeps_the_shape_of_the_one_before() -> None:
    renamed = [Launch(3, "ksearch_counters_1"), Launch(0, "ksearch_counters_0"), Launch(1, "candidate_range")]
    renamed += [Launch(2, "ksearch_counters_1"), Launch(4, "inner")]
    assert carried_ranges(renamed) == {0: 0, 1: 0, 2: 1, 3: 1, 4: 1}
    assert carried_ranges([Launch(0, "before any range")]) == {}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="containment is Linux's")
@pytest.mark.parametrize("network", [False, True])
def test_the_network_rung_opens_tcp_and_keeps_the_file_rules(network: bool, tmp_path: Path) -> None:
    """Landlock with ``network``: a TCP connection reaches a listening port (ncu's library needs one); without it, it
    does not; writing outside the process's folder is refused either way."""
    import os
    import socket
    import subprocess

    from ksearch.tools.containment import landlock, policy

    if "landlock" not in policy.probe(gpu=False)[0] or landlock.abi_version() < 4:
        pytest.skip("needs Landlock with its TCP rules (ABI 4+)")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    outside = tmp_path / "outside.txt"
    work = tmp_path / "work"
    work.mkdir()
    program = (
        "import socket, sys\n"
        f"s = socket.socket()\ntry:\n    s.connect(('127.0.0.1', {server.getsockname()[1]})); print('connected')\n"
        "except OSError as e:\n    print('refused', e.errno)\n"
        f"try:\n    open({str(outside)!r}, 'w').write('x'); print('wrote')\nexcept OSError:\n    print('no write')\n"
    )
    prefix = policy.launcher_prefix("cpu", [work], layers=("landlock",), network=network)
    env = {**os.environ, "KSEARCH_PARENT_PID": ""}
    out = subprocess.run([*prefix, sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60)
    server.close()
    assert ("connected" in out.stdout) == network, out.stdout + out.stderr
    assert "no write" in out.stdout and not outside.exists()
