"""``mountns`` and ``netns``: a candidate changes nothing outside its own folders, reads none of the hidden paths and
reaches no service on the machine, without Landlock.

On a GPU Landlock is off (CUDA's initialisation fails under it), so before this layer a kernel could append to any
file its user owns: the ksearch installation the next checker imports, the workspace database that holds every
verdict (a red-team review of 2026-11-29). The exploit (``exploits/tamper_outside_folders.py``) is run through the real
evaluator with the layers a GPU gets; what it changed is read from outside, by the test. A second red-team review
(2026-11-30) wrote ``/proc/sys/kernel/core_pattern`` as root and reached an unauthenticated Dask scheduler on the
loopback: ``PROC_READ_ONLY`` and ``netns``.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import secrets
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import ksearch
from ksearch.contracts.candidate import Candidate
from ksearch.tools.containment import allowlist, policy
from ksearch.tools.containment.mounts import mount_points
from ksearch.tools.containment.syscalls import beneath_any

EXPLOITS = Path(__file__).resolve().parent / "exploits"
GPU_LAYERS = "userns,mountns,netns,caps"
"""What ``auto`` gives a candidate on a GPU where the machine allows user namespaces (no ``pidns``, no Landlock) and
a CUDA MPS daemon serves the GPU (no ``seccomp``); without MPS ``seccomp`` is added."""
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
    code = (EXPLOITS / "tamper_outside_folders.py").read_text()
    return _run(
        code.replace('["__TARGETS__"]', json.dumps([str(p) for p in targets.values()])), sandbox, device, monkeypatch
    )


def _run(code: str, sandbox: str, device: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The exploit's report, from the real evaluator with ``sandbox``'s layers and the static rules off."""
    from ksearch.tools.evaluator import EvalRequest, evaluate

    monkeypatch.setenv("KSEARCH_SANDBOX", sandbox)
    monkeypatch.setattr(policy, "_hidden", [])
    # the static rules would refuse open() before it runs: this is the layer behind them
    monkeypatch.setattr(
        importlib.import_module("ksearch.tools.evaluator.parent.evaluate").integrity,
        "check_source",
        lambda code, **kwargs: None,
    )
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
def test_a_kernel_changes_nothing_outside_its_folders(
    tmp_path: Path, sandbox: str, monkeypatch: pytest.MonkeyPatch
) -> None:
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


class _Listener:
    """A service that records what connects to ``server`` (a bound, listening socket): the exploit's report is not
    trusted."""

    def __init__(self, server: socket.socket) -> None:
        self.server = server
        self.received: list[bytes] = []
        self.closed = False
        server.settimeout(0.1)  # the serving thread looks at ``closed`` this often
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.closed:
            try:
                if self.server.type == socket.SOCK_DGRAM:
                    self.received.append(self.server.recv(100))
                    continue
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                self.received.append(conn.recv(100))

    def received_within(self, seconds: float) -> list[bytes]:
        """What arrived, waiting up to ``seconds`` for a first message (the serving thread may lag the evaluation)."""
        deadline = time.monotonic() + seconds
        while not self.received and time.monotonic() < deadline:
            time.sleep(0.02)
        self.closed = True
        self.server.close()
        return self.received


def _reach(sandbox: str, device: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[bytes]]:
    listener = _Listener(socket.create_server(("127.0.0.1", 0)))
    port = listener.server.getsockname()[1]
    try:
        code = (EXPLOITS / "tamper_loopback_service.py").read_text().replace("PORT = 0", f"PORT = {port}")
        loot = _run(code, sandbox, device, monkeypatch)
    finally:
        received = listener.received_within(1.0)
    return loot, received


def _repository_env() -> dict[str, str]:
    """This environment with the repository's ksearch on the path (for the launcher run directly)."""
    return {**os.environ, "PYTHONPATH": str(Path(ksearch.__file__).resolve().parents[1])}


@linux_only
@pytest.mark.parametrize(("sandbox", "reached"), [(GPU_LAYERS, False), ("userns,mountns,caps", True)])
def test_a_kernel_reaches_no_service_on_the_loopback(
    sandbox: str, reached: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``netns`` nothing connects; without it (the control) the exploit does reach the port."""
    _needs(GPU_LAYERS)
    loot, received = _reach(sandbox, "cpu", monkeypatch)
    assert bool(received) == reached, (loot, received)
    assert ("connected=1" in loot) == reached, loot


@linux_only
def test_root_cannot_change_the_kernels_settings() -> None:
    """uid 0 passes the file modes of ``/proc/sys`` and ``/sys`` without any capability: both are read-only (the red
    team of 2026-11-30 wrote ``core_pattern`` and had the kernel run its helper as root outside every layer). The probe
    writes back the value it read, so a failure changes nothing either."""
    if os.geteuid() != 0:
        pytest.skip("an ordinary user cannot write these files anyway")
    _needs("userns,mountns,caps")
    spec = json.dumps({"layers": ["userns", "mountns", "caps"], "hidden": [], "writable": ["/dev"]})
    script = (
        "for f in /proc/sys/kernel/core_pattern /proc/sys/vm/swappiness; do v=$(cat $f); "
        '(echo "$v" > $f) 2>/dev/null && echo "wrote $f"; done; '
        "for f in /sys/kernel/mm/transparent_hugepage/enabled /sys/fs/cgroup/cgroup.procs; do "
        '[ -e $f ] && touch $f 2>/dev/null && echo "wrote $f"; done; echo end'
    )
    done = subprocess.run(
        [sys.executable, "-P", "-m", "ksearch.tools.containment.launcher", spec, "--", "/bin/sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_repository_env(),
    )
    assert done.stdout.strip() == "end", done.stdout + done.stderr


def _launch(
    layers: list[str], code: str, writable: list[str] = (), devices: str = "all", cuda: bool = False
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` through the launcher with ``layers`` (``devices``: ``minimal_dev``'s choice; ``cuda``: a
    GPU's candidate, for which Landlock leaves ``/proc`` writable)."""
    spec = json.dumps(
        {"layers": layers, "hidden": [], "writable": ["/dev", *writable], "devices": devices, "cuda": cuda}
    )
    return subprocess.run(
        [sys.executable, "-P", "-m", "ksearch.tools.containment.launcher", spec, "--", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_repository_env(),
    )


def _landlock_abi() -> int:
    from ksearch.tools.containment.landlock import abi_version

    return abi_version()


PROC_WRITER = """
import subprocess, sys
def attempt():
    try:
        with open("/proc/self/comm", "w") as f:
            f.write("kernel")
        return "wrote"
    except OSError:
        return "refused"
print(attempt(), end=" ")
if len(sys.argv) == 1:
    print(subprocess.run([sys.executable, "-c", sys.argv[0] if sys.argv[0] != "-c" else CODE, "child"],
                         capture_output=True, text=True).stdout)
"""


@linux_only
@pytest.mark.parametrize("cuda", [True, False], ids=["gpu_candidate", "cpu_candidate"])
def test_landlock_leaves_proc_writable_for_a_gpus_candidate_and_its_children(cuda: bool) -> None:
    """CUDA's start writes beneath its process's ``/proc/PID`` (error 304 under Landlock otherwise, an H200 in session
    29), in every process that starts CUDA: Inductor's compile workers failed with "Could not find an active GPU
    backend" while only the worker's own ``/proc/PID`` was writable. A GPU's candidate (``cuda`` in the spec) and what
    it starts may write there; a CPU's may not."""
    if _landlock_abi() < 1:
        pytest.skip("Landlock is not available in this kernel")
    code = f"CODE = {PROC_WRITER!r}\n" + PROC_WRITER
    done = _launch(["landlock"], code, cuda=cuda)
    expected = "wrote wrote" if cuda else "refused refused"
    assert done.stdout.strip() == expected, done.stdout + done.stderr


def test_a_gpus_candidate_gets_the_minimal_dev_with_nvidia_nodes_and_proc_for_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the parent asks the launcher for: a CPU's candidate the minimal ``/dev``, a GPU's the one that keeps the
    ``nvidia*`` nodes (it ran with CUDA on an H200, 2026-11-30) and ``/proc`` writable under Landlock."""
    monkeypatch.setenv("KSEARCH_SANDBOX", "caps")
    if "caps" not in policy.probe(gpu=True)[0] or "caps" not in policy.probe(gpu=False)[0]:
        pytest.skip("this machine refuses the caps layer")
    for device, devices, cuda in (("cpu", "cpu", False), ("cuda:0", "gpu", True)):
        argv = policy.launcher_prefix(device, [])
        spec = json.loads(argv[argv.index("--") - 1])
        assert (spec["devices"], spec["cuda"]) == (devices, cuda)


@linux_only
@pytest.mark.parametrize(
    ("layers", "reached"),
    [(["userns", "landlock"], False), (["userns", "netns", "landlock"], False), (["userns"], True)],
)
def test_no_abstract_socket_outside_is_reached_with_landlock_or_a_network_namespace(
    layers: list[str], reached: bool
) -> None:
    """Landlock's abstract-socket scope where the candidate shares the network namespace, the namespace itself where
    it has one (the scope is then left out: CUDA's start failed under a domain with it); the control reaches the
    listener. What arrived is read here."""
    _needs(",".join(layers))
    if "landlock" in layers and _landlock_abi() < 6:
        pytest.skip("Landlock's scopes need ABI 6 (Linux 6.12)")
    name = f"ksearch-test-{secrets.token_hex(6)}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen()
    listener = _Listener(server)
    code = (
        "import socket\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        f"try:\n    s.connect('\\0{name}'); s.sendall(b'hello')\nexcept OSError as e:\n    print(e)"
    )
    try:
        done = _launch(layers, code)
    finally:
        received = listener.received_within(1.0)
    assert done.returncode == 0, done.stderr
    assert bool(received) == reached, (received, done.stdout)


@linux_only
@pytest.mark.parametrize(
    ("layers", "survives"), [(GPU_LAYERS.split(",") + ["landlock"], True), (GPU_LAYERS.split(","), False)]
)
def test_without_a_pid_namespace_only_landlock_keeps_signals_from_processes_outside(
    layers: list[str], survives: bool
) -> None:
    """A GPU's layers have no PID namespace: a kernel can kill any process of its user outside (the red team of
    2026-11-30). Landlock's signal scope stops that (on the CPU here; whether CUDA starts under it is for a GPU to
    show)."""
    _needs(",".join(layers))
    if "landlock" in layers and _landlock_abi() < 6:
        pytest.skip("Landlock's signal scope needs ABI 6 (Linux 6.12)")
    outside = subprocess.Popen(["/bin/sleep", "30"])
    try:
        done = _launch(
            layers,
            f"import os, signal\ntry:\n    os.kill({outside.pid}, signal.SIGKILL)\nexcept OSError as e:\n    print(e)",
        )
        assert done.returncode == 0, done.stderr
        time.sleep(0.2)
        assert (outside.poll() is None) == survives, done.stdout
    finally:
        outside.kill()
        outside.wait(timeout=10)


@linux_only
@pytest.mark.parametrize(
    ("layers", "reached"), [(GPU_LAYERS.split(",") + ["landlock"], False), (GPU_LAYERS.split(","), True)]
)
def test_a_named_pipe_outside_is_written_only_without_landlock(
    tmp_path: Path, layers: list[str], reached: bool
) -> None:
    """A read-only mount does not stop writing into a named pipe on it (the red team of 2026-11-30): a GPU's layers let
    the kernel write to a same-user program reading one; Landlock's file rules do not. Read here, not reported."""
    _needs(",".join(layers))
    fifo = tmp_path / "commands"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        done = _launch(
            layers,
            f"import os\ntry:\n    fd = os.open({str(fifo)!r}, os.O_WRONLY | os.O_NONBLOCK)\n"
            "    os.write(fd, b'from a kernel')\nexcept OSError as e:\n    print(e)",
        )
        assert done.returncode == 0, done.stderr
        try:
            arrived = os.read(reader, 100)
        except BlockingIOError:
            arrived = b""
    finally:
        os.close(reader)
    assert (arrived == b"from a kernel") == reached, (arrived, done.stdout)


def _openable(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))
        return True
    except OSError:
        return False


def _machine_devices() -> list[str]:
    """Device nodes of this machine beyond what a kernel needs that this process can open: block devices (a raw disk
    holds every file a hidden path hides), loop control, KVM, the consoles, vsock."""
    found = ["/dev/loop-control", "/dev/kvm", "/dev/tty1", "/dev/vsock"]
    for root, _dirs, files in os.walk("/dev"):
        for name in files:
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                if stat.S_ISBLK(os.stat(path).st_mode):
                    found.append(path)
    return [path for path in found if _openable(path)]


@linux_only
@pytest.mark.parametrize(("devices", "opened"), [("cpu", False), ("all", True)])
def test_a_root_kernel_opens_none_of_the_machines_devices_with_the_minimal_dev(devices: str, opened: bool) -> None:
    """Without capabilities uid 0 still passes the file modes of device nodes (a disk's root:disk 0660, loop control,
    KVM, a console): with the machine's ``/dev`` (the control) the kernel opens them, with the minimal one none is
    there, and what it needs (``/dev/null``, ``/dev/shm``, ``/dev/urandom``) works."""
    _needs("userns,mountns,caps")
    machine = _machine_devices()
    if not machine:
        pytest.skip("this process opens none of the machine's devices (not root, or a device cgroup)")
    code = (
        f"import os\nopened = []\nfor path in {machine!r}:\n    try:\n"
        "        os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))\n        opened.append(path)\n"
        "    except OSError:\n        pass\nprint(opened)\nwith open('/dev/null', 'w') as f:\n    f.write('x')\n"
        "print(len(os.urandom(8)), sorted(os.listdir('/dev')))\nmaster, slave = os.openpty()\n"
        "print(os.ttyname(slave))\ntry:\n    os.utime('/dev/null', (1, 1))\nexcept OSError as e:\n"
        "    print(e)"
    )
    before = os.stat("/dev/null")
    try:
        done = _launch(["userns", "mountns", "caps"], code, devices=devices)
        changed = os.stat("/dev/null").st_mtime != before.st_mtime
    finally:
        os.utime("/dev/null", ns=(before.st_atime_ns, before.st_mtime_ns))
    assert done.returncode == 0, done.stderr
    inside, listing, pty = done.stdout.splitlines()[:3]
    assert (inside != "[]") == opened, done.stdout
    assert changed == opened, "the machine's /dev/null changed from inside: its node is the host's"
    assert pty.startswith("/dev/pts/"), done.stdout
    if devices == "cpu":
        assert listing.startswith("8 ") and "'null'" in listing and "'shm'" in listing, listing


@linux_only
@pytest.mark.parametrize(
    ("layers", "reached"), [(["userns", "mountns", "ipcns", "caps"], False), (["userns", "mountns", "caps"], True)]
)
def test_an_mqueue_mount_does_not_open_the_hosts_queues_by_path(
    tmp_path: Path, layers: list[str], reached: bool
) -> None:
    """A file on an mqueue file system is the queue itself, whatever the IPC namespace (the red team of 2026-11-30,
    through systemd's /dev/mqueue): ``ipcns`` in the candidate's mount namespace covers every mqueue mount. The
    control, without it, sends into this process's queue by the file; what arrived is read here."""
    _needs(",".join(layers))
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "mq_open"):
        pytest.skip("this C library keeps POSIX message queues elsewhere (glibc before 2.34: librt)")
    libc.mq_open.restype = ctypes.c_int
    mqueue = tmp_path / "mq"
    mqueue.mkdir()
    if libc.mount(b"none", os.fsencode(mqueue), b"mqueue", 0, None) != 0:
        pytest.skip(f"cannot mount an mqueue file system here (errno {ctypes.get_errno()})")
    name = f"/ksearch-test-{secrets.token_hex(4)}"
    queue = libc.mq_open(name.encode(), os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o600, None)
    try:
        assert queue >= 0, f"mq_open failed: errno {ctypes.get_errno()}"
        code = (
            f"import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\ntry:\n"
            f"    fd = os.open({str(mqueue) + name!r}, os.O_WRONLY)\n"
            "    print(libc.mq_send(fd, b'from a kernel', 13, 0))\nexcept OSError as e:\n    print(e)"
        )
        done = _launch(layers, code, writable=[str(tmp_path)])
        buffer = ctypes.create_string_buffer(8192)
        arrived = libc.mq_receive(queue, buffer, 8192, None)
    finally:
        if queue >= 0:
            libc.mq_close(queue)
        libc.mq_unlink(name.encode())
        libc.umount2(os.fsencode(mqueue), 2)  # MNT_DETACH
    assert done.returncode == 0, done.stderr
    assert (arrived > 0) == reached, (arrived, done.stdout)


@linux_only
@pytest.mark.gpu
def test_a_kernel_on_a_gpu_changes_nothing_and_reaches_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _needs("mountns,netns", gpu=True)
    targets = _targets(tmp_path)
    try:
        loot = _tamper(targets, "auto", "cuda", monkeypatch)
    finally:
        changed = _unchanged(targets)
    assert changed == [], f"{changed} changed: {loot}"
    assert "own=1 changed=0" in loot, loot
    loot, received = _reach("auto", "cuda", monkeypatch)
    assert received == [] and "connected=0" in loot, loot
    assert {"mountns", "netns"} <= set(policy.child_layers("cuda"))


@linux_only
@pytest.mark.gpu
def test_a_kernel_on_a_gpu_runs_under_seccomp_and_reaches_no_service_on_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CUDA starts under ``seccomp`` (``auto`` on a GPU without MPS) and the Unix-socket exploit connects to nothing;
    its pid-hopping daemon is gone after the evaluation."""
    monkeypatch.delenv(policy.MPS_PIPE_VARIABLE, raising=False)
    monkeypatch.setattr(policy, "MPS_DEFAULT_PIPE", str(tmp_path / "no-mps"))
    _needs(GPU_LAYERS + ",seccomp", gpu=True)
    assert "seccomp" in policy.child_layers("cuda")
    loot, connected, sent = _reach_paths(tmp_path, "auto", "cuda", monkeypatch)
    assert connected == [] and sent == [], (loot, connected, sent)
    pid_file = _heartbeat_file(tmp_path, "hopper", monkeypatch)
    code = (EXPLOITS / "tamper_pid_hopper.py").read_text().replace("__PID_FILE__", str(pid_file))
    try:
        assert "hopper started" in _run(code, "auto", "cuda", monkeypatch)
        time.sleep(4.0)
        assert not pid_file.exists(), pid_file.read_text()
    finally:
        _end_daemon(pid_file)


def test_auto_withholds_seccomp_on_a_gpu_served_by_mps_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CUDA client reaches an MPS daemon through a Unix socket, which ``seccomp`` refuses: where the daemon's
    control socket exists (``CUDA_MPS_PIPE_DIRECTORY`` or the default folder), ``auto`` on a GPU leaves it out and
    the evaluation's record says why; the CPU keeps it."""
    pipe = tmp_path / "mps"
    pipe.mkdir()
    monkeypatch.delenv("KSEARCH_SANDBOX", raising=False)
    monkeypatch.setattr(policy, "MPS_DEFAULT_PIPE", str(tmp_path / "no-mps"))
    monkeypatch.setenv(policy.MPS_PIPE_VARIABLE, str(pipe))
    assert policy.gpu_withheld() == {}  # every other layer has run with CUDA (an H200, 2026-11-30)
    (pipe / "control").touch()
    assert "seccomp" in policy.gpu_withheld()
    available = set(policy.probe(gpu=True)[0])
    assert "seccomp" not in policy.child_layers("cuda")
    if "seccomp" in available:
        assert "MPS" in policy.record("cuda").get("sandbox_missing", "")
    if "seccomp" in policy.probe(gpu=False)[0]:
        assert "seccomp" in policy.child_layers("cpu")
    monkeypatch.delenv(policy.MPS_PIPE_VARIABLE)
    assert "seccomp" not in policy.gpu_withheld()
    assert ("seccomp" in policy.child_layers("cuda")) == ("seccomp" in available)


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
from ksearch.tools.containment import mounts, namespaces
namespaces.enter_namespaces(False)
mounts.private_mounts([{str(hidden)!r}, {str(outside)!r}], [{str(own)!r}, "/dev"], new_namespace=True,
                      setattr_call={setattr_call})
def attempt(step):
    try:
        return step()
    except OSError as exc:
        return type(exc).__name__
print(attempt(lambda: open({str(own / "w")!r}, "w").write("ok")))
print(attempt(lambda: open({str(tmp_path / "new")!r}, "w").write("no")))
print(attempt(lambda: os.listdir({str(hidden)!r})))
print(attempt(lambda: open({str(outside)!r}).read()))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False, env=_repository_env()
    )
    assert done.returncode == 0, done.stderr
    wrote, created, listing, read = done.stdout.split("\n")[:4]
    assert (wrote, created, read) == ("2", "OSError", ""), done.stdout
    assert listing in ("[]", "PermissionError"), done.stdout  # empty, or closed to a process without capabilities
    assert not (tmp_path / "new").exists() and (own / "w").read_text() == "ok"


def test_mount_points_are_read_with_their_escapes() -> None:
    info = (
        b"22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        b"30 22 0:25 / /mnt/with\\040space rw - tmpfs tmpfs rw\n"
        b"31 22 0:26 / /dev/shm rw - tmpfs tmpfs rw\n"
    )
    assert mount_points(info) == [b"/", b"/mnt/with space", b"/dev/shm"]
    assert beneath_any(b"/dev/shm", [b"/dev"]) and beneath_any(b"/dev", [b"/dev"])
    assert not beneath_any(b"/devices", [b"/dev"]) and not beneath_any(b"/", [b"/dev"])


def _heartbeat_file(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where a daemon the exploit leaves writes its pid and heartbeat, for the test to read: a folder a candidate may
    write to and this process can see (the developer's statistics folder, ``KSEARCH_PROFILE``; a candidate's
    ``/dev/shm`` is its own)."""
    folder = tmp_path / "heartbeats"
    folder.mkdir(exist_ok=True)
    monkeypatch.setenv("KSEARCH_PROFILE", str(folder))
    return folder / f"{name}-{secrets.token_hex(6)}"


def _end_daemon(pid_file: Path) -> None:
    """Kill the daemon whose pid ``pid_file`` holds, if it lives, and remove the file."""
    if pid_file.exists():
        pid = int(pid_file.read_text().split()[0])
        if _alive(pid):
            os.kill(pid, 9)
        pid_file.unlink()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


@linux_only
@pytest.mark.parametrize(("sandbox", "lingers"), [(GPU_LAYERS, False), ("off", True)])
def test_no_process_of_a_candidate_outlives_its_evaluation(
    tmp_path: Path, sandbox: str, lingers: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a PID namespace (a GPU's layers) a daemon leaves the worker's process group: the parent kills it by
    the worker's user namespace. The control, without containment: the same daemon does outlive the evaluation
    (and is killed here)."""
    if sandbox != "off":
        _needs(sandbox)
    pid_file = _heartbeat_file(tmp_path, "daemon", monkeypatch)
    code = (EXPLOITS / "tamper_lingering_daemon.py").read_text().replace("__PID_FILE__", str(pid_file))
    try:
        loot = _run(code, sandbox, "cpu", monkeypatch)
        assert "daemon started" in loot
        pid = int(pid_file.read_text().split()[0])
        assert _alive(pid) == lingers, (pid, loot)
    finally:
        _end_daemon(pid_file)


def _contained_sleeper() -> subprocess.Popen[bytes]:
    spec = json.dumps({"layers": ["userns"], "hidden": [], "writable": []})
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "ksearch.tools.containment.launcher", spec, "--", "/bin/sleep", "30"],
        start_new_session=True,
        env=_repository_env(),
    )


@linux_only
def test_a_held_namespace_is_never_mistaken_for_a_later_one() -> None:
    """The parent holds each worker's user namespace open: its number cannot pass to the next worker's, so the kill
    by namespace (which runs again when a worker is retired) never reaches another worker."""
    from ksearch.tools.evaluator.shared.sandbox import UserNamespace, kill_user_namespace

    _needs("userns")
    assert UserNamespace.of(os.getpid()) is None  # never this process's own

    def namespace_of(process: subprocess.Popen[bytes]) -> UserNamespace:
        for _ in range(500):
            held = UserNamespace.of(process.pid)
            if held is not None:
                return held
            time.sleep(0.01)
        raise AssertionError("the launcher never entered its namespace")

    first = _contained_sleeper()
    held = namespace_of(first)
    assert kill_user_namespace(held) >= 1
    first.wait(timeout=10)
    second = _contained_sleeper()
    try:
        assert namespace_of(second).identity != held.identity
        assert kill_user_namespace(held) == 0 and second.poll() is None
    finally:
        second.kill()
        second.wait(timeout=10)


def _reach_paths(
    tmp_path: Path, sandbox: str, device: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, list[bytes], list[bytes]]:
    """The Unix-socket exploit's report, and what reached the test's stream service and datagram socket."""
    stream_path, datagram_path = tmp_path / "svc.sock", tmp_path / "log.sock"
    stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stream.bind(str(stream_path))
    stream.listen()
    datagrams = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    datagrams.bind(str(datagram_path))
    listeners = _Listener(stream), _Listener(datagrams)
    try:
        code = (EXPLOITS / "tamper_unix_socket.py").read_text()
        code = code.replace("__SOCKET_PATH__", str(stream_path)).replace("__DATAGRAM_PATH__", str(datagram_path))
        loot = _run(code, sandbox, device, monkeypatch)
    finally:
        connected, sent = (listener.received_within(1.0) for listener in listeners)
    return loot, connected, sent


@linux_only
@pytest.mark.parametrize(("sandbox", "reached"), [(GPU_LAYERS + ",seccomp", False), (GPU_LAYERS, True)])
def test_a_kernel_reaches_no_service_listening_on_a_path(
    tmp_path: Path, sandbox: str, reached: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Namespaces do not stop a connection or a datagram to a socket on a path the kernel can see (the control
    reaches both); ``seccomp`` does, while the kernel may still create Unix sockets (CUDA's start needs one). The
    sockets' folder is put on the file layer's allow-list (a service in a system folder, say): the mount layer's fence
    over ``/tmp`` would hide them otherwise."""
    _needs(sandbox)
    monkeypatch.setenv(allowlist.ALLOW_VARIABLE, str(tmp_path))
    loot, connected, sent = _reach_paths(tmp_path, sandbox, "cpu", monkeypatch)
    assert bool(connected) == reached and bool(sent) == reached, (loot, connected, sent)
    if not reached:
        assert "connected=0" in loot and "sent=0" in loot and "No such file" in loot, loot


def _queue(libc: ctypes.CDLL) -> int:
    """A new System V message queue of this process's (IPC_PRIVATE, IPC_CREAT, mode 600): its id."""
    queue = libc.msgget(0, 0o1000 | 0o600)
    assert queue >= 0, f"msgget failed: errno {ctypes.get_errno()}"
    return queue


@linux_only
@pytest.mark.parametrize(("sandbox", "reached"), [(GPU_LAYERS + ",ipcns", False), (GPU_LAYERS, True)])
def test_a_kernel_reaches_no_system_v_queue_outside(
    sandbox: str, reached: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an IPC namespace (the control) the exploit's message lands in this process's queue; with ``ipcns``
    the queue's id names nothing in the candidate's namespace. What arrived is read here, not from its report."""
    _needs(sandbox)
    libc = ctypes.CDLL(None, use_errno=True)
    queue = _queue(libc)
    buffer = ctypes.create_string_buffer(ctypes.sizeof(ctypes.c_long) + 32)
    try:
        code = (EXPLOITS / "tamper_sysv_queue.py").read_text().replace("QUEUE_ID = -1", f"QUEUE_ID = {queue}")
        loot = _run(code, sandbox, "cpu", monkeypatch)
        arrived = libc.msgrcv(queue, buffer, 32, 0, 0o4000)  # IPC_NOWAIT: -1 when the queue is empty
    finally:
        libc.msgctl(queue, 0, None)  # IPC_RMID
    assert (arrived > 0) == reached, (loot, arrived)
    if reached:
        assert b"a message from a kernel" in buffer.raw


@linux_only
def test_a_pid_hopping_daemon_does_not_outlive_its_evaluation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = GPU_LAYERS + ",seccomp"
    _needs(sandbox)
    pid_file = _heartbeat_file(tmp_path, "hopper", monkeypatch)
    code = (EXPLOITS / "tamper_pid_hopper.py").read_text().replace("__PID_FILE__", str(pid_file))
    try:
        loot = _run(code, sandbox, "cpu", monkeypatch)
        assert "hopper started" in loot
        time.sleep(4.0)  # past its hopping: a survivor would be writing its heartbeat by now
        assert not pid_file.exists(), pid_file.read_text()
    finally:
        _end_daemon(pid_file)


def test_the_seccomp_filter_is_well_formed() -> None:
    """Every jump lands inside the program and every path ends in a return, for each architecture it knows."""
    from ksearch.tools.containment.seccomp import RET, SECCOMP_SYSCALLS, seccomp_program
    from ksearch.tools.containment.syscalls import LayerError

    for machine in SECCOMP_SYSCALLS:
        program = seccomp_program(machine)
        assert program[-1][0] == RET
        for index, (code, jt, jf, _k) in enumerate(program):
            if code & 0x07 == 0x05:  # a jump
                assert index + 1 + max(jt, jf) < len(program)
    with pytest.raises(LayerError, match="no system-call table"):
        seccomp_program("riscv64")


def _filter(program: list[tuple[int, int, int, int]], data: bytes) -> int:
    """A classic-BPF interpreter for the instructions the filter uses: its return value for ``struct seccomp_data``."""
    accumulator, index = 0, 0
    while True:
        code, jt, jf, k = program[index]
        if code == 0x20:  # LD | W | ABS
            accumulator = int.from_bytes(data[k : k + 4], "little")
        elif code == 0x06:  # RET | K
            return k
        elif code in (0x15, 0x35):  # JEQ | K, JGE | K
            taken = accumulator == k if code == 0x15 else accumulator >= k
            index += jt if taken else jf
        else:
            raise AssertionError(f"an instruction this interpreter does not know: {code:#x}")
        index += 1


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_seccomp_filter_answers_each_call_as_documented(machine: str) -> None:
    """The filter run on made-up calls: what each returns, for every architecture it knows."""
    from ksearch.tools.containment.seccomp import RET_ALLOW, RET_ERRNO, SECCOMP_SYSCALLS, seccomp_program

    program = seccomp_program(machine)
    (setsid, setpgid, connect, sendto, io_uring), arch, x32 = SECCOMP_SYSCALLS[machine]
    socket_call = {"x86_64": 41, "aarch64": 198}[machine]

    def call(nr: int, *args: int, audit_arch: int = arch) -> int:
        words = [*args, *[0] * (6 - len(args))]
        data = nr.to_bytes(4, "little") + audit_arch.to_bytes(4, "little") + bytes(8)
        return _filter(program, data + b"".join(w.to_bytes(8, "little") for w in words))

    enoent, eperm = RET_ERRNO | 2, RET_ERRNO | 1
    assert call(setsid) == call(setpgid, 0, 0) == RET_ERRNO, "no effect, no error"
    assert call(connect, 3, 0x7FFF_0000_1000, 110) == enoent, "as if nothing listened there"
    assert call(sendto, 3, 0x1000, 5, 0, 0x7FFF_0000_2000, 110) == enoent, "a datagram to an address"
    assert call(sendto, 3, 0x1000, 5, 0, 0x1_0000_0000, 110) == enoent, "an address in the high word only"
    assert call(sendto, 3, 0x1000, 5, 0, 0, 0) == RET_ALLOW, "a connected socket's send"
    assert call(socket_call, socket.AF_UNIX, socket.SOCK_STREAM) == RET_ALLOW, "CUDA's start makes one"
    assert call(io_uring, 8, 0) == eperm
    assert call(0) == RET_ALLOW  # read
    assert call(connect, audit_arch=0x40000003) == eperm, "another architecture's numbers"
    if x32:
        assert call(0x40000000 + connect) == eperm, "x32's numbers"


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_seccomp_filter_lets_connect_through_only_when_asked(machine: str) -> None:
    """Nsight Compute's rung (``connect`` in the spec: beside the network and mount namespaces) lets ``connect`` and
    ``sendto`` to an address pass; everything else is answered as for a candidate."""
    from ksearch.tools.containment.seccomp import RET_ALLOW, RET_ERRNO, SECCOMP_SYSCALLS, seccomp_program

    program = seccomp_program(machine, refuse_connect=False)
    (setsid, setpgid, connect, sendto, io_uring), arch, _x32 = SECCOMP_SYSCALLS[machine]

    def call(nr: int, *args: int) -> int:
        words = [*args, *[0] * (6 - len(args))]
        data = nr.to_bytes(4, "little") + arch.to_bytes(4, "little") + bytes(8)
        return _filter(program, data + b"".join(w.to_bytes(8, "little") for w in words))

    assert call(connect, 3, 0x7FFF_0000_1000, 110) == RET_ALLOW
    assert call(sendto, 3, 0x1000, 5, 0, 0x7FFF_0000_2000, 110) == RET_ALLOW
    assert call(setsid) == call(setpgid, 0, 0) == RET_ERRNO, "still no effect, no error"
    assert call(io_uring, 8, 0) == RET_ERRNO | 1
    refusing = seccomp_program(machine)
    assert len(refusing) > len(program) and seccomp_program(machine, refuse_connect=True) == refusing
