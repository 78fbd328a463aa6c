"""A new run's id and config, made one way for every door that starts a run (CLI, MCP, fork, sweep, replay); a stored
run's config read back; and the ids a run's rows carry. Light on purpose: the report reads ``SEED_CYCLE_ID``
without LangGraph or the executors."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ksearch.agent.config import RunConfig
from ksearch.errors import RunExistsError, UserError

SEED_CYCLE_ID = "seed"
"""The attempts row of a seed (round_index 0, before every round) has this cycle id."""


def short_task_name(task: str) -> str:
    """A readable stem for run ids: 'kernelbench:1/19' -> 'kb-1-19', 'path/to/my_op.py' -> 'my_op'."""
    if task.startswith("kernelbench:"):
        rest = task.removeprefix("kernelbench:")
        return "kb-" + (Path(rest).stem if rest.endswith(".py") else rest.replace("/", "-"))
    return Path(task).stem if task.endswith(".py") else task


def new_run_id(task: str) -> str:
    """``TASK-DATE-TIME-XXXX`` for a run of ``task`` (as the user named it), its stem shortened to a safe run id."""
    safe = "".join(c if c.isascii() and c.isalnum() else "-" for c in short_task_name(task))[:24].strip("-") or "run"
    return f"{safe}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def run_config(
    task: str, model: str, *, run_id: str | None = None, named_after: str | None = None, **knobs: Any
) -> RunConfig:
    """A new run's config: ``task`` (its canonical name), ``model`` and ``knobs`` (any other ``RunConfig`` field;
    those left out take ``RunConfig``'s defaults, the CLI's). ``run_id``: the caller's, else a new one named after
    ``named_after`` (the task as the user typed it) or ``task``. Raises pydantic's ValidationError, naming every bad
    field at once."""
    return RunConfig(run_id=run_id or new_run_id(named_after or task), task=task, model=model, **knobs)


def run_exists_error(run: dict[str, Any]) -> RunExistsError:
    """The refusal of a new run named like ``run`` (a run already in the workspace), with the commands that act on
    that run instead: a run id is never reused, so nothing of the existing run is touched."""
    run_id, status, rounds = run["id"], run.get("status") or "created", run.get("rounds_used") or 0
    go_on = "" if status == "finished" else f"continue it with `ksearch resume {run_id}`; "
    return RunExistsError(
        f"run {run_id} already exists ({run.get('task')}, {status}, {rounds} round{'' if rounds == 1 else 's'}); "
        "a new run needs a new id",
        hint=f"{go_on}start from one of its rounds with `ksearch fork {run_id} --at ROUND`; or choose another "
        "run id (--run-id NAME, or none for a generated one)",
    )


def stored_config(run: dict) -> RunConfig:
    """A run's stored config, validated: a row that does not parse is one line naming the run, never a traceback."""
    raw = run.get("config")
    if run.get("config_error"):
        raise UserError(
            f"run {run.get('id')!r} has an invalid stored config ({run['config_error']})",
            hint="the workspace row was edited or damaged; start a new run, or fork another run",
        )
    raw = dict(raw) if isinstance(raw, dict) else {}
    raw.setdefault("explore_every", 0)  # a run stored before exploration slots existed keeps choosing as it did
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
        raise UserError(
            f"run {run.get('id')!r} has an invalid stored config ({problems})",
            hint="the workspace row was edited or damaged; start a new run, or fork another run",
        ) from None
