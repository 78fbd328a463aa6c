"""A workspace is data, not instructions: what ``resume``, ``replay`` and ``fork`` accept from a stored run.

A workspace can come from someone else (a shared results folder, an attachment). Its stored settings must not send
the API key of the person resuming to a server the workspace names, connect this machine to a Dask scheduler it
names (a scheduler runs what its clients submit, and a Dask client unpickles what its scheduler sends), or run a task
file it names (an operator file is code: its reference runs in the evaluator's checker, as the user). Loopback
included: on a shared node anyone can listen on 127.0.0.1. So a stored value is used only when

- the user vouched for that very value: a record kept outside the workspace (``trust_records``: written when the
  user started the run, or confirmed it with a flag) names it for this run, with the task file's hash; or
- the user names it again: ``--base-url``, ``--scheduler``, ``--trust-task``, or (for the LLM server) their own
  configuration (``OPENAI_BASE_URL``, ``OPENAI_API_BASE``);

otherwise the command stops with one line saying which value is stored and how to accept it. Even a task file the
user vouched for is never imported into the process that holds the key (``ksearch.tasks.keyless``).
"""

from __future__ import annotations

import ipaddress
import os
import shlex
from pathlib import Path
from urllib.parse import urlsplit

from ksearch.agent.config import RunConfig
from ksearch.errors import UserError
from ksearch.flows import trust_records
from ksearch.flows.trust_records import TrustRecord

OWN_ENDPOINT_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_BASE")


def is_loopback(url: str) -> bool:
    """Whether ``url`` (``http://host:port/...``, ``tcp://host:port``, ``host:port``) names this machine."""
    host = urlsplit(url if "://" in url else f"//{url}").hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def own_endpoints() -> set[str]:
    return {os.environ[v].rstrip("/") for v in OWN_ENDPOINT_VARIABLES if os.environ.get(v)}


def _same(stored: str, chosen: str | None) -> bool:
    return chosen is not None and stored.rstrip("/") == chosen.rstrip("/")


def accept_endpoints(
    config: RunConfig,
    *,
    command: str,
    workspace: Path,
    base_url: str | None = None,
    scheduler: str | None = None,
) -> RunConfig:
    """``config`` with the endpoints this command line gives; UserError for a stored one nobody vouched for."""
    record = trust_records.find(workspace, config.run_id)
    updates: dict[str, str] = {}
    if base_url is not None:
        updates["base_url"] = base_url
    elif (
        config.base_url
        and not _same(config.base_url, record.base_url if record else None)
        and config.base_url.rstrip("/") not in own_endpoints()
    ):
        raise UserError(
            f"run {config.run_id} names the LLM server {config.base_url}, a setting stored in the workspace that you "
            "have not vouched for on this machine: ksearch sends your API key only to a server you name yourself",
            hint=f"to use it: {command} --base-url {shlex.quote(config.base_url)} (or name another server)",
        )
    if scheduler is not None:
        updates["scheduler"] = scheduler
    elif (
        config.executor == "dask"
        and config.scheduler
        and not _same(config.scheduler, record.scheduler if record else None)
    ):
        raise UserError(
            f"run {config.run_id} evaluates on the Dask scheduler {config.scheduler}, a setting stored in the "
            "workspace that you have not vouched for on this machine: ksearch connects only to a scheduler you name "
            "yourself",
            hint=f"to use it: {command} --scheduler {shlex.quote(config.scheduler)} (or name another scheduler)",
        )
    return config.model_copy(update=updates) if updates else config


def task_file(task: str) -> Path | None:
    """The file a task name imports (an operator file, a KernelBench problem), or None for a named task."""
    name = task.removeprefix("kernelbench:").split("?", 1)[0]
    return Path(name) if name.endswith(".py") else None


def task_vouched(record: TrustRecord | None, path: Path) -> bool:
    """Whether ``record`` names ``path`` with the hash its bytes have now."""
    if record is None or record.task_file is None or record.task_sha256 is None:
        return False
    same_file = os.path.realpath(record.task_file) == os.path.realpath(path)
    return same_file and trust_records.file_sha256(path) == record.task_sha256


def check_task_file(config: RunConfig, workspace: Path, *, trusted: bool, command: str) -> None:
    """Refuse a task file the user has not vouched for (as it is now) unless they confirm it (``--trust-task``)."""
    path = task_file(config.task)
    record = trust_records.find(workspace, config.run_id)
    if path is None or trusted or task_vouched(record, path):
        return
    if (
        record is not None
        and record.task_file is not None
        and os.path.realpath(record.task_file) == os.path.realpath(path)
    ):
        raise UserError(
            f"run {config.run_id}'s task file {path} changed since you vouched for it (when the run started, or with "
            "--trust-task): it is code (its reference and inputs run in the evaluator as you)",
            hint=f"restore the file, or read it and run it as it is now: {command} --trust-task",
        )
    inside = Path(os.path.realpath(path)).is_relative_to(os.path.realpath(workspace))
    where = "a file inside the workspace folder" if inside else "a file the workspace names"
    raise UserError(
        f"run {config.run_id}'s task is {path}, {where}, which you have not vouched for on this machine: it is code "
        "(its reference and inputs run in the evaluator as you)",
        hint=f"read it first; to run it: {command} --trust-task",
    )


def vouch(config: RunConfig, workspace: Path) -> None:
    """Record that the user chose ``config``'s task file (as it is now) and endpoints for its run."""
    path = task_file(config.task)
    trust_records.vouch(
        workspace,
        config.run_id,
        task_file=str(path) if path is not None else None,
        base_url=config.base_url,
        scheduler=config.scheduler if config.executor == "dask" else None,
    )
