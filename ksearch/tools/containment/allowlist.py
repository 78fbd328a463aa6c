"""What a candidate may read: the file layer's allow-list, bubblewrap-style (the parent's side; issue 61).

Readable: the operating system (``SYSTEM_READABLE`` less ``SYSTEM_SECRETS``), the Python installation and every
folder on the worker's import path, ksearch itself, the task's data (``TASK_DATA_VARIABLES`` and the files an
evaluation's task names: ``allow``), CUDA (``CUDA_HOME``/``CUDA_PATH``, the installation ``nvcc`` comes from, the
folders of ``LD_LIBRARY_PATH``, where the driver's libraries often are; ``/dev/nvidia*`` and ``/proc`` are in the
list anyway), the C toolchain Triton builds its launchers with (``toolchain_paths``: on clusters often outside
``/usr``, e.g. ``/opt/gcc``) and ``KSEARCH_SANDBOX_ALLOW``. Writable: the candidate's own folders and ``/dev``.
Nothing else: no home, no other project, nothing of ``/tmp`` or ``/run``, no workspace, whether or not a list of
secrets names it.

The folder that holds an editable ksearch (a checkout: often a project with its workspace and its ``.envrc``) may be
listed, not read, beyond ksearch itself: Python lists every folder on its import path. A path on the list that holds the
home is listed only, never read whole; the root is never on it.

Landlock enforces the list. The mount layer, which also runs where Landlock is missing, puts an empty folder over each
of ``FENCED`` (and the home) with only the list's paths beneath it bound back: there, folders outside these stay
readable (read-only), less the hidden paths (``policy``).
"""

from __future__ import annotations

import os
import shutil
import site
import sys
import threading
from pathlib import Path

import ksearch
from ksearch import settings

ALLOW_VARIABLE = settings.SANDBOX_ALLOW.name
"""More folders a candidate may read (``:``-separated): a tool or a data set the list does not name."""
SYSTEM_READABLE = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/sys",
    "/proc",
    "/nix/store",
)
"""The operating system: programs, libraries (the GPU driver's among them), its settings, ``/sys`` and ``/proc``
(CUDA and OpenMP read both; other processes' entries are kept away by the user and PID namespaces)."""
SYSTEM_SECRETS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
    "/etc/security/opasswd",
    "/etc/credstore",
    "/etc/credstore.encrypted",
)
"""Of the operating system, what root's file modes alone protect (a candidate of a ksearch run as root passes them)."""
FENCED = ("/tmp", "/var/tmp", "/run", "/home", "/root", "/mnt", "/media", "/srv", "/opt")
"""Folders the mount layer empties, bar the list's paths beneath them (with the home, wherever it is)."""
TASK_DATA_VARIABLES = ("FIB_DATASET_PATH", "KERNELBENCH_ROOT", "CUDA_HOME", "CUDA_PATH")
"""Folders tasks and toolchains read from, wherever the user keeps them."""

_lock = threading.Lock()
_allowed: list[str] = []
_version = 0


def allow(*paths: Path | str) -> int:
    """Let candidates started from now on read ``paths`` (an evaluation's task file, its data set); the version of
    the list (a worker started before a change may lack a path: ``version``)."""
    global _version
    with _lock:
        for path in paths:
            resolved = os.path.realpath(path)
            if resolved not in _allowed:
                _allowed.append(resolved)
                _version += 1
        return _version


def version() -> int:
    """Bumped whenever ``allow`` adds a path."""
    with _lock:
        return _version


def package_root() -> str:
    """The folder that holds the ksearch package (a checkout, for an editable install)."""
    return str(Path(ksearch.__file__).resolve().parent.parent)


def python_paths() -> list[str]:
    """The Python installation and the worker's import path (``python -P``: without this process's script folder or
    working directory)."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    paths.append(os.path.dirname(os.path.realpath(sys.executable)))
    paths += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    here = os.getcwd()
    skipped = {"", here, sys.path[0] if sys.path and not sys.flags.safe_path else ""}
    paths += [p for p in sys.path if p not in skipped]
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return paths


MPS_PIPE_VARIABLE, MPS_DEFAULT_PIPE = "CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"
"""Where a CUDA MPS control daemon keeps the pipes and sockets its clients use (NVIDIA's MPS documentation)."""


def cuda_paths() -> list[str]:
    """CUDA's toolkit (named, or where ``nvcc`` on the PATH comes from), the folders of ``LD_LIBRARY_PATH``, and
    an MPS daemon's pipe folder where one serves the GPUs."""
    paths = [os.environ[v] for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    mps = os.environ.get(MPS_PIPE_VARIABLE) or MPS_DEFAULT_PIPE
    if os.path.exists(os.path.join(mps, "control")):
        paths.append(mps)
    nvcc = shutil.which("nvcc")
    if nvcc:
        paths.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    paths += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    return paths


COMPILER_VARIABLES = ("CC", "CXX")
COMPILERS = ("gcc", "g++", "cc", "c++", "clang", "clang++", "as", "ld")
"""What Triton (``CC``, else ``gcc`` or ``clang`` on the PATH) and torch's extension builds run, and what they call."""


def toolchain_paths() -> list[str]:
    """The installation (the folder above ``bin``) of each C compiler, assembler and linker the PATH or ``CC``/``CXX``
    names, as found and as resolved: a compiler the mount layer hid (``/opt`` is fenced) made every Triton kernel a
    runtime error on a GPU machine whose gcc lives in ``/opt/gcc`` (H100, 2026-12-07)."""
    names = [os.environ[v].split()[0] for v in COMPILER_VARIABLES if os.environ.get(v, "").strip()]
    paths: list[str] = []
    for name in [*names, *COMPILERS]:
        found = shutil.which(name)
        if found:
            for program in (found, os.path.realpath(found)):
                paths.append(os.path.dirname(os.path.dirname(program)))
    return list(dict.fromkeys(paths))


def readable(extra: list[str] | tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """(folders and files a candidate may read whole, folders it may only list), resolved and existing."""
    home = os.path.realpath(os.path.expanduser("~"))
    checkout = package_root()
    asked = [
        *SYSTEM_READABLE,
        *python_paths(),
        str(Path(ksearch.__file__).resolve().parent),
        *(os.environ[v] for v in TASK_DATA_VARIABLES if os.environ.get(v)),
        *cuda_paths(),
        *toolchain_paths(),
        *(str(p) for p in settings.SANDBOX_ALLOW.paths()),
        *extra,
    ]
    with _lock:
        asked += _allowed
    prefixes = [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)]
    whole: list[str] = []
    listed: list[str] = []
    for path in asked:
        resolved = os.path.realpath(path)
        if not os.path.exists(resolved) or resolved in whole or resolved in listed:
            continue
        holds_home = resolved == home or home.startswith(resolved.rstrip("/") + "/")
        in_python = any(resolved == p or resolved.startswith(p.rstrip("/") + "/") for p in prefixes)
        if resolved == "/":
            continue  # never the whole file system, even listed
        if holds_home or (resolved == checkout and not in_python):
            listed.append(resolved)
        else:
            whole.append(resolved)
    return whole, listed


def fenced() -> list[str]:
    """The folders the mount layer empties, bar the list's paths beneath them: ``FENCED`` and the home."""
    home = os.path.realpath(os.path.expanduser("~"))
    return list(dict.fromkeys([*FENCED, *([home] if home != "/" else [])]))
