"""Where a workspace lives and how its database is opened (``--workspace``, ``$KSEARCH_WORKSPACE``, ``./.ksearch``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ksearch.store import Store

DEFAULT_WORKSPACE = ".ksearch"
DB_NAME = "ksearch.db"


def workspace_dir(explicit: Path | None = None) -> Path:
    """``--workspace``, else ``$KSEARCH_WORKSPACE``, else ``./.ksearch``."""
    if explicit is not None:
        return explicit
    return Path(os.environ.get("KSEARCH_WORKSPACE", DEFAULT_WORKSPACE))


def open_store(workspace: Path | None = None) -> Store:
    from ksearch.store import Store  # here, not above: the CLI reads workspace_dir at every start

    return Store(workspace_dir(workspace) / DB_NAME)
