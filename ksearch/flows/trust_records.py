"""What the user vouched for, kept outside every workspace (issue 61): per run, the task file's hash and the
endpoints the user typed.

A workspace may come from someone else, so what it names is data: ``resume``, ``replay`` and ``fork`` use a stored
LLM server, Dask scheduler or task file only when this record (written when the user started the run, or confirmed
it with a flag) says the user chose that very value (``ksearch.flows.trust``). The record lives in the user's state
folder (``$XDG_STATE_HOME/ksearch``, by default ``~/.local/state/ksearch``; ``KSEARCH_TRUST_FILE`` names another
file), which a kernel can neither read nor write (the containment's file layer), and which a received workspace does
not carry.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from ksearch import settings


class TrustRecord(BaseModel):
    """What the user chose for one run of one workspace."""

    model_config = ConfigDict(extra="forbid")

    workspace: str
    """The workspace folder, resolved."""
    run_id: str
    task_file: str | None = None
    task_sha256: str | None = None
    base_url: str | None = None
    scheduler: str | None = None
    recorded_at: float = 0.0


class TrustBook(BaseModel):
    model_config = ConfigDict(extra="forbid")

    records: list[TrustRecord] = []


def trust_file() -> Path:
    """Where the records are kept."""
    named = settings.TRUST_FILE.raw()
    if named:
        return Path(named).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "ksearch" / "trusted-runs.json"


def file_sha256(path: str | Path) -> str | None:
    """The hash of a task file's bytes; None when it cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def find(workspace: Path, run_id: str) -> TrustRecord | None:
    """The record of ``run_id`` in ``workspace``, if the user vouched for it on this machine."""
    where = os.path.realpath(workspace)
    for record in _read(trust_file()).records:
        if record.workspace == where and record.run_id == run_id:
            return record
    return None


def vouch(
    workspace: Path,
    run_id: str,
    *,
    task_file: str | None,
    base_url: str | None,
    scheduler: str | None,
) -> TrustRecord:
    """Record (or replace) what the user chose for ``run_id``: the task file's current hash and the endpoints."""
    record = TrustRecord(
        workspace=os.path.realpath(workspace),
        run_id=run_id,
        task_file=task_file,
        task_sha256=file_sha256(task_file) if task_file else None,
        base_url=base_url,
        scheduler=scheduler,
        recorded_at=time.time(),
    )
    path = trust_file()
    with _locked(path):
        book = _read(path)
        kept = [r for r in book.records if (r.workspace, r.run_id) != (record.workspace, record.run_id)]
        book = TrustBook(records=[*kept, record])
        partial = path.with_suffix(".partial")
        partial.write_text(book.model_dump_json(indent=1), encoding="utf-8")
        os.chmod(partial, 0o600)
        partial.replace(path)
    return record


def _read(path: Path) -> TrustBook:
    """The records; none when the file is missing or damaged (nothing is then trusted: the user vouches again)."""
    try:
        return TrustBook.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError, ValueError):
        return TrustBook()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
