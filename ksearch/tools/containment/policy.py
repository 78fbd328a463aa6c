"""The parent's side of containment: which layers a candidate process gets here, the paths it may not read, and the
record of what was active.

``KSEARCH_SANDBOX`` chooses: ``auto`` (the default: every layer this machine allows, found by one probe per process
and device kind), ``off`` (none: the scrubbed environment and private folders only), or a comma list of layers
(exactly those; one that this machine refuses is an error that says why). Layers (``launcher`` says what each does):
``userns``, ``pidns``, ``mountns``, ``netns``, ``ipcns``, ``caps``, ``landlock``, ``seccomp`` for the candidate's
process, and ``nondumpable`` for the process that starts candidates (the agent, a Dask worker): with it, no process
of another privilege or of another user namespace can read its memory, environment or open files.

``pidns`` is left out of ``auto`` on a GPU: legacy CUDA IPC handles cannot be opened across PID namespaces, and the
checker shares its output buffer with the worker through one (the evaluator would fall back to host memory, slower).
Every other layer runs with CUDA (an H200, 2026-11-30): Landlock there leaves ``/proc`` writable (CUDA's start writes
beneath its process's entry, in every process that starts it) and, beside ``netns``, leaves abstract sockets to the
network namespace; ``mountns`` gives a GPU's candidate a minimal ``/dev`` with the ``nvidia*`` nodes. ``seccomp`` is
withheld where a CUDA MPS daemon serves the GPU (``gpu_withheld``).

Paths hidden from candidates (``landlock``, ``mountns``): every workspace this process opened (``hide``), the
credential files and folders of the user's home (``HOME_SECRETS``), and ``KSEARCH_SANDBOX_HIDE`` (a ``:``-separated
list). A path that holds something the worker needs (the Python installation, ksearch, its own folder) is never
hidden (``exposed_paths``: the evaluation's record names it).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import ksearch
from ksearch import settings
from ksearch.errors import KsearchError
from ksearch.tools.containment import allowlist, limits
from ksearch.tools.containment.syscalls import PR_SET_DUMPABLE

VARIABLE = settings.SANDBOX.name
CHILD_LAYERS = ("limits", "userns", "pidns", "mountns", "netns", "ipcns", "caps", "landlock", "seccomp")
LAYERS = (*CHILD_LAYERS, "nondumpable")
HOME_SECRETS = (
    ".ssh",
    ".aws",
    ".azure",
    ".config",
    ".netrc",
    ".git-credentials",
    ".docker",
    ".kube",
    ".gnupg",
    ".pypirc",
    ".npmrc",
    ".env",
    ".bashrc",
    ".bash_profile",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".cache/huggingface",
    ".huggingface",
    ".local/share/keyrings",
    ".local/state/ksearch",
    ".password-store",
    ".ksearch",
    ".codex",
    ".claude",
    ".claude.json",
    ".pgpass",
    ".vault-token",
    ".kaggle",
    ".terraform.d",
)
"""Where a home directory keeps keys and tokens (shell start-up files often export API keys). With Landlock the home
is not on the allow-list at all (``allowlist``); this list is what the mount layer covers where the home holds a path
a worker needs (a virtual environment), and what it covers where Landlock is missing."""
WORKING_FOLDER_SECRETS = (".env", ".envrc")
"""Files of the working folder that often export keys (``direnv``'s ``.envrc``, ``.env``)."""

_lock = threading.Lock()
_probed: dict[bool, tuple[tuple[str, ...], dict[str, str]]] = {}
_hidden: list[str] = []
_parent_protected = False


class SandboxError(KsearchError):
    """The containment asked for by ``KSEARCH_SANDBOX`` is not available here."""

    hint = f"unset {VARIABLE} (or set it to auto) to use what this machine allows, or to off to run without"


def hide(path: Path | str) -> None:
    """Hide ``path`` (a workspace, say) from every candidate process started from now on."""
    resolved = os.path.realpath(path)
    with _lock:
        if resolved not in _hidden:
            _hidden.append(resolved)


def requested() -> tuple[str, ...] | None:
    """The layers asked for: None for ``auto``, () for ``off``, else the listed layers."""
    value = settings.SANDBOX.raw().strip().lower()
    if value in ("", "auto"):
        return None
    if value in ("off", "0", "none"):
        return ()
    layers = tuple(part.strip() for part in value.split(",") if part.strip())
    unknown = [layer for layer in layers if layer not in LAYERS]
    if unknown:
        raise SandboxError(
            f"{VARIABLE}={value!r} names unknown layers {unknown}; known: {', '.join(LAYERS)}, or auto/off"
        )
    return layers


def launcher_argv(spec: dict, *, probe: bool = False) -> list[str]:
    return [
        sys.executable,
        "-P",
        "-m",
        "ksearch.tools.containment.launcher",
        *(["--probe"] if probe else []),
        json.dumps(spec),
        "--",
    ]


GPU_REFUSED = {
    "pidns": "not on a GPU: CUDA IPC handles cannot cross PID namespaces",
}
"""Layers a candidate on a GPU never gets by default, and why (``KSEARCH_SANDBOX`` naming one is refused there)."""
MPS_PIPE_VARIABLE = "CUDA_MPS_PIPE_DIRECTORY"
MPS_DEFAULT_PIPE = "/tmp/nvidia-mps"
"""Where a CUDA MPS control daemon keeps its named pipes and Unix sockets (NVIDIA's MPS documentation)."""


def gpu_withheld() -> dict[str, str]:
    """Layers ``auto`` leaves out on a GPU here, and why (``KSEARCH_SANDBOX`` may still name them). ``seccomp`` runs
    with CUDA (an H200, 2026-11-30) but refuses ``connect``, through which a CUDA client reaches an MPS daemon's Unix
    socket: where one serves the GPU a candidate would lose it (or, in exclusive-process mode, the GPU)."""
    withheld: dict[str, str] = {}
    pipe = Path(os.environ.get(MPS_PIPE_VARIABLE) or MPS_DEFAULT_PIPE)
    if (pipe / "control").exists():
        withheld["seccomp"] = (
            f"a CUDA MPS daemon serves the GPUs here ({pipe}), and its clients connect to its "
            f"Unix socket, which seccomp refuses: name it in {VARIABLE} to use it without MPS"
        )
    return withheld


def probe(gpu: bool) -> tuple[tuple[str, ...], dict[str, str]]:
    """The child layers that work here (run once per process and device kind), and why the others do not."""
    with _lock:
        if gpu in _probed:
            return _probed[gpu]
    wanted = [layer for layer in CHILD_LAYERS if not (gpu and layer in GPU_REFUSED)]
    skipped = dict(GPU_REFUSED) if gpu else {}
    if not sys.platform.startswith("linux"):
        result: tuple[tuple[str, ...], dict[str, str]] = ((), {layer: "Linux only" for layer in wanted})
    else:
        result = _run_probe(wanted)
        result = (result[0], {**skipped, **result[1]})
    with _lock:
        _probed[gpu] = result
    return result


def _run_probe(wanted: list[str]) -> tuple[tuple[str, ...], dict[str, str]]:
    package_root = str(Path(ksearch.__file__).resolve().parent.parent)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": package_root, settings.PARENT_PID.name: str(os.getpid())}
    try:
        done = subprocess.run(
            launcher_argv({"layers": wanted, "hidden": [], "writable": []}, probe=True),
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            start_new_session=True,
        )
        report = json.loads(done.stdout.strip().splitlines()[-1])
        applied = tuple(layer for layer in wanted if layer in report["applied"])
        return applied, {str(k): str(v) for k, v in report["failed"].items()}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, KeyError) as exc:
        return (), {layer: f"the probe failed: {exc}"[:200] for layer in wanted}


def child_layers(device: str) -> tuple[str, ...]:
    """The layers every candidate process on ``device`` gets; ``SandboxError`` when one asked for is refused here."""
    asked = requested()
    if asked == ():
        return ()
    available, failed = probe(device != "cpu")
    if asked is None:
        withheld = gpu_withheld() if device != "cpu" else {}
        return tuple(layer for layer in available if layer not in withheld)
    missing = [layer for layer in asked if layer in CHILD_LAYERS and layer not in available]
    if missing:
        reasons = "; ".join(f"{layer}: {failed.get(layer, 'not available')}" for layer in missing)
        raise SandboxError(f"{VARIABLE} asks for {', '.join(missing)}, which this machine refuses ({reasons})")
    return tuple(layer for layer in CHILD_LAYERS if layer in asked)


def parent_layers() -> tuple[str, ...]:
    asked = requested()
    return ("nondumpable",) if asked is None or "nondumpable" in asked else ()


def protect_parent() -> bool:
    """Make this process (which holds the keys and starts candidates) non-dumpable, once; whether it is."""
    global _parent_protected
    if _parent_protected:
        return True
    if "nondumpable" not in parent_layers() or not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    _parent_protected = libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    return _parent_protected


def needed_paths() -> list[str]:
    """What a worker must keep reading: the Python installation, ksearch itself, task data and the CUDA toolkit."""
    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        str(Path(ksearch.__file__).resolve().parent),
    }
    paths |= {os.environ[v] for v in allowlist.TASK_DATA_VARIABLES if os.environ.get(v)}
    return [os.path.realpath(p) for p in paths if p]


def hidden_paths(keep: list[str]) -> list[str]:
    """The paths hidden from a candidate: registered workspaces, the home's secrets, ``KSEARCH_SANDBOX_HIDE``; none
    that holds (or is) a path in ``keep`` or ``needed_paths()`` (``exposed_paths`` names those)."""
    return _sort_hideable(keep)[0]


def exposed_paths() -> list[str]:
    """The paths asked to be hidden that cannot be, since they hold what a worker needs (a workspace that holds the
    Python installation or ksearch, say): a candidate can read them. Recorded with every evaluation."""
    return _sort_hideable([])[1]


def _sort_hideable(keep: list[str]) -> tuple[list[str], list[str]]:
    home = os.path.expanduser("~")
    candidates = [*_hidden, *(os.path.join(home, name) for name in HOME_SECRETS)]
    candidates += [os.path.join(os.getcwd(), name) for name in WORKING_FOLDER_SECRETS]
    candidates += list(allowlist.SYSTEM_SECRETS)
    candidates += [str(p) for p in settings.SANDBOX_HIDE.paths()]
    needed = [os.path.realpath(p) for p in (*keep, *needed_paths())]
    hidden: list[str] = []
    exposed: list[str] = []
    for path in candidates:
        resolved = os.path.realpath(path)
        if not os.path.exists(resolved) or resolved in hidden or resolved in exposed or resolved == "/":
            continue
        if any(n == resolved or n.startswith(resolved.rstrip("/") + "/") for n in needed):
            exposed.append(resolved)
            continue
        hidden.append(resolved)
    return hidden, exposed


@dataclass(frozen=True)
class Openings:
    """What a trusted tool run inside a candidate's layers needs opened there: Nsight Compute starts the candidate's
    process and talks to its own library in it (``ksearch.tools.counters``). Each opening reaches nothing outside the
    sandbox where the layer it names is active; the counters' ladder asks for each only beside that layer."""

    network: bool = False
    """Landlock leaves TCP and abstract Unix sockets alone (with ``netns``: the sandbox's own loopback and sockets)."""
    loopback: bool = False
    """The network namespace's loopback interface is up (the namespace's own)."""
    connect: bool = False
    """seccomp lets ``connect`` and ``sendto`` through (with ``netns`` and ``mountns``: no listener outside the
    sandbox is in reach, neither on the network nor on a path)."""
    readable: tuple[str, ...] = ()
    """More paths it may read: the tool's installation, a report it reads."""
    tool: bool = False
    """The program is the tool, which starts the worker as its child (the worker names no parent to die with)."""


def launcher_prefix(
    device: str,
    writable: list[Path],
    *,
    layers: tuple[str, ...] | None = None,
    openings: Openings | None = None,
    shm_keep: list[Path] | None = None,
) -> list[str]:
    """The command that starts a candidate process inside its layers ([] when there are none): this machine's
    (``child_layers``) unless ``layers`` names them; ``openings``: what a trusted tool run inside with it needs
    (``Openings``). With ``mountns`` and ``shm_keep``, a ``/dev/shm`` of its own holding only those folders of the
    machine's (its staging folder). The file layer reads the allow-list only (``allowlist``)."""
    spec = launcher_spec(device, writable, layers=layers, openings=openings, shm_keep=shm_keep)
    return launcher_argv(spec) if spec is not None else []


def launcher_spec(
    device: str,
    writable: list[Path],
    *,
    layers: tuple[str, ...] | None = None,
    openings: Openings | None = None,
    shm_keep: list[Path] | None = None,
) -> dict | None:
    """What ``launcher_prefix`` hands the launcher (``launcher.apply`` reads it); None when there are no layers. The
    fork server applies it in the process it forks (``evaluator.shared.fork_server``)."""
    layers = child_layers(device) if layers is None else layers
    if not layers:
        return None
    opened = openings or Openings()
    keep = [str(p) for p in writable]
    profile = settings.PROFILE.raw()
    if profile:
        keep.append(profile)
    hidden = hidden_paths(keep)
    if "landlock" in layers and not environ_protected(layers):
        hidden += [f"/proc/{pid}" for pid in ancestors()]
    devices = "cpu" if device == "cpu" else "gpu"  # the GPU's adds nvidia* (ran with CUDA on an H200, 2026-11-30)
    readable, listable = allowlist.readable(opened.readable)
    candidate_limits = limits.for_device(device)
    shm = {"size": candidate_limits.memory, "keep": [os.path.realpath(p) for p in shm_keep or []]}
    spec = {
        "layers": list(layers),
        "hidden": hidden,
        "writable": [*keep, "/dev"],
        "readable": readable,
        "listable": listable,
        "fenced": allowlist.fenced(),
        "devices": devices,
        "cuda": device != "cpu",
        "ip_sockets": device != "cpu",
        "limits": candidate_limits._asdict(),
        **({"shm": shm} if shm_keep is not None else {}),
        **{name: True for name in ("network", "loopback", "connect", "tool") if getattr(opened, name)},
    }
    return spec


def environ_protected(layers: tuple[str, ...]) -> bool:
    """Whether the layers alone keep other processes' environment, memory and open files from a candidate: another
    user or PID namespace, or root without capabilities (a process with fewer capabilities cannot read one with
    more). Landlock's ptrace scope does not: it stops attaching, not reading ``/proc/PID/environ``."""
    return "userns" in layers or "pidns" in layers or ("caps" in layers and os.geteuid() == 0)


def ancestors() -> list[int]:
    """This process and its ancestors (their ``/proc`` folders are hidden where nothing else protects them)."""
    found, pid = [], os.getpid()
    while pid > 1 and len(found) < 64:
        found.append(pid)
        parent = parent_pid(pid)
        if parent is None:
            break
        pid = parent
    return found


def parent_pid(pid: int) -> int | None:
    """The parent of process ``pid`` from ``/proc/PID/stat`` (after the command name, which may hold spaces and
    parentheses); None when it has exited or there is no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


NoticeSink = Callable[[str], None]
_notice_sink: NoticeSink | None = None
_noticed: set[str] = set()


def set_notice_sink(sink: NoticeSink | None) -> None:
    """Where ``record`` says, once per process and device kind, that candidates run with layers missing (the CLI's
    console); None (a library's use) says nothing."""
    global _notice_sink
    _notice_sink = sink


def notice(device: str, missing: str) -> None:
    """Say ``missing`` (the layers a candidate on ``device`` lacks, and why) once, where ``set_notice_sink`` points."""
    kind = "cpu" if device == "cpu" else "gpu"
    with _lock:
        if _notice_sink is None or not missing or kind in _noticed:
            return
        _noticed.add(kind)
        sink = _notice_sink
    sink(
        f"containment: kernels on the {kind.upper()} run without part of the sandbox here ({missing}); "
        f"see docs/security.md"
    )


def record(device: str) -> dict[str, str]:
    """For an evaluation's environment: the layers active for its candidate, and those missing with the reason
    (said once on the console: ``notice``)."""
    try:
        layers = child_layers(device)
    except SandboxError as exc:
        return {"sandbox": "error", "sandbox_missing": str(exc)[:300]}
    active = [*layers, *(["nondumpable"] if _parent_protected else [])]
    asked = requested()
    _, failed = probe(device != "cpu") if asked != () else ((), {})
    missing = {layer: why for layer, why in failed.items() if layer not in layers}
    if device != "cpu":
        missing |= {layer: why for layer, why in gpu_withheld().items() if layer not in layers}
    if asked == ():
        missing = {"all": f"{VARIABLE}=off"}
    elif asked is not None:
        missing = {layer: f"not in {VARIABLE}" for layer in LAYERS if layer not in asked}
    exposed = exposed_paths() if layers else []
    if exposed:  # asked to be hidden, but they hold what the worker needs
        missing["not hidden"] = ", ".join(exposed)[:300] + " (they hold the Python installation, ksearch or task data)"
    degraded = {k: v for k, v in missing.items() if not (device != "cpu" and k in GPU_REFUSED)}  # by design there
    notice(device, "; ".join(f"{k}: {v}" for k, v in degraded.items()))
    return {
        "sandbox": ",".join(active) or "none",
        "sandbox_missing": "; ".join(f"{k}: {v}" for k, v in missing.items()),
        "limits": limits.describe(limits.for_device(device)) if "limits" in layers else "none",
    }
