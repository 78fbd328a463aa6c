"""The workspace database (``WORKSPACE/ksearch.db``): everything a run paid for, beside LangGraph's checkpoints.

``Store`` gives typed access to our tables; ``connection`` opens the file; ``migrations`` holds the schema as numbered
migration functions.
It knows nothing about the graph: the agent, the flows and the CLI use it.
"""

from ksearch.store import skills
from ksearch.store.connection import open_connection, workspace_error
from ksearch.store.migrations import MIGRATIONS, migrate, migration
from ksearch.store.store import Store, ensure_comparison, find_comparison

__all__ = [
    "MIGRATIONS",
    "Store",
    "ensure_comparison",
    "find_comparison",
    "migrate",
    "migration",
    "open_connection",
    "skills",
    "workspace_error",
]
