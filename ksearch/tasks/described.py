"""A task file seen from a process that holds an API key: its description, never its code (issue 61).

An operator file or a KernelBench problem is Python: importing it runs its code. The process that drives a run (the
CLI, the MCP server, a ``resume``) holds the user's API key, so it never imports one: ``ksearch.tasks.keyless`` loads
the file in a process of its own without the key, which answers with a ``TaskDescription`` (everything the agent
and the evaluator's parent read of a task: its prompt text, its configurations, its tolerances, its digest), and the
key's process uses the ``DescribedTask`` built from it (``keyless``). What needs the code itself (inputs, the
reference, the candidate's callable) is for the evaluator's worker and checker, which start without the key and
import the file there.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ksearch.contracts.candidate import Candidate
from ksearch.tasks.base import Task, TaskConfig

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
