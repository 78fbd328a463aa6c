"""Export a run's best candidate in a format another system accepts (``ksearch export``).

Formats live in a small registry (``FORMATS``): each says which tasks it supports and renders the candidate as text.

- ``module``: the candidate module exactly as it was evaluated (any task). Byte-identical, so importing it again gives
  the same candidate id.
- ``gpumode``: a GPU MODE leaderboard ``submission.py`` (tasks with GPU MODE's ``custom_kernel(data)`` interface, which
  declare ``gpumode_problem``): the module with a header comment naming the run, its evaluation and ksearch.
  The leaderboard rejects any submission whose text contains "stream", so that is reported as a warning.

- ``flashinfer``: a flashinfer-bench 0.1.2 ``Solution`` JSON (``flashinfer:<definition>`` tasks; see
  ``ksearch.tasks.flashinfer.solution``). More formats can be added with ``register_format``.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ksearch
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation
from ksearch.errors import UserError
from ksearch.store import Store
from ksearch.tasks.base import Task
from ksearch.tasks.registry import resolve_task

_STREAM = re.compile("stream", re.IGNORECASE)


@dataclass(frozen=True)
class ExportSource:
    """What an exporter gets: the run, its task, its best candidate and that candidate's evaluation."""

    run: dict[str, Any]
    task: Task
    candidate: Candidate
    evaluation: Evaluation | None


@dataclass
class Exported:
    text: str
    format: str
    filename: str
    """The default file name for this format (used when no output path is given)."""
    warnings: list[str] = field(default_factory=list)
    path: Path | None = None


class ExportFormat(ABC):
    name: str
    description: str

    def unsupported(self, task: Task) -> str | None:
        """None when this format can carry ``task``'s solutions; else why not."""
        return None

    @abstractmethod
    def render(self, source: ExportSource) -> Exported: ...


class ModuleFormat(ExportFormat):
    name = "module"
    description = "the candidate module exactly as evaluated (any task)"

    def render(self, source: ExportSource) -> Exported:
        return Exported(text=source.candidate.code, format=self.name, filename=f"{source.run['id']}.py")


class GpuModeFormat(ExportFormat):
    name = "gpumode"
    description = "a GPU MODE leaderboard submission.py (custom_kernel(data)), with a provenance header"

    def unsupported(self, task: Task) -> str | None:
        if task.gpumode_problem:
            return None
        return f"task {task.name!r} does not use GPU MODE's custom_kernel(data) interface"

    def render(self, source: ExportSource) -> Exported:
        run, evaluation = source.run, source.evaluation
        header = [
            f"# GPU MODE submission for {source.task.gpumode_problem!s}, produced by ksearch "
            f"{getattr(ksearch, '__version__', '')}".rstrip(),
            f"# run {run['id']} (task {run['task']}, model {run['model']}, device {run['device']})",
            f"# candidate {source.candidate.id}",
        ]
        if evaluation is not None:
            header.append(f"# evaluation: {evaluation.summary()}")
            method = evaluation.environment.get("timing_method")
            if method:
                header.append(f"# timing method: {method}")
        header = [_one_line(line) for line in header]
        text = "\n".join(header) + "\n\n" + source.candidate.code
        if not text.endswith("\n"):
            text += "\n"
        warnings = []
        hits = [i + 1 for i, line in enumerate(text.splitlines()) if _STREAM.search(line)]
        if hits:
            lines = ", ".join(map(str, hits[:10])) + (" ..." if len(hits) > 10 else "")
            warnings.append(
                f"the submission contains the word 'stream' (line {lines}): the GPU MODE leaderboard rejects any "
                "submission whose text contains it, even in comments or inside another word such as 'upstream'; "
                "remove it before submitting"
            )
        if source.task.entry_point != "custom_kernel" or "custom_kernel" not in source.candidate.code:
            warnings.append("the module does not define custom_kernel, which GPU MODE calls")
        return Exported(text=text, format=self.name, filename="submission.py", warnings=warnings)


FORMATS: dict[str, ExportFormat] = {}


def register_format(fmt: ExportFormat) -> None:
    FORMATS[fmt.name] = fmt


register_format(ModuleFormat())
register_format(GpuModeFormat())


class FlashInferFormat(ExportFormat):
    name = "flashinfer"
    description = (
        "a flashinfer-bench 0.1.2 Solution JSON (main.py::run, value-returning) for flashinfer:<definition> tasks"
    )

    def unsupported(self, task: Task) -> str | None:
        if task.flashinfer_definition() is not None:
            return None
        return f"task {task.name!r} is not a FlashInfer-Bench definition (flashinfer:<definition>)"

    def render(self, source: ExportSource) -> Exported:
        from ksearch.tasks.flashinfer.solution import to_solution_json

        definition = source.task.flashinfer_definition()
        assert definition is not None  # unsupported() let only such tasks through
        run = source.run
        summary = source.evaluation.summary() if source.evaluation is not None else "not evaluated"
        text = to_solution_json(
            definition,
            source.candidate.code,
            str(source.candidate.language),
            name=f"ksearch_{run['id']}",
            author=f"ksearch ({run.get('model', 'unknown model')})",
            description=_one_line(f"ksearch run {run['id']}, candidate {source.candidate.id}; {summary}"),
        )
        return Exported(text=text + "\n", format=self.name, filename=f"ksearch_{run['id']}.json")


register_format(FlashInferFormat())


def load_best(store: Store, run_id: str) -> ExportSource:
    """The run's best candidate and its evaluation; UserError when the run has none."""
    run = store.get_run(run_id)
    if not run.get("best_candidate_id"):
        raise UserError(
            f"run {run['id']} has no best candidate (nothing passed yet)",
            hint=f"see its rounds with: ksearch show {run['id']}",
        )
    candidate = store.get_candidate(run["best_candidate_id"])
    evaluation = store.get_evaluation(run["best_evaluation_id"]) if run.get("best_evaluation_id") else None
    return ExportSource(run=run, task=resolve_task(run["task"]), candidate=candidate, evaluation=evaluation)


def render(source: ExportSource, format_name: str) -> Exported:
    fmt = FORMATS.get(format_name)
    if fmt is None:
        raise UserError(f"unknown export format {format_name!r}", hint=f"formats: {', '.join(FORMATS)}")
    reason = fmt.unsupported(source.task)
    if reason is not None:
        usable = [f.name for f in FORMATS.values() if f.unsupported(source.task) is None]
        raise UserError(f"cannot export as {format_name}: {reason}", hint=f"formats for this task: {', '.join(usable)}")
    return fmt.render(source)


def export_run(
    store: Store, run_id: str, format_name: str, output: Path | None = None, *, overwrite: bool = False
) -> Exported:
    """Render the run's best candidate; write it to ``output`` (default: the format's file name in the current
    folder) unless ``output`` is ``Path('-')``, which leaves the writing (to stdout) to the caller."""
    exported = render(load_best(store, run_id), format_name)
    if output is not None and str(output) == "-":
        return exported
    path = output if output is not None else Path(exported.filename)
    if path.exists() and not overwrite:
        raise UserError(f"{path} exists", hint="pass --force to overwrite it, or --output another file")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(exported.text, encoding="utf-8")
    exported.path = path
    return exported


def export_run_in(
    workspace: Path | None, run_id: str, format_name: str, output: Path | None = None, *, overwrite: bool = False
) -> Exported:
    """``export_run`` on the store of ``workspace`` (opened and closed here)."""
    from ksearch.flows.workspace import open_store

    store = open_store(workspace, read_only=True)
    try:
        return export_run(store, run_id, format_name, output, overwrite=overwrite)
    finally:
        store.close()


def _one_line(text: str) -> str:
    return " ".join(text.split())


__all__ = [
    "FORMATS",
    "ExportFormat",
    "ExportSource",
    "Exported",
    "export_run",
    "export_run_in",
    "load_best",
    "register_format",
    "render",
]
