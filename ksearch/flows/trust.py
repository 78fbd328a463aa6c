"""A workspace is data, not instructions: what ``resume``, ``replay`` and ``fork`` accept from a stored run.

A workspace can come from someone else (a shared results folder, an attachment). Its stored settings must not send
the API key of the person resuming to a server the workspace names, connect this machine to a Dask scheduler it
names (a scheduler runs what its clients submit), or import a task file it ships into this process. So:

- a stored ``base_url`` or Dask scheduler is used only when it is loopback, or when the user names it again on this
  command line (``--base-url``, ``--scheduler``) or in their own configuration (``OPENAI_BASE_URL``,
  ``OPENAI_API_BASE``); otherwise the command stops with one line saying which endpoint is stored and how to accept it;
- a task file inside the workspace folder (where a received workspace can ship one) is imported only with
  ``--trust-task``; task files elsewhere are the user's own (named on their own command line when the run began).
"""

from __future__ import annotations

import ipaddress
import os
import shlex
from pathlib import Path
from urllib.parse import urlsplit

from ksearch.agent.config import RunConfig
from ksearch.errors import UserError

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


def accept_endpoints(
    config: RunConfig, *, command: str, base_url: str | None = None, scheduler: str | None = None
) -> RunConfig:
    """``config`` with the endpoints this command line gives; UserError for a stored one nobody confirmed."""
    updates: dict[str, str] = {}
    if base_url is not None:
        updates["base_url"] = base_url
    elif config.base_url and not is_loopback(config.base_url) and config.base_url.rstrip("/") not in own_endpoints():
        raise UserError(
            f"run {config.run_id} names the LLM server {config.base_url}, a setting stored in the workspace: ksearch "
            "sends your API key only to a server you name yourself",
            hint=f"to use it: {command} --base-url {shlex.quote(config.base_url)} (or name another server)",
        )
    if scheduler is not None:
        updates["scheduler"] = scheduler
    elif config.executor == "dask" and config.scheduler and not is_loopback(config.scheduler):
        raise UserError(
            f"run {config.run_id} evaluates on the Dask scheduler {config.scheduler}, a setting stored in the "
            "workspace: ksearch connects only to a scheduler you name yourself",
            hint=f"to use it: {command} --scheduler {shlex.quote(config.scheduler)} (or name another scheduler)",
        )
    return config.model_copy(update=updates) if updates else config


def task_file(task: str) -> Path | None:
    """The file a task name imports (an operator file, a KernelBench problem), or None for a named task."""
    name = task.removeprefix("kernelbench:")
    return Path(name) if name.endswith(".py") else None


def check_task_file(config: RunConfig, workspace: Path, *, trusted: bool, command: str) -> None:
    """Refuse to import a task file shipped inside the workspace folder unless the user confirms (``--trust-task``)."""
    path = task_file(config.task)
    if path is None or trusted:
        return
    inside = Path(os.path.realpath(path)).is_relative_to(os.path.realpath(workspace))
    if inside:
        raise UserError(
            f"run {config.run_id}'s task is {path}, a file inside the workspace folder: importing it runs its code "
            "in this process, which holds your API key",
            hint=f"read it first; to run it: {command} --trust-task",
        )
