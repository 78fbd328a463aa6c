"""``mountns``: a candidate changes nothing outside its own folders, and the hidden paths stay unread, without Landlock.

On a GPU Landlock is off (CUDA's initialisation fails under it), so before this layer a kernel could append to any
file its user owns: the ksearch installation the next checker imports, the workspace database that holds every
verdict (a red-team review, session 26). The exploit (``exploits/tamper_outside_folders.py``) is run through the real
evaluator with the layers a GPU gets; what it changed is read from outside, by the test.
"""

from __future__ import annotations

import importlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

import ksearch
from ksearch.contracts.candidate import Candidate
from ksearch.tools.containment import policy
from ksearch.tools.containment.launcher import beneath_any, mount_points

EXPLOITS = Path(__file__).resolve().parent / "exploits"
GPU_LAYERS = "userns,mountns,caps"
"""What ``auto`` gives a candidate on a GPU where the machine allows user namespaces (no ``pidns``, no Landlock)."""
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="containment is Linux's")


def _needs(layers: str, gpu: bool = False) -> None:
    available = policy.probe(gpu=gpu)[0]
    if not set(layers.split(",")) <= set(available):
        pytest.skip(f"this machine refuses part of {layers}: {policy.probe(gpu=gpu)[1]}")


def _targets(tmp_path: Path) -> dict[str, Path]:
    """Files the candidate may not change: one the user owns, a workspace database, and one inside ksearch itself."""
    user_file = tmp_path / "notes.txt"
    user_file.write_text("mine\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    database = workspace / "ksearch.db"
    database.write_text("verdicts\n")
    planted = Path(ksearch.__file__).resolve().parent / f".planted-{secrets.token_hex(6)}"
    return {"user": user_file, "database": database, "ksearch": planted}


def _tamper(targets: dict[str, Path], sandbox: str, device: str, monkeypatch: pytest.MonkeyPatch) -> str:
    from ksearch.tools.evaluator import EvalRequest, evaluate

    monkeypatch.setenv("KSEARCH_SANDBOX", sandbox)
    monkeypatch.setattr(policy, "_hidden", [])
    # the static rules would refuse open() before it runs: this is the layer behind them
    monkeypatch.setattr(importlib.import_module("ksearch.tools.evaluator.evaluate").integrity, "check_source",
                        lambda code, **kwargs: None)  # fmt: skip
    code = (EXPLOITS / "tamper_outside_folders.py").read_text()
    code = code.replace('["__TARGETS__"]', json.dumps([str(p) for p in targets.values()]))
    candidate = Candidate(code=code, task="softmax", language="triton", entry_point="kernel")
    evaluation = evaluate(EvalRequest(candidate=candidate, device=device, timing=False))
    lines = [line for line in evaluation.log.splitlines() if "LOOT-REPORT" in line]
    assert lines, f"the exploit did not run to its end: {evaluation.log[:800]}"
    return lines[0]


def _unchanged(targets: dict[str, Path]) -> list[str]:
    """The names of the targets the candidate changed (read from here, not from its report); removes what it planted."""
    changed = [name for name in ("user", "database") if "planted" in targets[name].read_text()]
    if targets["ksearch"].exists():
        targets["ksearch"].unlink()
        changed.append("ksearch")
    return changed


@linux_only
@pytest.mark.parametrize("sandbox", [GPU_LAYERS, "auto"])
def test_a_kernel_changes_nothing_outside_its_folders(tmp_path: Path, sandbox: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _needs(GPU_LAYERS)
    targets = _targets(tmp_path)
    try:
        loot = _tamper(targets, sandbox, "cpu", monkeypatch)
    finally:
        changed = _unchanged(targets)
    assert changed == [], f"{changed} changed: {loot}"
    assert "own=1 changed=0 denied=3" in loot, loot


@linux_only
def test_without_the_mount_layer_the_tamper_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control (user namespace and no capabilities, no Landlock: the GPU's layers before ``mountns``): the
    exploit is real. Only the user's own file is offered, so nothing inside ksearch is ever written."""
    _needs("userns,caps")
    targets = _targets(tmp_path)
    offered = {"user": targets["user"]}
    loot = _tamper(offered, "userns,caps", "cpu", monkeypatch)
    assert "changed=1" in loot and "planted" in targets["user"].read_text()


@linux_only
@pytest.mark.gpu
def test_a_kernel_on_a_gpu_changes_nothing_outside_its_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _needs("mountns", gpu=True)
    targets = _targets(tmp_path)
    try:
        loot = _tamper(targets, "auto", "cuda", monkeypatch)
    finally:
        changed = _unchanged(targets)
    assert changed == [], f"{changed} changed: {loot}"
    assert "own=1 changed=0" in loot, loot
    assert "mountns" in policy.child_layers("cuda")


@linux_only
@pytest.mark.parametrize("setattr_call", [True, False], ids=["mount_setattr", "bind_remount"])
def test_both_ways_of_making_mounts_read_only(tmp_path: Path, setattr_call: bool) -> None:
    """``mount_setattr`` (Linux 5.12+) and the older kernels' bind remount give the same fence; a covered folder
    and a covered file read as empty."""
    _needs("userns")
    own, outside, hidden = tmp_path / "own", tmp_path / "outside.txt", tmp_path / "hidden"
    own.mkdir()
    hidden.mkdir()
    (hidden / "key").write_text("sk-secret")
    outside.write_text("x")
    script = f"""
import os
from ksearch.tools.containment import launcher
launcher.enter_namespaces(False)
launcher.private_mounts([{str(hidden)!r}, {str(outside)!r}], [{str(own)!r}, "/dev"], new_namespace=True,
                        setattr_call={setattr_call})
def attempt(step):
    try:
        return step()
    except OSError as exc:
        return type(exc).__name__
print(attempt(lambda: open({str(own / 'w')!r}, "w").write("ok")))
print(attempt(lambda: open({str(tmp_path / 'new')!r}, "w").write("no")))
print(attempt(lambda: os.listdir({str(hidden)!r})))
print(attempt(lambda: open({str(outside)!r}).read()))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(Path(ksearch.__file__).resolve().parents[1])})  # fmt: skip
    assert done.returncode == 0, done.stderr
    wrote, created, listing, read = done.stdout.split("\n")[:4]
    assert (wrote, created, read) == ("2", "OSError", ""), done.stdout
    assert listing in ("[]", "PermissionError"), done.stdout  # empty, or closed to a process without capabilities
    assert not (tmp_path / "new").exists() and (own / "w").read_text() == "ok"


def test_mount_points_are_read_with_their_escapes() -> None:
    info = (b"22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
            b"30 22 0:25 / /mnt/with\\040space rw - tmpfs tmpfs rw\n"
            b"31 22 0:26 / /dev/shm rw - tmpfs tmpfs rw\n")  # fmt: skip
    assert mount_points(info) == [b"/", b"/mnt/with space", b"/dev/shm"]
    assert beneath_any(b"/dev/shm", [b"/dev"]) and beneath_any(b"/dev", [b"/dev"])
    assert not beneath_any(b"/devices", [b"/dev"]) and not beneath_any(b"/", [b"/dev"])
