"""The counters collector's processes, on a machine without Nsight Compute: every way it cannot run is a typed
status with a sentence (no ncu, the CPU, no counter permission, nothing profiled, a hang killed at its limit), ncu
runs inside the candidate's containment with what it needs opened there, and a collection that works reads ncu's
report (through a contained ``ncu --import``), never the candidate's output.

``ncu/fake_ncu.py`` stands in for the ncu executable only, installed in a folder of its own as Nsight Compute is
(it runs the real contained worker or probe it is given, and hands back the raw-page fixtures); the real ncu runs in
``test_counters_gpu.py``."""

from __future__ import annotations

import ast
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.counters import CounterStatus
from ksearch.contracts.evaluation import Evaluation, Timing
from ksearch.flows.evaluate import with_counters
from ksearch.tools.containment import policy
from ksearch.tools.containment.policy import Openings
from ksearch.tools.counters import collect, ncu_command, probe
from ksearch.tools.counters.collect import carried_ranges, collect_counters
from ksearch.tools.counters.ncu_csv import Launch
from ksearch.tools.counters.rungs import Rung, openings_for
from ksearch.tools.evaluator.parent.request import EvalRequest

HERE = Path(__file__).parent / "ncu"
SOFTMAX = "import torch\n\ndef kernel(x):\n    return torch.softmax(x, dim=-1)\n"
SECRET = "the user's private key"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="containment is Linux's")


def _request(device: str = "cuda:0") -> EvalRequest:
    candidate = Candidate(task="softmax", language="triton", code=SOFTMAX, entry_point="kernel")
    return EvalRequest(candidate=candidate, task="softmax", device=device, timing=device != "cpu")


@pytest.fixture
def fake_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Install the stand-in as KSEARCH_NCU in a given mode, in a folder of its own (its installation, which the
    sandbox's allow-list does not hold); forget any earlier probe's choice. Its record of each run goes to a folder
    the sandbox may write (``KSEARCH_PROFILE``'s)."""
    monkeypatch.setattr(probe, "_chosen", {})
    record = tmp_path / "record"
    record.mkdir()
    monkeypatch.setenv("KSEARCH_PROFILE", str(record))

    def install(mode: str) -> Path:
        home = tmp_path / f"nsight-compute-{mode}"
        home.mkdir()
        for name in ("fake_ncu.py", "raw_page.csv", "raw_page_by_range.csv"):
            shutil.copy(HERE / name, home / name)
        seen = record / f"runs-{mode}.txt"
        tool = home / "ncu"
        variables = f"FAKE_NCU_MODE={mode} FAKE_NCU_ARGV={seen} FAKE_NCU_SECRET={_secret(tmp_path)}"
        script = f'{variables} exec {sys.executable} {home}/fake_ncu.py "$@"'
        tool.write_text(f"#!/bin/sh\n{script}\n")
        tool.chmod(0o755)
        monkeypatch.setenv("KSEARCH_NCU", str(tool))
        return seen

    return install


def _secret(tmp_path: Path) -> Path:
    """A file of the user's outside the sandbox (a key, say) that a candidate would like read back to it."""
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir(exist_ok=True)
    secret.write_text(SECRET)
    return secret


def _without_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """The installed stand-in's rung chosen already (no containment), as a probe earlier in the process would."""
    ncu = collect.resolved(os.environ["KSEARCH_NCU"])
    monkeypatch.setattr(probe, "_chosen", {("cuda", ncu): (Rung("off", (), openings_for(())), "")})


def _runs(seen: Path) -> dict[str, str]:
    """Each run of the stand-in: its argv, and what it saw of its containment."""
    lines = seen.read_text().splitlines()
    return dict(zip(lines[::2], lines[1::2], strict=True))


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


@pytest.mark.slow
def test_a_probe_that_profiles_nothing_under_every_rung_fails_naming_each(fake_ncu) -> None:
    fake_ncu("nothing")
    report = collect_counters(_request(), _shapes())
    assert report.status == CounterStatus.FAILED
    assert report.detail.startswith("ncu could not profile a contained process here: all layers (")
    assert "; without seccomp (" in report.detail or "seccomp" not in policy.child_layers("cuda:0")
    assert "==WARNING== No kernels were profiled." in report.detail  # ncu's own words, for each rung
    # and the trusted probe's last words (here: no CUDA on this machine), one line each, never its traceback
    after = report.detail.split("No kernels were profiled.", 1)[1]
    assert "Error" in after and "Traceback" not in report.detail


def test_a_collection_that_hangs_is_killed_at_its_limit(fake_ncu, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_ncu("hang")
    _without_probe(monkeypatch)  # not the probe's hang
    report = collect_counters(_request(), _shapes(), timeout_s=2.0)
    assert report.status == CounterStatus.TIMEOUT and "killed after 2 s" in report.detail
    assert report.wall_s < 60


@linux_only
def test_a_collection_runs_ncu_inside_every_layer_and_reads_its_report_by_shape(fake_ncu, tmp_path: Path) -> None:
    """ncu runs inside the candidate's layers, every one of this machine's: it reads its installation (outside the
    allow-list), reaches its own listeners (the sandbox's loopback and sockets are opened for it) and writes its
    report there; the report is read back by shape, by ncu contained again."""
    seen = fake_ncu("ok")
    shapes = _shapes()
    report = collect_counters(_request(), shapes, keep=tmp_path / "kept")
    assert report.status == CounterStatus.COLLECTED, report.detail
    assert [s.config for s in report.shapes] == shapes  # the fixture's two NVTX ranges, in the order asked
    assert report.shapes[0].kernels[0].name == "_ln_proj_rows" and report.tool == "ncu 2025.3.0.0"
    machine = policy.child_layers("cuda:0")
    assert report.layers.split(" (")[0] == ",".join(machine)  # the strongest rung: every layer of this machine
    assert report.launch_cap == 2 * 16 and report.wall_s > 0
    assert set(report.stages) >= {"ncu", "import"} and report.stages["ncu"] > 0
    runs = _runs(seen)
    probe_run = next(argv for argv in runs if "ksearch.tools.counters.probe_kernel" in argv)
    worker_run = next(argv for argv in runs if "--role counters" in argv)
    imports = [argv for argv in runs if "--import" in argv]
    assert "--nvtx-include ksearch_counters_1/" in worker_run and "--config-file off" in worker_run
    assert "ksearch.tools.containment.launcher" not in worker_run  # the launcher ran before ncu, not under it
    # what the launcher execs: ncu's options, then the worker it starts (inside the same layers)
    assert worker_run.startswith("--target-processes all --replay-mode kernel --nvtx ")
    worker = f"{sys.executable} -P -m {collect.WORKER_MODULE} --device cuda:0 --role counters"
    assert worker_run.endswith(f"/{ncu_command.LOG_NAME} {worker}")
    assert len(imports) == 2  # both pages, each read by a contained ncu
    for run in (probe_run, worker_run, *imports):
        if "userns" in machine:
            assert f"uid_map={os.getuid()} {os.getuid()} 1" in runs[run], runs[run]  # its own user namespace
        if "caps" in machine:
            assert "capeff=0000000000000000" in runs[run], runs[run]
    if "seccomp" in machine:
        assert "seccomp=2" in runs[worker_run]
    kept = sorted(p.name for p in (tmp_path / "kept").iterdir())
    assert kept == ["counters.ncu-rep", "ncu.log", "raw_page.csv", "raw_page_by_range.csv"]


@linux_only
def test_without_ncus_openings_the_probe_says_why_in_a_line(fake_ncu) -> None:
    """Under an evaluation's own layers (nothing opened for ncu) the stand-in cannot reach its listeners: the probe
    names the rung, the status and ncu's first error, in a line."""
    fake_ncu("ok")
    machine = policy.child_layers("cuda:0")
    if not {"netns", "seccomp"} <= set(machine):
        pytest.skip("needs the network namespace and seccomp")
    ncu = os.environ["KSEARCH_NCU"]
    closed = Openings(readable=ncu_command.installation(ncu), tool=True)  # its files, but no socket opened
    rung, why = probe.probe_rungs("cuda:0", ncu, [Rung("as an evaluation's", machine, closed)])
    assert rung is None
    assert why.startswith("ncu could not profile a contained process here: as an evaluation's (")
    assert "failed: ==ERROR== Failed to connect to the profiled process" in why and len(why) < 600


def test_a_launch_inside_the_candidates_own_nvtx_range_keeps_the_shape_of_the_one_before() -> None:
    renamed = [Launch(3, "ksearch_counters_1"), Launch(0, "ksearch_counters_0"), Launch(1, "candidate_range")]
    renamed += [Launch(2, "ksearch_counters_1"), Launch(4, "inner")]
    assert carried_ranges(renamed) == {0: 0, 1: 0, 2: 1, 3: 1, 4: 1}
    assert carried_ranges([Launch(0, "before any range")]) == {}


# ---- counters are advisory: a failing ncu, or a report the candidate changed, never reaches a verdict or a score ----


def _timed(shapes: list[str]) -> Evaluation:
    """A passed, timed evaluation of the softmax candidate (its verdict and score decided before any counter)."""
    timings = [
        Timing(config=name, median_ms=ms, mean_ms=ms, stdev_ms=0.01, samples=30)
        for name, ms in zip(shapes, [2.0, 1.0], strict=True)
    ]
    return Evaluation(verdict="passed", device="cuda:0", timed=True, timings=timings, score=0.7, latency_ms=1.41)


ADVISORY_CASES = {
    "permission": (CounterStatus.NO_PERMISSION, "ERR_NVGPUCTRPERM"),
    "forged": (CounterStatus.COLLECTED, ""),
    "garbage": (CounterStatus.FAILED, "ncu's report could not be read"),
    "linked": (CounterStatus.FAILED, ""),  # a link is no report: nothing is read through it
}
"""How each mode of the stand-in ends: ncu refused the counters; a report the candidate changed (it shares ncu's
folder) into figures the kernel never had, into no report at all, into a link to a file outside the sandbox."""


@linux_only
@pytest.mark.parametrize("mode", list(ADVISORY_CASES))
def test_counters_never_change_the_evaluation_they_describe(fake_ncu, mode: str) -> None:
    """Whatever ncu or the candidate does to the counters, the evaluation keeps its verdict, score and timings; a
    forged report misleads only the diagnostic (its figures show as counters, which the model is told they are), and
    a link is never followed."""
    fake_ncu(mode)
    evaluation = _timed(_shapes())
    described = with_counters(evaluation, _request(), 2)
    assert described.model_dump(exclude={"counters"}) == evaluation.model_dump(exclude={"counters"})
    report = described.counters
    status, said = ADVISORY_CASES[mode]
    assert report is not None and report.status == status and said in report.detail, report
    assert SECRET not in report.model_dump_json()
    if mode == "forged":
        assert report.shapes[0].kernels[0].name == "forged_by_the_candidate"


@linux_only
def test_each_ncu_gets_a_rung_that_opens_its_own_installation(fake_ncu) -> None:
    """The probe's choice is kept per device kind and ncu: another ncu (``KSEARCH_NCU`` changed in a process) is
    probed anew, since a rung lets the sandbox read its ncu's installation only."""
    chosen = []
    for mode in ("ok", "forged"):
        fake_ncu(mode)
        ncu = collect.resolved(os.environ["KSEARCH_NCU"])
        rung, why = probe.choose_rung("cuda:0", ncu)
        assert rung is not None, why
        chosen.append((ncu, rung))
    for ncu, rung in chosen:
        assert os.path.dirname(ncu) in rung.openings.readable


def test_a_fault_of_the_collector_itself_is_a_failed_report_never_an_exception(
    fake_ncu, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No scratch folder (a full or missing temporary folder): the collection fails with the reason, it does not
    raise into the evaluation or the run."""
    fake_ncu("ok")
    _without_probe(monkeypatch)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-folder"))
    report = collect_counters(_request(), _shapes())
    assert report.status == CounterStatus.FAILED
    assert report.detail.startswith("the counters collector failed: FileNotFoundError")


DECISIONS = (
    "ksearch/tools/evaluator/parent",
    "ksearch/tools/evaluator/checker",
    "ksearch/tools/timing",
    "ksearch/agent/promotion.py",
    "ksearch/agent/selection.py",
)
"""What decides a verdict, a score or a promotion (the evaluator's parent and checker, timing, promotion, the
frontier's order)."""


def test_what_decides_a_verdict_a_score_or_a_promotion_never_reads_counters() -> None:
    """The counters (ncu's report, which the candidate may have changed) reach the model and people only: no module
    that decides imports them or reads an evaluation's ``counters``."""
    root = Path(__file__).parents[2]
    paths = [root / entry for entry in DECISIONS]
    files = [file for path in paths for file in (sorted(path.rglob("*.py")) if path.is_dir() else [path])]
    assert len(files) > 10
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any("counters" in name for name in names), f"{path} imports {names}"
            if isinstance(node, ast.Attribute):
                assert node.attr != "counters", f"{path}:{node.lineno} reads .counters"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert "ncu-rep" not in node.value, f"{path}:{node.lineno} names ncu's report"
