"""A run is bound to its task's definition: every verdict it holds was decided by that definition.

An operator file or a KernelBench problem is a path whose contents can change between two commands. A new run
records the definition's digest; resuming or forking the run later checks it, and so does every evaluation of a
task file before its verdict is recorded, so that verdicts of the old file and of the new one never mix in one run
(the evaluation cache keys hold the digest too, so no old verdict is reused for the new file).
"""

from __future__ import annotations

from ksearch.agent.config import RunConfig
from ksearch.errors import UserError
from ksearch.tasks.base import Task
from ksearch.tasks.registry import resolve_task


class TaskChangedError(UserError):
    """The task a run was made for has changed since (an edited operator or problem file)."""


def stamp_task(config: RunConfig, task: Task) -> RunConfig:
    """``config`` recording ``task``'s definition, where it records none yet (a new run, or one from before)."""
    if config.task_digest is not None:
        return config
    return config.model_copy(update={"task_digest": task.definition_digest()})


def ensure_task_unchanged(config: RunConfig, task: Task) -> None:
    """TaskChangedError when ``task`` is not the definition the run recorded when it was made."""
    if config.task_digest is None or config.task_digest == task.definition_digest():
        return
    if config.task.endswith(".py"):
        what = f"the task file {config.task.removeprefix('kernelbench:')}"
        undo = "restore the file to go on with this run"
    else:
        what = f"the definition of task {config.task} (in the installed ksearch or its plugin)"
        undo = "go back to the version the run was made with to go on with this run"
    raise TaskChangedError(
        f"{what} changed since run {config.run_id} started: the run's verdicts were decided by the old definition, "
        "so it cannot go on with the new one",
        hint=f"{undo}, or start a new run on the changed task: ksearch run {config.task} ...",
    )


def ensure_task_file_unchanged(config: RunConfig) -> None:
    """``ensure_task_unchanged`` against the task file as it is now, for a task given as a file (an operator file, a
    KernelBench problem). Checked after each evaluation, before its verdict is recorded: the evaluator's processes
    read the file themselves, so an edit during the run would decide a verdict that the run would then store
    under the old definition's key."""
    if config.task_digest is None or not config.task.endswith(".py"):
        return
    ensure_task_unchanged(config, resolve_task(config.task))
