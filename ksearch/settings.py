"""Every ``KSEARCH_*`` environment variable ksearch reads, with its default, in one place.

Each is read when it is used (not at import), so a test or a long-lived process sees the environment of the moment.
``USER_SETTINGS`` are a user's (docs/configuration.md has their table; tests/test_docs_variables.py keeps the two
the same); ``HARNESS_OWN`` are set by the evaluator for the processes it starts, never by a user. No other module
names a ``KSEARCH_*`` variable (tests/test_settings.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, its default (``""``: unset) and what it does."""

    name: str
    default: str
    what: str

    def raw(self, environ: Mapping[str, str] | None = None) -> str:
        """The variable's value (in ``environ``, by default this process's environment), or the default when it is
        unset."""
        return (os.environ if environ is None else environ).get(self.name, self.default)

    def given(self) -> str | None:
        """The value as set, ``""`` included; None when the variable is unset (for a setting whose empty value
        means something else than its absence)."""
        return os.environ.get(self.name)

    def is_on(self) -> bool:
        """A flag: on when set to ``1``."""
        return self.raw() == "1"

    def number(self) -> int | None:
        """An integer (a process id, a file descriptor); None when unset."""
        value = self.raw()
        return int(value) if value else None

    def paths(self) -> list[Path]:
        """A ``:``-separated list of paths (empty entries left out)."""
        return [Path(p) for p in self.raw().split(os.pathsep) if p]


WORKSPACE = Setting("KSEARCH_WORKSPACE", "./.ksearch", "the workspace folder (``--workspace``)")
DEBUG = Setting("KSEARCH_DEBUG", "", "set: an error prints its traceback as well as its one line and hint")
SCHEDULER = Setting("KSEARCH_SCHEDULER", "", "a Dask scheduler's address for ``ksearch worker``")
SANDBOX = Setting("KSEARCH_SANDBOX", "auto", "the kernel's containment layers: ``auto``, ``off``, or a list")
SANDBOX_HIDE = Setting("KSEARCH_SANDBOX_HIDE", "", "more paths covered inside a kernel's mount namespace")
SANDBOX_ALLOW = Setting("KSEARCH_SANDBOX_ALLOW", "", "more folders a kernel may read (the file layer's allow-list)")
CANDIDATE_MEMORY = Setting(
    "KSEARCH_CANDIDATE_MEMORY", "", "a kernel's memory limit (unset: half the memory on the CPU, none on a GPU)"
)
CANDIDATE_FILE_SIZE = Setting("KSEARCH_CANDIDATE_FILE_SIZE", "16G", "the largest file a kernel may write")
TRUST_FILE = Setting(
    "KSEARCH_TRUST_FILE", "", "where vouched-for runs are recorded (unset: ~/.local/state/ksearch/trusted-runs.json)"
)
MCP_ROOTS = Setting("KSEARCH_MCP_ROOTS", "", "more folders ``ksearch mcp`` may read kernel and task files from")
AUDIT_RATE = Setting("KSEARCH_AUDIT_RATE", "", "the chance each later timed repeat is re-randomised and audited")
LOW_MEMORY = Setting("KSEARCH_LOW_MEMORY", "", "``1``: every evaluation in low-memory mode")
STAGING = Setting("KSEARCH_STAGING", "", "``shm``: outputs reach the checker through shared host memory")
LEDGER_DUMP = Setting("KSEARCH_LEDGER_DUMP", "", "a folder: each timed evaluation writes its ledger there")
PROFILE = Setting("KSEARCH_PROFILE", "", "a folder: every worker and checker writes cProfile statistics there")
MEMORY_HISTORY = Setting(
    "KSEARCH_MEMORY_HISTORY", "", "``1`` with ``KSEARCH_PROFILE``: on a GPU, also the allocator's history"
)
TIMING_POLL_MS = Setting(
    "KSEARCH_TIMING_POLL_MS", "0", "the parent reads a timing worker's records every this many ms (an experiment)"
)
CPU_TIMING = Setting("KSEARCH_CPU_TIMING", "", "``1``: time on the CPU too (the tests use it)")
NCU = Setting("KSEARCH_NCU", "", "the Nsight Compute executable hardware counters are read with")
COUNTERS_SANDBOX = Setting("KSEARCH_COUNTERS_SANDBOX", "auto", "the layers a kernel profiled by ncu runs with")
FORK_SERVER = Setting(
    "KSEARCH_FORK_SERVER", "1", "``0``: every CPU worker and checker starts its own Python (else forked, torch loaded)"
)

USER_SETTINGS = (
    WORKSPACE,
    DEBUG,
    SCHEDULER,
    SANDBOX,
    SANDBOX_HIDE,
    SANDBOX_ALLOW,
    CANDIDATE_MEMORY,
    CANDIDATE_FILE_SIZE,
    TRUST_FILE,
    MCP_ROOTS,
    AUDIT_RATE,
    LOW_MEMORY,
    STAGING,
    LEDGER_DUMP,
    PROFILE,
    MEMORY_HISTORY,
    TIMING_POLL_MS,
    CPU_TIMING,
    NCU,
    COUNTERS_SANDBOX,
    FORK_SERVER,
)

PARENT_PID = Setting("KSEARCH_PARENT_PID", "", "the process a sandboxed process dies with")
MSG_FD = Setting("KSEARCH_MSG_FD", "", "the worker's message socket to the parent")
DOORBELL_FD = Setting("KSEARCH_DOORBELL_FD", "", "the pipe a worker rings when it waits for an answer")
STAGING_DIR = Setting("KSEARCH_STAGING_DIR", "", "the checker's staging folder for host-memory buffers")

HARNESS_OWN = (PARENT_PID, MSG_FD, DOORBELL_FD, STAGING_DIR)

PASSED_TO_CANDIDATES = (STAGING, PROFILE, MEMORY_HISTORY)
"""Kept in a sandboxed process's scrubbed environment (the checker reads ``STAGING``, every process ``PROFILE`` and
``MEMORY_HISTORY``)."""
