"""The file layer as an allow-list: a kernel reads the OS, Python, ksearch, the task's data and its own folders, and
nothing else: no credential file of the user's home (whether or not a list names it), no other project, nothing of
``/tmp`` or ``/run`` (issue 61).

Each case runs the exploit ``exploits/secret_unlisted_files.py`` through the real evaluator, with the static rules
off (this is the layer behind them); the files hold a fake key, and what the kernel read it reports hex-encoded, so
that redaction cannot hide a leak from the test.
"""

from __future__ import annotations

import importlib
import json
import os
import secrets
import sys
from pathlib import Path

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.tools.containment import policy

EXPLOITS = Path(__file__).resolve().parent / "exploits"
SECRET = "sk-ksearchtest-" + "0d2c7f3a9c1e5b2d4f608a1c3e5f7a9b"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="containment is Linux's")
MOUNT_LAYERS = "userns,mountns,netns,caps"
"""The layers of a machine without Landlock: the mount layer's fence alone keeps the files away."""


def _needs(layers: str) -> None:
    available = policy.probe(gpu=False)[0]
    if not set(layers.split(",")) <= set(available):
        pytest.skip(f"this machine refuses part of {layers}: {policy.probe(gpu=False)[1]}")


def _plant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Credential files no deny-list names, in a home, a project (the working folder) and another project."""
    home, project, other = tmp_path / "home", tmp_path / "project", tmp_path / "other-project"
    files = [
        home / ".codex" / "auth.json",
        home / ".claude" / ".credentials.json",
        home / ".pgpass",
        home / ".vault-token",
        home / ".kaggle" / "kaggle.json",
        project / ".envrc",
        other / ".ksearch" / "ksearch.db",
    ]
    run = Path("/run")
    if os.access(run, os.W_OK):  # root's /run (a service's token would live there)
        files.append(run / f"ksearch-test-{secrets.token_hex(6)}")
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"token={SECRET}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(project)
    return files


def _evaluate(files: list[Path], sandbox: str, monkeypatch: pytest.MonkeyPatch, device: str = "cpu") -> str:
    from ksearch.tools.evaluator import EvalRequest, evaluate

    monkeypatch.setenv("KSEARCH_SANDBOX", sandbox)
    monkeypatch.setattr(policy, "_hidden", [])
    monkeypatch.setattr(
        importlib.import_module("ksearch.tools.evaluator.parent.evaluate").integrity,
        "check_source",
        lambda code, **kwargs: None,
    )
    code = (EXPLOITS / "secret_unlisted_files.py").read_text()
    code = code.replace('["__TARGETS__"]', json.dumps([str(p) for p in files]))
    candidate = Candidate(code=code, task="softmax", language="triton", entry_point="kernel")
    evaluation = evaluate(EvalRequest(candidate=candidate, device=device, timing=False))
    lines = [line for line in evaluation.log.splitlines() if "LOOT-REPORT" in line]
    assert lines, f"the exploit did not run to its end: {evaluation.log[:800]}"
    return lines[0]


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    files = _plant(tmp_path, monkeypatch)
    yield files
    for path in files:
        if path.is_relative_to("/run"):
            path.unlink(missing_ok=True)


@linux_only
@pytest.mark.parametrize("sandbox", ["auto", MOUNT_LAYERS])
def test_a_kernel_reads_no_file_outside_the_allow_list(
    planted: list[Path], sandbox: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every layer (Landlock's allow-list), and with the mount layer alone (its fence over ``/tmp``, ``/run``
    and the homes), none of the files is read, and the kernel's own folder works."""
    if sandbox == "auto" and "landlock" not in policy.probe(gpu=False)[0]:
        pytest.skip(f"no Landlock here: {policy.probe(gpu=False)[1]}")
    _needs(MOUNT_LAYERS)
    loot = _evaluate(planted, sandbox, monkeypatch)
    assert f"read=0 denied={len(planted)} own=1" in loot, loot
    assert SECRET.encode().hex()[:40] not in loot


@linux_only
def test_without_the_file_layers_the_kernel_reads_them(planted: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: with a user namespace and no capabilities only, the exploit reads every file (it is real)."""
    _needs("userns,caps")
    loot = _evaluate(planted, "userns,caps", monkeypatch)
    assert f"read={len(planted)} denied=0" in loot and SECRET.encode().hex()[:40] in loot, loot


@linux_only
@pytest.mark.gpu
def test_on_a_gpu_a_kernel_reads_no_file_outside_the_allow_list(
    planted: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU's candidate (CUDA started: its device files, the driver's libraries, ``/proc`` and ``/sys`` on the
    list) reads none of the files either."""
    loot = _evaluate(planted, "auto", monkeypatch, device="cuda")
    assert f"read=0 denied={len(planted)} own=1" in loot, loot


@linux_only
@pytest.mark.parametrize("sandbox", ["auto", MOUNT_LAYERS])
def test_the_c_compiler_triton_runs_stays_readable_in_a_fenced_folder(
    tmp_path: Path, sandbox: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton builds each kernel's launcher with ``CC`` or the ``gcc`` on the PATH: one installed in a fenced folder
    (``/opt/gcc`` on the lent H100; here under ``/tmp``) stays readable with its installation, while a file beside
    that installation does not."""
    if sandbox == "auto" and "landlock" not in policy.probe(gpu=False)[0]:
        pytest.skip(f"no Landlock here: {policy.probe(gpu=False)[1]}")
    _needs(MOUNT_LAYERS)
    prefix = tmp_path / "opt" / "gcc"
    compiler, helper = prefix / "bin" / "gcc", prefix / "libexec" / "cc1"
    for program in (compiler, helper):
        program.parent.mkdir(parents=True)
        program.write_text("#!/bin/sh\nexit 0\n")
        program.chmod(0o755)
    beside = tmp_path / "opt" / "other-tool.txt"
    beside.write_text(f"token={SECRET}\n")
    monkeypatch.setenv("PATH", f"{compiler.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.chdir(tmp_path)
    loot = _evaluate([compiler, helper, beside], sandbox, monkeypatch)
    assert "read=2 denied=1 own=1" in loot, loot


def test_the_toolchain_of_cc_and_of_the_path_is_on_the_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ksearch.tools.containment import allowlist

    named, on_path = tmp_path / "named" / "bin" / "my-cc", tmp_path / "found" / "bin" / "clang"
    for program in (named, on_path):
        program.parent.mkdir(parents=True)
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
    monkeypatch.setenv("CC", f"{named} -m64")
    monkeypatch.setenv("PATH", f"{named.parent}{os.pathsep}{on_path.parent}{os.pathsep}/usr/bin:/bin")
    paths = allowlist.toolchain_paths()
    assert str(tmp_path / "named") in paths and str(tmp_path / "found") in paths
    assert str(tmp_path / "named") in allowlist.readable()[0]
