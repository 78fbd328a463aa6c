"""Find tasks by name: the built-in ones plus those other packages register under the ``ksearch.tasks`` entry point."""

from __future__ import annotations

import importlib
from importlib.metadata import EntryPoint, entry_points

from pydantic import BaseModel, ConfigDict

from ksearch.errors import TaskNotFoundError
from ksearch.tasks.base import Task

ENTRY_POINT_GROUP = "ksearch.tasks"

_BUILTIN: dict[str, str] = {
    "softmax": "ksearch.tasks.softmax:SoftmaxTask",
}
"""Name -> 'module:attribute', imported only when asked for. Built-in names win over plugins of the same name."""


class TaskInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    title: str
    source: str
    """'built-in' or the name of the distribution that registered the task."""


def resolve_task(name: str) -> Task:
    """The task called ``name``; TaskNotFoundError (listing the known names) if there is none."""
    if name in _BUILTIN:
        module, _, attribute = _BUILTIN[name].partition(":")
        return _instantiate(getattr(importlib.import_module(module), attribute), name, "built-in")
    for ep in _plugin_entry_points():
        if ep.name == name:
            source = _distribution(ep)
            try:
                loaded = ep.load()
            except Exception as exc:  # a broken plugin is the user's problem to fix, named as such
                raise TaskNotFoundError(f"task {name!r} from {source} could not be loaded: {exc}") from exc
            return _instantiate(loaded, name, source)
    known = ", ".join(sorted(_known_names())) or "(none)"
    raise TaskNotFoundError(f"unknown task {name!r}; known tasks: {known}", hint="list them with: ksearch tasks")


def list_tasks() -> list[TaskInfo]:
    """Every task that resolve_task can find, built-in first, each with its title and where it came from."""
    infos = [TaskInfo(name=n, title=resolve_task(n).title, source="built-in") for n in _BUILTIN]
    for ep in _plugin_entry_points():
        if ep.name in _BUILTIN:
            continue
        try:
            title = resolve_task(ep.name).title
        except TaskNotFoundError as exc:
            title = f"(cannot load: {exc})"
        infos.append(TaskInfo(name=ep.name, title=title, source=_distribution(ep)))
    return infos


def _plugin_entry_points() -> list[EntryPoint]:
    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _known_names() -> list[str]:
    return list(dict.fromkeys([*_BUILTIN, *(ep.name for ep in _plugin_entry_points())]))


def _distribution(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else "unknown distribution"


def _instantiate(obj: object, name: str, source: str) -> Task:
    """An entry point may name a Task instance, a Task subclass, or a factory returning a Task."""
    task = obj if isinstance(obj, Task) else obj() if callable(obj) else obj
    if not isinstance(task, Task):
        raise TaskNotFoundError(f"task {name!r} from {source} is not a ksearch Task (got {type(task).__qualname__})")
    return task
