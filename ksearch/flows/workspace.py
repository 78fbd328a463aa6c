"""Where a workspace lives and how its database is opened (``--workspace``, ``$KSEARCH_WORKSPACE``, ``./.ksearch``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ksearch import settings

if TYPE_CHECKING:
    from ksearch.store import Store

DB_NAME = "ksearch.db"


def workspace_dir(explicit: Path | None = None) -> Path:
    """``--workspace``, else ``$KSEARCH_WORKSPACE``, else ``./.ksearch``."""
    if explicit is not None:
        return explicit
    return Path(settings.WORKSPACE.raw())


def open_store(workspace: Path | None = None, *, read_only: bool = False) -> Store:
    """The workspace's store; ``read_only`` for commands that only look (the file is never written, not even to
    upgrade its schema). The workspace is hidden from every kernel this process evaluates from now on."""
    from ksearch.store import Store  # here, not above: the CLI reads workspace_dir at every start
    from ksearch.tools.containment.policy import hide

    folder = workspace_dir(workspace)
    hide(folder)
    return Store(folder / DB_NAME, read_only=read_only)
