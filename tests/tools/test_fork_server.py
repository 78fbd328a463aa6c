"""The fork server (``evaluator.shared.fork_server``): a CPU process it forks is the one ``sandbox.spawn`` would have
started with its own Python, seen from inside (descriptors, folder, environment, parent, session, capabilities,
no_new_privs, seccomp, namespaces) and from the parent (its child: exit status, pipes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ksearch import settings
from ksearch.tools.containment import policy
from ksearch.tools.evaluator.shared import fork_server, sandbox

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux's")


@pytest.fixture(autouse=True)
def _servers_of_this_test(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN202
    monkeypatch.setenv("PYTHONPATH", str(HELPERS))
    fork_server.stop_all()
    yield
    fork_server.stop_all()


def _run(folder: Path, *, fork: bool, contain: bool, exit_code: int = 0) -> tuple[int, dict[str, Any], bytes]:
    os.environ[settings.FORK_SERVER.name] = "1" if fork else "0"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        read, write = os.pipe()
        try:
            process = sandbox.spawn(
                "process_status",
                [str(exit_code)],
                cwd=folder,
                device="cpu",
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(write,),
                extra_env={settings.MSG_FD.name: str(write)},
                contain=contain,
            )
        finally:
            os.close(write)
        out, err = process.communicate(b"hello", timeout=180)
        os.close(read)
    finally:
        os.environ.pop(settings.FORK_SERVER.name, None)
    assert out, err.decode(errors="replace")
    return process.returncode, json.loads(out), err


def _own_namespaces() -> dict[str, str]:
    return {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in ("user", "pid", "mnt", "net", "ipc")}


@linux_only
@pytest.mark.parametrize("contain", [False, True], ids=["no layers", "layers"])
def test_a_forked_process_is_the_one_its_own_python_would_have_been(tmp_path: Path, contain: bool) -> None:
    if contain and not policy.child_layers("cpu"):
        pytest.skip("this machine gives a CPU candidate no layers")
    code, forked, forked_err = _run(tmp_path / "forked", fork=True, contain=contain, exit_code=3)
    code_started, started, _ = _run(tmp_path / "started", fork=False, contain=contain, exit_code=3)
    assert forked["forked"] and not started["forked"]
    assert code == code_started == 3
    assert forked["ppid"] == started["ppid"]  # the caller (its child: it waited for it), or a PID namespace's first
    assert contain or forked["ppid"] == os.getpid()
    assert forked["name"] == "__main__" and forked["argv"] == ["3"] and forked["stdin"] == "hello"
    assert b"to stderr" in forked_err and forked["sid_is_pid"] == started["sid_is_pid"] == (
        not contain or "pidns" not in policy.child_layers("cpu")
    )
    assert forked["cwd"] == str(tmp_path / "forked")
    assert forked["cmdline"] == started["cmdline"] == [sys.executable, "-P", "-m", "process_status", "3"]
    assert forked["status"] == started["status"]  # uid, capabilities, no_new_privs, seccomp
    assert forked["dumpable"] == started["dumpable"] == 1  # the server is not (as the agent is not)
    assert forked["fds"] == started["fds"] and forked["message_fd_open"] and started["message_fd_open"]
    own = _own_namespaces()
    assert {k: v != own[k] for k, v in forked["namespaces"].items()} == {
        k: v != own[k] for k, v in started["namespaces"].items()
    }
    folder = str(tmp_path / "forked")
    assert forked["env"] == {k: v.replace(str(tmp_path / "started"), folder) for k, v in started["env"].items()}


@linux_only
def test_a_process_is_started_as_before_when_the_server_cannot_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fork_server, "MODULE", "ksearch.no_such_fork_server")
    code, report, _ = _run(tmp_path, fork=True, contain=False)
    assert code == 0 and not report["forked"] and report["ppid"] == os.getpid()


def test_only_a_cpus_python_modules_are_forked(monkeypatch: pytest.MonkeyPatch) -> None:
    module = [sys.executable, "-P", "-m", "ksearch.tools.evaluator.worker.main"]
    assert fork_server.usable("cpu", module) == sys.platform.startswith("linux")
    assert not fork_server.usable("cuda:0", module)  # CUDA cannot start in a process forked from one that imported it
    assert not fork_server.usable("cpu", ["/usr/bin/ncu", *module])  # a tool that starts the program
    monkeypatch.setenv(settings.FORK_SERVER.name, "0")
    assert not fork_server.usable("cpu", module)


@linux_only
def test_processes_of_one_environment_share_a_server(tmp_path: Path) -> None:
    _run(tmp_path / "a", fork=True, contain=False)
    _run(tmp_path / "b", fork=True, contain=False)
    assert len(fork_server._servers) == 1  # their folders differ; the rest of their environments does not


def _our_zombies() -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.append(int(name))
    return found


@linux_only
def test_a_killed_process_leaves_no_orphan_for_the_caller_to_reap(tmp_path: Path) -> None:
    """The caller is a child subreaper only while the server answers: the processes a killed one leaves (a PID
    namespace's first process) go to init, not to a caller that never reaps them."""
    os.environ[settings.FORK_SERVER.name] = "1"
    try:
        before = set(_our_zombies())
        process = sandbox.spawn(
            "process_status",
            [],
            cwd=tmp_path,
            device="cpu",
            stdin=subprocess.PIPE,  # it waits for its input
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            contain=True,
        )
        time.sleep(1.0)
        sandbox.kill_group(process.pid)
        process.wait(timeout=30)
        assert process.stdin is not None
        process.stdin.close()
        time.sleep(0.5)
        assert set(_our_zombies()) <= before
    finally:
        os.environ.pop(settings.FORK_SERVER.name, None)
