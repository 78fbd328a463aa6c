"""A timing forgery verdict is not given on a GPU someone else keeps busy (``gpu_sharing``): that evaluation is the
harness's failure. On an H200 shared by four evaluations, ten honest files were rejected as ``timing_forgery``."""

from __future__ import annotations

import importlib
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Verdict
from ksearch.tools.evaluator import EvalRequest, HarnessError, evaluate
from ksearch.tools.evaluator.parent.gpu_sharing import (
    BUSY_PERCENT,
    ComputeApp,
    judge,
    parse_apps,
    parse_utilisation,
    process_tree,
    shared_gpu,
)
from ksearch.tools.evaluator.shared.sandbox import BARE_ENV, system_binary

evaluate_module = importlib.import_module("ksearch.tools.evaluator.parent.evaluate")
gpu_sharing = importlib.import_module("ksearch.tools.evaluator.parent.gpu_sharing")
FORGERS = Path(__file__).resolve().parent / "forgers"
UUID = "GPU-8a3f2c1e-0000-4000-8000-000000000001"


def test_parse_the_rows_nvidia_smi_prints() -> None:
    apps = parse_apps(
        f"{UUID}, 4242, /usr/bin/python3, 20480\n{UUID}, 77, my,odd,name, [N/A]\nNo running processes found\n"
    )
    assert apps == [ComputeApp(UUID, 4242, "/usr/bin/python3", 20480), ComputeApp(UUID, 77, "my,odd,name", None)]
    assert parse_utilisation(f"{UUID}, 87\nGPU-other, 0\nGPU-bad, [N/A]\n") == {UUID: 87, "GPU-other": 0}


def test_judge_names_the_busy_gpu_of_the_anchor_and_the_processes_not_ours() -> None:
    apps = [
        ComputeApp(UUID, 10, "checker", 900),
        ComputeApp(UUID, 11, "worker", 900),
        ComputeApp(UUID, 500, "training.py", 40000),
        ComputeApp("GPU-other", 600, "elsewhere", 10),
    ]
    busy = [{UUID: 95, "GPU-other": 0}, {UUID: 60, "GPU-other": 0}]
    sharing = judge(apps, busy, ours={1, 10, 11}, anchor=10)
    assert sharing is not None and sharing.uuid == UUID and sharing.busy_percent == 60
    assert [app.pid for app in sharing.others] == [500]  # not our checker or worker, not another GPU's process
    assert "pid 500 (training.py, 40000 MiB)" in sharing.describe()


@pytest.mark.parametrize(
    ("readings", "anchor"),
    [
        ([{UUID: 95}, {UUID: BUSY_PERCENT - 1}], 10),  # idle at one reading: the last worker's own work fading
        ([{UUID: 95}, {}], 10),  # a reading without the GPU: cannot tell
        ([{UUID: 95}], 12345),  # the anchor holds no context (process ids of another namespace): cannot tell
        ([], 10),
    ],
)
def test_judge_says_nothing_when_it_cannot_tell_or_the_gpu_is_idle(readings: list, anchor: int) -> None:
    apps = [ComputeApp(UUID, 10, "checker", 900), ComputeApp(UUID, 500, "training.py", 40000)]
    assert judge(apps, readings, ours={10}, anchor=anchor) is None


def test_rows_that_are_not_data_are_skipped() -> None:
    """A header row (a tool that ignores ``noheader``) and a row of another query's shape are not read as data."""
    assert parse_apps("gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n") == []
    assert parse_utilisation(f"uuid, utilization.gpu [%]\n{UUID}, 87, extra\n") == {}


def test_a_gpu_at_exactly_the_threshold_is_busy() -> None:
    apps = [ComputeApp(UUID, 10, "checker", 900)]
    sharing = judge(apps, [{UUID: BUSY_PERCENT}] * 3, ours={10}, anchor=10)
    assert sharing is not None and sharing.busy_percent == BUSY_PERCENT


def test_the_threshold_is_the_one_the_manual_states() -> None:
    manual = (Path(__file__).resolve().parents[2] / "docs" / "trust.md").read_text(encoding="utf-8")
    assert f"at least {BUSY_PERCENT} % busy" in " ".join(manual.split())


def test_the_other_processes_are_named_largest_first() -> None:
    apps = [
        ComputeApp(UUID, 10, "checker", 900),
        ComputeApp(UUID, 20, "small", 100),
        ComputeApp(UUID, 30, "unknown", None),
        ComputeApp(UUID, 40, "tiny", 1),
        ComputeApp(UUID, 50, "big", 40000),
    ]
    sharing = judge(apps, [{UUID: 90}], ours={10}, anchor=10)
    assert sharing is not None
    assert [app.pid for app in sharing.others] == [50, 20, 40, 30]  # memory unknown counts as none


def test_process_tree_holds_our_children_and_not_others() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tree = process_tree(os.getpid())
        assert os.getpid() in tree and child.pid in tree
        assert 1 not in tree or os.getpid() == 1
    finally:
        child.kill()
        child.wait()


def _fake_nvidia_smi(folder: Path, utilisation: int, foreign_pid: int) -> Path:
    """A stand-in for ``nvidia-smi`` on a machine without a GPU: it lists the session's checker (found by its command
    line in ``/proc``) and one foreign process on one GPU at ``utilisation`` %, and writes the environment it was given
    to ``env.json`` beside it. The real tool is exercised by the GPU test below."""
    script = folder / "nvidia-smi"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"open({str(folder / 'env.json')!r}, 'w').write(json.dumps(dict(os.environ)))\n"
        "query = sys.argv[1] if len(sys.argv) > 1 else ''\n"
        "if query.startswith('--query-compute-apps='):\n"
        "    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "        try:\n"
        "            line = open(f'/proc/{pid}/cmdline', 'rb').read()\n"
        "        except OSError:\n"
        "            continue\n"
        "        if b'ksearch.tools.evaluator.checker.main' in line:\n"
        f"            print('{UUID}, ' + pid + ', python, 900')\n"
        f"    print('{UUID}, {foreign_pid}, other_job, 4096')\n"
        "elif query.startswith('--query-gpu='):\n"
        f"    print('{UUID}, {utilisation}')\n"
        "else:\n"
        "    sys.exit(2)\n",
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_shared_gpu_reads_nvidia_smi_with_a_bare_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_nvidia_smi(tmp_path, 87, 999_999)
    monkeypatch.setattr(gpu_sharing, "nvidia_smi", lambda: str(fake))
    monkeypatch.setenv("KSEARCH_TEST_API_KEY", "sk-must-not-leak")
    checker = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "ksearch.tools.evaluator.checker.main"]
    )
    try:
        time.sleep(0.2)
        sharing = shared_gpu(checker.pid)
    finally:
        checker.kill()
        checker.wait()
    assert sharing is not None and sharing.busy_percent == 87
    neighbours = [app.pid for app in sharing.others]
    assert 999_999 in neighbours and checker.pid not in neighbours  # the checker stand-in is our child: not listed
    assert json.loads((tmp_path / "env.json").read_text()) == BARE_ENV  # none of the parent's (its keys)
    monkeypatch.setattr(gpu_sharing, "nvidia_smi", lambda: None)
    assert shared_gpu(os.getpid()) is None  # no nvidia-smi: cannot tell


def test_a_tool_on_the_path_is_never_the_one_the_parent_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate on a GPU (no Landlock there) can write an ``nvidia-smi`` or an ``rm`` into a folder its user owns
    that comes first on the ``PATH``; the parent would run it with its own rights and keys."""
    planted = tmp_path / "bin"
    planted.mkdir()
    for name in ("nvidia-smi", "rm"):
        (planted / name).write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
        (planted / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{planted}{os.pathsep}{os.environ['PATH']}")
    assert system_binary("rm") not in (None, str(planted / "rm")) and Path(system_binary("rm") or "").is_absolute()
    assert gpu_sharing.nvidia_smi() != str(planted / "nvidia-smi")
    assert system_binary("nvidia-smi", dirs=(str(planted),)) is None or os.geteuid() == 0  # not root's: refused
    planted.chmod(0o777)  # a folder anybody may write to is refused whoever owns it
    assert system_binary("rm", dirs=(str(planted),)) is None
    planted.chmod(0o755)


@pytest.fixture
def _cpu_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSEARCH_CPU_TIMING", "1")
    monkeypatch.setattr(evaluate_module.integrity, "check_source", lambda code, **kwargs: None)


@pytest.mark.serial
@pytest.mark.usefixtures("_cpu_timing")
def test_a_forgery_on_a_busy_gpu_is_no_verdict_and_on_an_idle_one_is_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole path through real processes (wall-clock timing on the CPU): the forger's second ``timing_forgery``
    verdict meets the GPU check; with the GPU busy the evaluation raises ``HarnessError`` naming the neighbour, with
    it idle the rejection stands."""
    code = (FORGERS / "forge_runner_slot.py").read_text(encoding="utf-8")
    request = EvalRequest(
        candidate=Candidate(task="softmax", language="triton", code=code),
        device="cpu",
        timing=True,
        timing_method="gpumode-benchmark",
        run_timeout_s=240,
    )
    busy, idle = tmp_path / "busy", tmp_path / "idle"
    busy.mkdir()
    idle.mkdir()
    busy_smi, idle_smi = _fake_nvidia_smi(busy, 90, 999_999), _fake_nvidia_smi(idle, 0, 999_999)
    monkeypatch.setattr(gpu_sharing, "nvidia_smi", lambda: str(busy_smi))
    with pytest.raises(HarnessError) as raised:
        evaluate(request)
    message = str(raised.value)
    assert "pid 999999 (other_job" in message and "90 % busy" in message and "evaluator's clock" in message
    monkeypatch.setattr(gpu_sharing, "nvidia_smi", lambda: str(idle_smi))
    evaluation = evaluate(request)
    assert evaluation.verdict == Verdict.REJECTED and evaluation.rejection is not None
    assert evaluation.rejection.rule == "timing_forgery"


HOG = """
import os, sys, time
if os.fork():
    os._exit(0)  # the hog is reparented away from the test: a neighbour, not one of ours
os.setsid()
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
torch.cuda.synchronize()
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline and not os.path.exists(sys.argv[1] + ".stop"):
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
"""


@pytest.mark.gpu
def test_an_honest_kernel_on_a_gpu_another_job_keeps_busy_is_never_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real neighbour (a detached process running fp16 matmuls back to back) and the real ``nvidia-smi``: the GPU
    check names it, and an honest kernel evaluated beside it passes or gets no verdict, never ``timing_forgery``.
    (``honest_slow.py`` calls torch's softmax and sleeps: the static rules are off for it, as in
    test_trusted_timing.)"""
    monkeypatch.setattr(evaluate_module.integrity, "check_source", lambda code, **kwargs: None)
    pid_file = tmp_path / "hog.pid"
    subprocess.run([sys.executable, "-c", HOG, str(pid_file), "300"], check=True)
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the neighbour did not start"
            time.sleep(0.2)
        hog = int(pid_file.read_text())
        time.sleep(2.0)
        sharing = shared_gpu(hog)
        print(f"neighbour {hog}: {sharing}")
        assert sharing is not None and hog in [app.pid for app in sharing.others], sharing
        code = (FORGERS / "honest_slow.py").read_text(encoding="utf-8")
        request = EvalRequest(
            candidate=Candidate(task="softmax", language="triton", code=code),
            device="cuda",
            timing=True,
            timing_method="gpumode-benchmark",
            run_timeout_s=240,
        )
        try:
            evaluation = evaluate(request)
        except HarnessError as exc:
            print(f"no verdict: {exc}")
            assert f"pid {hog}" in str(exc)
            return
        print(f"verdict {evaluation.summary()}")
        assert evaluation.verdict == Verdict.PASSED, evaluation.log
    finally:
        (tmp_path / "hog.pid.stop").touch()
