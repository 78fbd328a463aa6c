"""Limits per candidate and a ``/dev/shm`` of its own (issue 61): a kernel that exhausts memory, disk or file size
gets a verdict that says so, and leaves nothing in the machine's ``/dev/shm`` nor reaches another evaluation's
staging buffer there.

The exploits (``exploits/exhaust_*.py``, ``exploits/tamper_shared_memory.py``) run through the real evaluator on the
CPU, with the static rules off (this is the layer behind them). The memory exploit stops by itself at 6 GiB, so a
machine without the limit is not taken down by the test; the limit here is 3 GiB.
"""

from __future__ import annotations

import importlib
import os
import secrets
import sys
from pathlib import Path

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.tools.containment import limits, policy
from ksearch.tools.evaluator.parent import exhaustion
from ksearch.tools.evaluator.parent.outcome import Outcome
from ksearch.tools.evaluator.parent.verdicts import _crash_headline

EXPLOITS = Path(__file__).resolve().parent / "exploits"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="containment is Linux's")


def _evaluate(code: str, monkeypatch: pytest.MonkeyPatch, sandbox: str = "auto", device: str = "cpu") -> Evaluation:
    from ksearch.tools.evaluator import EvalRequest, evaluate

    monkeypatch.setenv("KSEARCH_SANDBOX", sandbox)
    monkeypatch.setattr(policy, "_hidden", [])
    monkeypatch.setattr(
        importlib.import_module("ksearch.tools.evaluator.parent.evaluate").integrity,
        "check_source",
        lambda code, **kwargs: None,
    )
    candidate = Candidate(code=code, task="softmax", language="triton", entry_point="kernel")
    return evaluate(EvalRequest(candidate=candidate, device=device, timing=False))


def _needs(layers: str) -> None:
    if not set(layers.split(",")) <= set(policy.probe(gpu=False)[0]):
        pytest.skip(f"this machine refuses part of {layers}: {policy.probe(gpu=False)[1]}")


@pytest.mark.slow
@linux_only
def test_a_kernel_out_of_memory_is_stopped_at_its_limit_and_told_so(monkeypatch: pytest.MonkeyPatch) -> None:
    _needs("limits")
    monkeypatch.setenv(limits.MEMORY_VARIABLE, "3G")
    evaluation = _evaluate((EXPLOITS / "exhaust_memory.py").read_text(), monkeypatch)
    assert "LOOT-REPORT" not in evaluation.log, evaluation.log[:600]
    assert evaluation.verdict == Verdict.RUNTIME_ERROR, evaluation.log[:600]
    assert "out of memory" in evaluation.log.splitlines()[0] and "3.0 GiB" in evaluation.log, evaluation.log[:600]


@linux_only
def test_a_kernel_writing_past_the_file_size_limit_is_stopped_and_told_so(monkeypatch: pytest.MonkeyPatch) -> None:
    _needs("limits")
    monkeypatch.setenv(limits.FILE_SIZE_VARIABLE, "32M")
    evaluation = _evaluate((EXPLOITS / "exhaust_file_size.py").read_text(), monkeypatch)
    assert "LOOT-REPORT" not in evaluation.log, evaluation.log[:600]
    assert "file size limit" in evaluation.log.splitlines()[0], evaluation.log[:600]


@linux_only
def test_a_kernel_on_a_full_disk_is_told_so(monkeypatch: pytest.MonkeyPatch) -> None:
    evaluation = _evaluate((EXPLOITS / "exhaust_disk.py").read_text(), monkeypatch)
    assert evaluation.verdict == Verdict.RUNTIME_ERROR
    assert "out of disk space" in evaluation.log.splitlines()[0], evaluation.log[:600]


def test_a_crash_that_ran_out_says_what_it_ran_out_of() -> None:
    """The worker's exit as the parent sees it: killed while the kernel's OOM killer acted, or dead on a full disk
    before its report, reads as what it is, not as a signal or an exit code."""
    killed = _crash_headline(Outcome(returncode=-9, oom_killed=True, phase="run"))
    assert killed.startswith("crashed, out of memory") and "SIGKILL" in killed
    full = _crash_headline(Outcome(returncode=1, stderr="OSError: [Errno 28] No space left on device", phase="run"))
    assert full.startswith("crashed, out of disk space") and "exited with code 1" in full
    plain = _crash_headline(Outcome(returncode=-9, oom_killed=False, phase="run"))
    assert plain.startswith("crashed: the worker was killed by signal SIGKILL")
    assert exhaustion.cause(returncode=-25, text="", oom_killed=False, device="cpu").startswith("a file it wrote")


@linux_only
@pytest.mark.parametrize(
    ("sandbox", "private", "device"),
    [
        ("auto", True, "cpu"),
        ("userns,caps", False, "cpu"),
        pytest.param("auto", True, "cuda", marks=pytest.mark.gpu, id="gpu"),
    ],
)
def test_a_kernels_dev_shm_is_its_own(
    monkeypatch: pytest.MonkeyPatch, sandbox: str, private: bool, device: str
) -> None:
    """With the mount layer a file the kernel leaves in ``/dev/shm`` is gone with its evaluation, and another
    evaluation's buffer there is out of its reach; the control (no mount layer) shows both would happen. On a GPU
    (staging through CUDA IPC, CUDA's own use of ``/dev/shm`` in the candidate's process) the same."""
    _needs(sandbox if sandbox != "auto" else "userns,mountns")
    token = secrets.token_hex(6)
    foreign = Path(f"/dev/shm/ksearch-test-foreign-{token}")
    foreign.write_bytes(b"\0" * 64)
    left = Path(f"/dev/shm/ksearch-test-left-{token}")
    code = (EXPLOITS / "tamper_shared_memory.py").read_text()
    code = code.replace("__FOREIGN__", str(foreign)).replace("__LEFT__", left.name)
    try:
        evaluation = _evaluate(code, monkeypatch, sandbox, device)
        assert "LOOT-REPORT" in evaluation.log, evaluation.log[:600]
        assert left.exists() != private and (b"planted" in foreign.read_bytes()) != private, evaluation.log[:600]
        if private:
            assert "left=1" in evaluation.log, evaluation.log[:600]  # it wrote there: its own /dev/shm works
    finally:
        foreign.unlink(missing_ok=True)
        left.unlink(missing_ok=True)


def test_limit_sizes_are_read_or_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    assert limits.parse_size("8G", "X") == 8 << 30 and limits.parse_size("512m", "X") == 512 << 20
    assert limits.parse_size("off", "X") == 0 and limits.parse_size("1048576", "X") == 1 << 20
    with pytest.raises(limits.LimitError, match="not a size"):
        limits.parse_size("lots", "X")
    monkeypatch.delenv(limits.MEMORY_VARIABLE, raising=False)
    assert limits.for_device("cpu").memory == limits.machine_memory() // 2
    assert limits.for_device("cuda:0").memory == 0  # CUDA reserves far more address space than it uses
    assert os.environ.get(limits.FILE_SIZE_VARIABLE) is None and limits.for_device("cpu").file_size == 16 << 30


@linux_only
def test_a_killed_sessions_staging_folder_is_swept_by_the_next(tmp_path: Path) -> None:
    """A session's staging folder holds its checker's buffer in ``/dev/shm`` (memory): after a ``kill -9`` no cleanup
    runs, so it is named after its process and the next session removes those whose process is gone."""
    import subprocess

    from ksearch.tools.evaluator.parent.session import SHARED_MEMORY, staging_folder

    gone = subprocess.Popen(["/bin/true"])
    gone.wait()
    stale = SHARED_MEMORY / f"ksearch-staging-{gone.pid}-{secrets.token_hex(4)}"
    stale.mkdir()
    (stale / "buffer").write_bytes(b"\0" * 4096)
    fresh = staging_folder()
    try:
        assert fresh is not None and fresh.parent == SHARED_MEMORY
        assert fresh.name.startswith(f"ksearch-staging-{os.getpid()}-") and not stale.exists()
    finally:
        if fresh is not None:
            fresh.rmdir()
        if stale.exists():
            (stale / "buffer").unlink()
            stale.rmdir()
