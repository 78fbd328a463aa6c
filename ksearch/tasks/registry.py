"""Find tasks by name: built-in ones, those other packages register under the ``ksearch.tasks`` entry point,
KernelBench problems and the user's own operator files.

Names, in the order they are tried:

- a built-in name (``softmax``);
- a name registered by an installed package under the ``ksearch.tasks`` entry-point group;
- ``kernelbench:<level>/<id>`` (a problem of a KernelBench checkout: ``--kernelbench-root`` or ``$KERNELBENCH_ROOT``)
  or ``kernelbench:path/to/problem.py`` (any file in KernelBench's format);
- ``path/to/my_op.py``: an operator file (``ksearch.tasks.userop``) or a file in KernelBench's format.

The evaluator's worker resolves the name again in a private directory with a scrubbed environment, so a run must
carry the *canonical* name (``canonical_task_name``): absolute paths, no dependence on the cwd or the environment.
"""

from __future__ import annotations

import importlib
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ksearch.errors import TaskNotFoundError, UserError
from ksearch.tasks._loading import OPERATOR_PROTOCOL
from ksearch.tasks.base import Task

ENTRY_POINT_GROUP = "ksearch.tasks"

_BUILTIN: dict[str, str] = {
    "softmax": "ksearch.tasks.softmax:SoftmaxTask",
    "trimul": "ksearch.tasks.trimul:TrimulTask",
}
"""Name -> 'module:attribute', imported only when asked for. Built-in names win over plugins of the same name."""

KERNELBENCH_PREFIX = "kernelbench:"
FLASHINFER_PREFIX = "flashinfer:"
_PATTERNS: list[tuple[str, str]] = [
    ("kernelbench:LEVEL/ID", "KernelBench problem ID of level LEVEL (needs --kernelbench-root or KERNELBENCH_ROOT)"),
    ("kernelbench:FILE.py", "any problem file in KernelBench's format (Model, get_inputs, get_init_inputs)"),
    (
        "kernelbench:...?allow=reference_op",
        "a KernelBench problem whose kernels may call PyTorch ops (partial replacement)",
    ),
    (
        "flashinfer:DEFINITION@DATASET",
        "any FlashInfer-Bench definition of a flashinfer-trace dataset folder, with its workloads",
    ),
    ("FILE.py", f"your own operator file (reference, make_inputs, CONFIGS: see {OPERATOR_PROTOCOL})"),
]
"""Families of names, shown by ``ksearch tasks`` after the named tasks."""


class TaskInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    title: str
    source: str
    """'built-in' or the name of the distribution that registered the task."""
    available: bool = True
    """False when the task needs a package that is not installed (``hint`` says which)."""
    hint: str = ""
    """What to do before the task can run, e.g. the pip command."""


def resolve_task(name: str, *, kernelbench_root: str | Path | None = None) -> Task:
    """The task called ``name``; TaskNotFoundError (listing the known names) if there is none.

    ``kernelbench_root`` (else ``$KERNELBENCH_ROOT``) is only needed for ``kernelbench:<level>/<id>`` names.
    Problem-format errors (a file that lacks ``Model`` or ``reference``...) are UserErrors that say what is missing.
    """
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
    if name.startswith(FLASHINFER_PREFIX):
        from ksearch.tasks.flashinfer import FlashInferTask

        return FlashInferTask(name)
    if is_task_file(name):
        from ksearch.tasks import keyless

        if keyless.holds_key():  # its code runs in a process without the key; this one gets its description
            return keyless.load(name, kernelbench_root=kernelbench_root)
    if name.startswith(KERNELBENCH_PREFIX):
        from ksearch.tasks.kernelbench import KernelBenchTask

        return KernelBenchTask.from_name(name, kernelbench_root)
    if _looks_like_path(name):
        return _file_task(Path(name).expanduser())
    known = ", ".join(sorted(_known_names())) or "(none)"
    raise TaskNotFoundError(
        f"unknown task {name!r}; known tasks: {known}; or kernelbench:LEVEL/ID, kernelbench:FILE.py, FILE.py",
        hint="list them with: ksearch tasks",
    )


def canonical_task_name(name: str, *, kernelbench_root: str | Path | None = None) -> str:
    """The name a run should carry: unchanged for named tasks; ``kernelbench:/abs/path.py`` for KernelBench
    problems (also plain paths to files in that format); ``/abs/path.py`` for operator files. Raises like
    ``resolve_task`` when the name cannot be resolved."""
    if name in _BUILTIN or any(ep.name == name for ep in _plugin_entry_points()):
        return name
    task = resolve_task(name, kernelbench_root=kernelbench_root)
    return task.name


def prepare_task(name: str, *, kernelbench_root: str | Path | None = None, device: str = "cpu") -> Task:
    """Resolve, canonicalise and validate a task before a run or an evaluation: an operator file's reference is run
    on ``device`` to check its inputs' placement and determinism (in a process without the key, for a task file).
    The returned task's ``name`` is canonical."""
    if is_task_file(name) and not _named(name):
        from ksearch.tasks import keyless

        if keyless.holds_key():
            return keyless.load(name, kernelbench_root=kernelbench_root, validate_on=device)
    task = resolve_task(name, kernelbench_root=kernelbench_root)
    task.validate(device)
    return task


def is_task_file(name: str) -> bool:
    """Whether ``name`` names a Python file to import (an operator file, a KernelBench problem), not a task of
    ksearch's or of an installed package."""
    if name in _BUILTIN or name.startswith(FLASHINFER_PREFIX):
        return False
    return name.startswith(KERNELBENCH_PREFIX) or _looks_like_path(name)


def _named(name: str) -> bool:
    return any(ep.name == name for ep in _plugin_entry_points())


def _looks_like_path(name: str) -> bool:
    return name.endswith(".py") or "/" in name or Path(name).expanduser().is_file()


def _file_task(path: Path) -> Task:
    """An operator file or a KernelBench-format file, told apart by what it defines."""
    from ksearch.tasks._loading import OPERATOR_FORMAT_HINT, ProblemFormatError, import_file
    from ksearch.tasks.kernelbench import KernelBenchTask
    from ksearch.tasks.kernelbench.problem_files import is_kernelbench_module
    from ksearch.tasks.userop import UserOpTask, is_userop_module

    if not path.is_file():
        raise TaskNotFoundError(
            f"task file {path} not found",
            hint=(
                "give the path to a .py file (an operator file or a KernelBench problem), or a task from `ksearch "
                "tasks`"
            ),
        )
    module = import_file(path, prefix="ksearch_problem")
    if is_kernelbench_module(module):
        return KernelBenchTask(path)
    if is_userop_module(module):
        return UserOpTask(path)
    raise ProblemFormatError(
        f"{path} is neither an operator file (it defines no reference(*inputs)) nor a KernelBench problem "
        "(it defines no class Model and get_inputs())",
        hint=OPERATOR_FORMAT_HINT,
    )


def list_tasks() -> list[TaskInfo]:
    """Every task that resolve_task can find by name, built-in first, each with its title and where it came from;
    then the families of names (KernelBench problems, operator files) that resolve from a path or a checkout."""
    infos = [TaskInfo(name=n, title=resolve_task(n).title, source="built-in") for n in _BUILTIN]
    for ep in _plugin_entry_points():
        if ep.name in _BUILTIN:
            continue
        try:
            title = resolve_task(ep.name).title
        except UserError as exc:
            title = f"(cannot load: {exc})"
        infos.append(TaskInfo(name=ep.name, title=title, source=_distribution(ep)))
    infos.extend(_flashinfer_builtins())
    infos.extend(TaskInfo(name=n, title=t, source="built-in (pattern)") for n, t in _PATTERNS)
    return infos


def _flashinfer_builtins() -> list[TaskInfo]:
    """The FlashInfer-Bench definitions shipped with ksearch, by the names a user types; read from their JSON, so
    they are listed (with the install line) even when flashinfer-bench itself is not installed."""
    import json

    from ksearch.tasks.flashinfer import definitions as defs

    try:
        defs.fib()
        available, hint = True, ""
    except UserError:
        available, hint = False, f"needs flashinfer-bench: {defs.INSTALL_HINT}"
    infos = []
    for name in defs.BUILTIN_DEFINITIONS:
        description = json.loads(defs.builtin_definition_json(name)).get("description", "")
        title = "FlashInfer-Bench: " + _clip(description.split(":")[0].split(". ")[0], 70) + " (synthetic workloads)"
        infos.append(
            TaskInfo(name=FLASHINFER_PREFIX + name, title=title, source="built-in", available=available, hint=hint)
        )
    return infos


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: text.rfind(" ", 0, limit)].rstrip(" ,(") + "..."


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
