"""A task file seen from a process that holds an API key: its description, never its code (issue 61).

An operator file or a KernelBench problem is Python: importing it runs its code. The process that drives a run (the
CLI, the MCP server, a ``resume``) holds the user's API key, so it never imports one: ``ksearch.tasks.keyless`` loads
the file in a process of its own without the key, which answers with a ``TaskDescription`` (everything the agent
and the evaluator's parent read of a task: its prompt text, its configurations, its tolerances, its digest), and the
key's process uses the ``DescribedTask`` built from it. What needs the code itself (inputs, the reference, the
candidate's callable) is for the evaluator's worker and checker, which start without the key and import the file
there.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from ksearch.contracts.candidate import Candidate
from ksearch.tasks.base import Task, TaskConfig, device_kind

KINDS = ("cpu", "cuda")


class ConfigWork(BaseModel):
    """A configuration's minimal work (``Task.flops_and_bytes``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config: TaskConfig
    flops: float
    bytes_moved: float


class TaskDescription(BaseModel):
    """What a process without the task's code knows of the task (filled by ``describe`` from the real one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    title: str
    entry_point: str
    languages: tuple[str, ...]
    atol: float
    rtol: float
    timing_methods: tuple[str, ...]
    default_timing_method: str
    flush_l2: bool
    output_is_tuple: bool
    data_parameters: tuple[int, ...]
    allow_nonfinite: bool
    roofline_compute_dtype: str
    roofline_evidence_dtype: str | None
    gpumode_problem: str | None
    reference_class: str | None
    allowed_rules: frozenset[str]
    forbidden_calls: tuple[str, ...]
    pytorch_baseline_modes: tuple[str, ...]
    specs: dict[str, str]
    starter_code: dict[str, str | None]
    reference_source: str
    definition_digest: str
    test_configs: dict[str, list[TaskConfig]]
    benchmark_configs: dict[str, list[TaskConfig]]
    resource_configs: list[TaskConfig]
    work: list[ConfigWork]
    device_notes: dict[str, str]
    support_modules: dict[str, str]
    reference_candidate: Candidate | None
    reference_latencies_ms: dict[str, float]
    flashinfer_definition: str | None
    data_paths: tuple[str, ...]
    path: str | None
    """The task file (operator file, KernelBench problem)."""


def describe(task: Task) -> TaskDescription:
    """The description of ``task`` (in the process that imported it)."""
    configs = {kind: (task.test_configs(kind), task.benchmark_configs(kind)) for kind in KINDS}
    resources = task.resource_configs()
    every = [c for tests, benches in configs.values() for c in [*tests, *benches]] + resources
    work = []
    for config in {c.model_dump_json(): c for c in every}.values():
        flops, moved = task.flops_and_bytes(config)
        work.append(ConfigWork(config=config, flops=float(flops), bytes_moved=float(moved)))
    path = getattr(task, "path", None)
    return TaskDescription(
        name=task.name,
        title=task.title,
        entry_point=task.entry_point,
        languages=tuple(task.languages),
        atol=task.atol,
        rtol=task.rtol,
        timing_methods=tuple(task.timing_methods),
        default_timing_method=task.default_timing_method,
        flush_l2=task.flush_l2,
        output_is_tuple=task.output_is_tuple,
        data_parameters=tuple(task.data_parameters),
        allow_nonfinite=task.allow_nonfinite,
        roofline_compute_dtype=task.roofline_compute_dtype,
        roofline_evidence_dtype=task.roofline_evidence_dtype,
        gpumode_problem=task.gpumode_problem,
        reference_class=task.reference_class,
        allowed_rules=frozenset(task.allowed_rules),
        forbidden_calls=tuple(task.forbidden_calls),
        pytorch_baseline_modes=tuple(task.pytorch_baseline_modes),
        specs={language: task.spec(language) for language in task.languages},
        starter_code={language: task.starter_code(language) for language in task.languages},
        reference_source=task.reference_source(),
        definition_digest=task.definition_digest(),
        test_configs={kind: tests for kind, (tests, _) in configs.items()},
        benchmark_configs={kind: benches for kind, (_, benches) in configs.items()},
        resource_configs=resources,
        work=work,
        device_notes={kind: task.device_note(kind) for kind in KINDS},
        support_modules=task.support_modules(),
        reference_candidate=task.reference_candidate(),
        reference_latencies_ms=task.reference_latencies_ms(),
        flashinfer_definition=task.flashinfer_definition(),
        data_paths=tuple(task.data_paths()),
        path=str(path) if path is not None else None,
    )


class NotLoadedHere(RuntimeError):
    """The task's code is not in this process (it holds the API key): only the evaluator's worker and checker run
    it."""


class DescribedTask(Task):
    """A task known by its description only (``TaskDescription``): the agent's and the evaluator parent's view."""

    def __init__(self, description: TaskDescription) -> None:
        d = description
        self.description = d
        self.name, self.title, self.entry_point, self.languages = d.name, d.title, d.entry_point, d.languages
        self.atol, self.rtol = d.atol, d.rtol
        self.timing_methods, self.default_timing_method = d.timing_methods, d.default_timing_method
        self.flush_l2, self.output_is_tuple, self.allow_nonfinite = d.flush_l2, d.output_is_tuple, d.allow_nonfinite
        self.data_parameters = d.data_parameters
        self.roofline_compute_dtype, self.roofline_evidence_dtype = d.roofline_compute_dtype, d.roofline_evidence_dtype
        self.gpumode_problem, self.reference_class = d.gpumode_problem, d.reference_class
        self.allowed_rules, self.forbidden_calls = d.allowed_rules, d.forbidden_calls
        self.pytorch_baseline_modes = d.pytorch_baseline_modes
        self.path = d.path
        self.source = d.reference_source
        """A KernelBench problem's text (its baselines package it as a candidate)."""
        self._work = {w.config.model_dump_json(): (w.flops, w.bytes_moved) for w in d.work}

    def spec(self, language: str) -> str:
        if language not in self.description.specs:
            raise ValueError(f"task {self.name!r} has no spec for language {language!r}; it supports {self.languages}")
        return self.description.specs[language]

    def reference_source(self) -> str:
        return self.description.reference_source

    def definition_digest(self) -> str:
        return self.description.definition_digest

    def test_configs(self, device: str) -> list[TaskConfig]:
        return list(self.description.test_configs[device_kind(device)])

    def benchmark_configs(self, device: str) -> list[TaskConfig]:
        return list(self.description.benchmark_configs[device_kind(device)])

    def resource_configs(self) -> list[TaskConfig]:
        return list(self.description.resource_configs)

    def flops_and_bytes(self, config: TaskConfig) -> tuple[float, float]:
        return self._work.get(config.model_dump_json(), (0.0, 0.0))

    def device_note(self, device: str) -> str:
        return self.description.device_notes.get(device_kind(device), "")

    def starter_code(self, language: str) -> str | None:
        return self.description.starter_code.get(language)

    def support_modules(self) -> dict[str, str]:
        return dict(self.description.support_modules)

    def data_paths(self) -> tuple[str, ...]:
        return self.description.data_paths

    def reference_candidate(self) -> Candidate | None:
        return self.description.reference_candidate

    def reference_latencies_ms(self) -> dict[str, float]:
        return dict(self.description.reference_latencies_ms)

    def flashinfer_definition(self) -> str | None:
        return self.description.flashinfer_definition

    def validate(self, device: str = "cpu") -> None:
        from ksearch.tasks.keyless import validate

        validate(self.name, device)

    def make_inputs(self, config: TaskConfig, device: str) -> list[Any]:
        raise NotLoadedHere(f"task {self.name}: its inputs are made in the evaluator's processes, not here")

    def reference(self, *inputs: Any) -> Any:
        raise NotLoadedHere(f"task {self.name}: its reference runs in the evaluator's checker, not here")

    def prepare(self, module: Any, config: TaskConfig, device: str) -> Any:
        raise NotLoadedHere(f"task {self.name}: candidates run in the evaluator's worker, not here")
