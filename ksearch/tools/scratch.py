"""Scratch folders of an evaluation session, named after the process that made them (``ksearch-eval-PID-XXXX`` in
the temporary folder), so that a later ksearch removes those whose process is gone.

A session removes its folder when it closes; after ``kill -9``, an out-of-memory kill or a second Ctrl-C (which
exits at once) no cleanup code runs, and the folder (kernels, their build caches) would stay until the machine's
temporary folder is cleared. The next session sweeps such folders when it makes its own: only folders of this user
whose process no longer runs; a folder of a live process, or of a process this user cannot see, is left alone.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

_NAME = re.compile(r"^ksearch-(?P<kind>[a-z]+)-(?P<pid>\d+)-")


def scratch_dir(kind: str, *, root: Path | None = None) -> Path:
    """A new private folder ``ksearch-KIND-PID-XXXX`` in ``root`` (default: the temporary folder; a session's staging
    folder is in ``/dev/shm``), after sweeping stale ones there."""
    sweep_stale(root)
    return Path(tempfile.mkdtemp(prefix=f"ksearch-{kind}-{os.getpid()}-", dir=root))


def sweep_stale(root: Path | None = None) -> list[Path]:
    """Remove the scratch folders under ``root`` (default: the temporary folder) left by processes that are gone;
    returns them."""
    folder = Path(root) if root is not None else Path(tempfile.gettempdir())
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _NAME.match(entry.name)
        if match is None or not _stale(entry, int(match["pid"])):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(entry)
    return removed


def _stale(entry: Path, pid: int) -> bool:
    try:
        if not entry.is_dir() or entry.is_symlink() or entry.stat().st_uid != os.getuid():
            return False
    except OSError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
