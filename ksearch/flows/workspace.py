"""Where a workspace lives and how its database is opened (``--workspace``, ``$KSEARCH_WORKSPACE``, ``./.ksearch``)."""

from __future__ import annotations

import os
from pathlib import Path

from ksearch.store import Store

DEFAULT_WORKSPACE = ".ksearch"
DB_NAME = "ksearch.db"


def workspace_dir(explicit: Path | None = None) -> Path:
    """``--workspace``, else ``$KSEARCH_WORKSPACE``, else ``./.ksearch``."""
    if explicit is not None:
        return explicit
    return Path(os.environ.get("KSEARCH_WORKSPACE", DEFAULT_WORKSPACE))


def open_store(workspace: Path | None = None) -> Store:
    return Store(workspace_dir(workspace) / DB_NAME)
