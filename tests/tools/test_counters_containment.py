"""ncu inside the candidate's containment: the rungs, what the launcher opens for ncu (and that it opens nothing
outside the sandbox), what the sandbox lets ncu read, and how a failure is said in a few lines.

On the GPU machines the launcher could not apply the user namespace under ncu (ncu's library had started threads in
it: ``unshare: Invalid argument``); the launcher now applies the layers first and then ``exec``s ncu. These run on
the CPU with the real launcher; ``test_counters_process.py`` runs the whole collection with a stand-in ncu.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ksearch.contracts.counters import CounterStatus
from ksearch.tools.containment import landlock, policy
from ksearch.tools.containment.launcher import FAILED
from ksearch.tools.containment.policy import Openings
from ksearch.tools.counters import ncu_command
from ksearch.tools.counters.rungs import Rung, ladder, openings_for, requested_rungs

MACHINE = ("limits", "userns", "mountns", "netns", "ipcns", "caps", "landlock", "seccomp")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="containment is Linux's")


def _needs(*layers: str) -> None:
    available = policy.probe(gpu=True)[0]
    if not set(layers) <= set(available):
        pytest.skip(f"this machine refuses part of {layers}: {policy.probe(gpu=True)[1]}")


def _spec(argv: list[str]) -> dict:
    return json.loads(argv[argv.index("ksearch.tools.containment.launcher") + 1])


def _contained(layers: tuple[str, ...], openings: Openings, program: str, work: Path, **env: str):
    """``python -c program`` started by the launcher as a GPU's candidate would be (ncu's openings as given)."""
    prefix = policy.launcher_prefix("cuda:0", [work], layers=layers, openings=openings)
    environment = {**os.environ, "KSEARCH_PARENT_PID": str(os.getpid()), **env}
    return subprocess.run(
        [*prefix, sys.executable, "-c", program], capture_output=True, text=True, env=environment, timeout=60
    )


LISTEN_AND_CONNECT = """
import socket
try:
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0)); server.listen(1); client.connect(server.getsockname())
    print("own loopback: connected")
except OSError as exc:
    print("own loopback:", type(exc).__name__, exc.errno)
"""


def test_the_ladder_starts_with_every_layer_and_opens_sockets_only_inside_the_sandbox() -> None:
    rungs = ladder(MACHINE, ("/opt/nvidia/nsight-compute/2025.3.1",))
    assert [r.name for r in rungs] == [
        "all layers",
        "without seccomp",
        "without seccomp or netns",
        "without seccomp, netns or mountns",
    ]
    assert rungs[0].layers == MACHINE
    assert rungs[-1].layers == ("limits", "userns", "ipcns", "caps", "landlock")  # never below these
    first = rungs[0].openings
    assert first.network and first.loopback and first.connect and first.tool  # inside its own namespaces
    assert first.readable == ("/opt/nvidia/nsight-compute/2025.3.1",)
    assert not rungs[2].openings.loopback and not rungs[2].openings.connect  # no namespace of its own: no loopback
    assert "open for ncu: sockets in its own network namespace, connect in the sandbox" in rungs[0].describe()
    assert "TCP and abstract sockets to this machine" in rungs[2].describe()
    without_mounts = ladder(("userns", "netns", "caps", "landlock", "seccomp"))
    assert not without_mounts[0].openings.connect  # a path socket outside would be in reach: seccomp keeps refusing
    assert [r.layers for r in ladder(())] == [()]


def test_the_user_may_choose_the_layers() -> None:
    assert requested_rungs("auto") is None and requested_rungs("") is None
    assert requested_rungs("off") == [Rung("off", (), openings_for(()))]
    asked = requested_rungs("userns, netns,caps", ("/opt/ncu",))
    layers = ("userns", "netns", "caps")
    assert asked == [Rung("as asked", layers, openings_for(layers, ("/opt/ncu",)))]
    assert asked[0].openings.loopback and not asked[0].openings.connect


def test_the_launchers_spec_carries_ncus_openings_and_the_allow_list(tmp_path: Path) -> None:
    """What the parent asks of the launcher: the allow-list always (the process ncu profiles included), ncu's
    installation on it, and each opening only when asked."""
    work, install = tmp_path / "work", tmp_path / "nsight-compute-2025.3.1"
    work.mkdir()
    install.mkdir()
    opened = Openings(network=True, loopback=True, connect=True, readable=(str(install),), tool=True)
    spec = _spec(policy.launcher_prefix("cuda:0", [work], layers=MACHINE, openings=opened))
    assert str(install) in spec["readable"] and spec["listable"] is not None and "/tmp" in spec["fenced"]
    assert spec["network"] and spec["loopback"] and spec["connect"] and spec["tool"]
    plain = _spec(policy.launcher_prefix("cuda:0", [work], layers=MACHINE))
    assert not {"network", "loopback", "connect", "tool"} & set(plain) and str(install) not in plain["readable"]


@linux_only
def test_ncus_openings_reach_the_sandboxs_own_loopback_and_nothing_outside(tmp_path: Path) -> None:
    """With ncu's openings a process in the sandbox connects to a port of its own (ncu reaches its library so),
    under seccomp and Landlock; a port of the machine's stays out of reach; without them, nothing connects."""
    _needs("userns", "netns", "mountns", "landlock", "seccomp")
    if landlock.abi_version() < 4:
        pytest.skip("needs Landlock with its TCP rules (ABI 4+)")
    work = tmp_path / "work"
    work.mkdir()
    layers = ("userns", "mountns", "netns", "caps", "landlock", "seccomp")
    outside = socket.socket()
    outside.bind(("127.0.0.1", 0))
    outside.listen(1)
    reach_outside = (
        f"\ntry:\n    socket.create_connection(('127.0.0.1', {outside.getsockname()[1]}), timeout=2)\n"
        "    print('machine: connected')\nexcept OSError as exc:\n    print('machine:', type(exc).__name__)\n"
    )
    try:
        opened = _contained(layers, openings_for(layers), LISTEN_AND_CONNECT + reach_outside, work)
        closed = _contained(layers, Openings(), LISTEN_AND_CONNECT + reach_outside, work)
    finally:
        outside.close()
    assert "own loopback: connected" in opened.stdout, opened.stdout + opened.stderr
    assert "machine: connected" not in opened.stdout, opened.stdout
    assert "own loopback: connected" not in closed.stdout and "machine: connected" not in closed.stdout


@linux_only
def test_the_loopback_is_up_only_when_asked(tmp_path: Path) -> None:
    """The network namespace's loopback is down for a candidate, up for ncu's rung (the namespace's own)."""
    _needs("userns", "netns")
    work = tmp_path / "work"
    work.mkdir()
    layers = ("userns", "netns")
    up = _contained(layers, Openings(loopback=True), LISTEN_AND_CONNECT, work)
    down = _contained(layers, Openings(), LISTEN_AND_CONNECT, work)
    assert "own loopback: connected" in up.stdout, up.stdout + up.stderr
    assert "own loopback: OSError 101" in down.stdout or "own loopback: OSError 99" in down.stdout, down.stdout


@linux_only
def test_a_tool_the_launcher_starts_hands_its_child_no_parent_to_die_with(tmp_path: Path) -> None:
    """The worker ncu starts is ncu's child: it must not take the parent's pid for its own parent's and exit."""
    _needs("userns")
    work = tmp_path / "work"
    work.mkdir()
    program = "import os; print('parent=' + repr(os.environ.get('KSEARCH_PARENT_PID')))"
    as_tool = _contained(("userns",), Openings(tool=True), program, work)
    as_worker = _contained(("userns",), Openings(), program, work)
    assert "parent=''" in as_tool.stdout, as_tool.stdout + as_tool.stderr
    assert f"parent='{os.getpid()}'" in as_worker.stdout, as_worker.stdout + as_worker.stderr


@linux_only
def test_a_tool_out_of_the_sandboxs_reach_is_said_in_one_line(tmp_path: Path) -> None:
    """ncu's installation outside the allow-list and not opened: the launcher says it could not start it."""
    _needs("userns", "mountns", "landlock")
    work, install = tmp_path / "work", tmp_path / "nsight-compute"
    work.mkdir()
    install.mkdir()
    tool = install / "ncu"
    tool.write_text("#!/bin/sh\necho started\n")
    tool.chmod(0o755)
    prefix = policy.launcher_prefix("cuda:0", [work], layers=("userns", "mountns", "landlock"))
    env = {**os.environ, "KSEARCH_PARENT_PID": str(os.getpid())}
    out = subprocess.run([*prefix, str(tool)], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == FAILED and "started" not in out.stdout
    assert f"ksearch containment could not start {tool}: " in out.stderr, out.stderr
    reached = policy.launcher_prefix(
        "cuda:0", [work], layers=("userns", "mountns", "landlock"), openings=Openings(readable=(str(install),))
    )
    out = subprocess.run([*reached, str(tool)], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == "started", out.stderr


def test_ncus_installation_is_its_folder_and_the_nsight_compute_folders_beside_a_toolkits_bin(tmp_path: Path) -> None:
    toolkit = tmp_path / "cuda-13.0"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "nsight-compute-2025.3.1" / "target").mkdir(parents=True)
    (toolkit / "nvvm").mkdir()
    launcher_script = toolkit / "bin" / "ncu"
    launcher_script.write_text("#!/bin/sh\n")
    linked = tmp_path / "cuda"
    linked.symlink_to(toolkit)
    nowhere = str(tmp_path / "no-opt")
    assert ncu_command.installation(str(linked / "bin" / "ncu"), nowhere) == (
        str(toolkit / "bin"),
        str(toolkit / "nsight-compute-2025.3.1"),
    )
    standalone = tmp_path / "opt" / "nvidia" / "nsight-compute" / "2025.3.1"
    standalone.mkdir(parents=True)
    (standalone / "ncu").write_text("#!/bin/sh\n")
    on_path = tmp_path / "bin-elsewhere"
    on_path.mkdir()
    (on_path / "ncu").symlink_to(standalone / "ncu")
    assert ncu_command.installation(str(on_path / "ncu"), nowhere) == (str(standalone),)


def test_a_toolkit_launcher_without_nsight_compute_beside_it_is_given_the_one_under_opt_nvidia(tmp_path: Path) -> None:
    """CUDA 13's packages put ncu's launcher in the toolkit's bin and Nsight Compute in /opt/nvidia (an H100 machine,
    2026-12-07): without the latter readable, the launcher stopped at once in every containment rung."""
    toolkit = tmp_path / "cuda-13.0"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "bin" / "ncu").write_text("#!/bin/sh\n")
    opt = tmp_path / "opt" / "nvidia"
    (opt / "nsight-compute" / "2025.3.1").mkdir(parents=True)
    (opt / "nsight-systems").mkdir()
    assert ncu_command.installation(str(toolkit / "bin" / "ncu"), str(opt)) == (
        str(toolkit / "bin"),
        str(opt / "nsight-compute"),
    )


def test_the_launchers_own_error_is_the_reason_given() -> None:
    stderr = "ERROR : nsight-compute directory is not found under /usr/local/cuda-13.0/bin/../ or /opt/nvidia.\n"
    status, reason = ncu_command.diagnose("", returncode=1, report_exists=False, stderr=stderr)
    assert status == CounterStatus.FAILED and "nsight-compute directory is not found" in reason, reason


def test_a_failure_is_said_in_its_first_meaningful_lines() -> None:
    log = "==PROF== Connected to process 12\n==ERROR== Failed to profile kernel\n==ERROR== second\n==ERROR== third\n"
    stderr = (
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
        "torch.AcceleratorError: CUDA error: out of memory\n"
    )
    assert ncu_command.problems(log, stderr) == [
        "==ERROR== Failed to profile kernel",
        "==ERROR== second",
        "torch.AcceleratorError: CUDA error: out of memory",
    ]
    launcher = "ksearch containment could not apply userns: unshare: Invalid argument\n"
    assert ncu_command.problems("", launcher) == [launcher.strip()]
    assert ncu_command.problems("==WARNING== No kernels were profiled.\n" + "x" * 500, "")[0].endswith("profiled.")
    assert all(len(line) <= ncu_command.PROBLEM_CHARS for line in ncu_command.problems("==ERROR== " + "y" * 900, ""))
    status, detail = ncu_command.diagnose("==PROF== ncu starting\n", returncode=1, report_exists=False)
    assert detail == "ncu never connected to the profiled process"
    status, detail = ncu_command.diagnose("", returncode=121, report_exists=False, stderr=launcher)
    assert detail == launcher.strip()


def test_the_drivers_restriction_is_read_under_either_of_its_names(tmp_path: Path) -> None:
    """Where counters are refused, the report says what the driver says: the open module publishes
    ``RmProfilingAdminOnly``, older drivers the option's own name."""
    params = tmp_path / "params"
    params.write_text("ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\nEnableMSI: 1\n")
    assert ncu_command.profiling_restriction(params) == "RmProfilingAdminOnly: 1"
    params.write_text("RestrictProfilingToAdminUsers: 0\n")
    assert ncu_command.profiling_restriction(params) == "RestrictProfilingToAdminUsers: 0"
    assert ncu_command.profiling_restriction(tmp_path / "missing") == ""
    refused = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n"
    status, detail = ncu_command.diagnose(
        refused, returncode=1, report_exists=False, restriction="RmProfilingAdminOnly: 1"
    )
    assert status == CounterStatus.NO_PERMISSION and "(ERR_NVGPUCTRPERM; RmProfilingAdminOnly: 1)" in detail
