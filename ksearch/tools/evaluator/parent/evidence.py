"""The evidence an evaluation carries for the model, added by the parent once the verdict is known.

- ``resources``: the figures of each compiled Triton kernel. On a GPU they come from the worker's report (the
  kernels it loaded); a kernel over the GPU's limits has already failed to launch there. On the CPU with a target
  GPU they come from the resource probe (``ksearch.tools.evaluator.worker.aot``), and a kernel over the target's limits
  turns the verdict into a compile error naming the kernel, the resource, the figure and the limit.
- ``roofline``: per timed shape, computed here from the parent's own timings, the task's flops and bytes and the
  GPU's nominal peaks (``ksearch.tools.gpu_specs``; unlike the physics floor's, not inflated).
- ``profile``: per timed shape, a profile of one call after timing (``profile_process``, or the worker's own).

Only the compile error changes a verdict, and only for the worse; nothing here touches a score.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ksearch.contracts.evaluation import Evaluation, KernelResources, RooflinePoint, Timing, Verdict
from ksearch.tools.evaluator.profiler.kernel_profile import NOTE_CHARS, PROFILE_NOTE
from ksearch.tools.evaluator.shared.resources import over_limits, tuned_notes
from ksearch.tools.gpu_specs import GpuSpec, gpu_spec, spec_for_device

if TYPE_CHECKING:
    from ksearch.contracts.exchange import WorkerResult
    from ksearch.tasks.base import Task

EXTENSION_MARKERS = ("load_inline", "cpp_extension")
VERDICTS_A_LIMIT_OVERRIDES = (Verdict.PASSED, Verdict.INCORRECT, Verdict.RUNTIME_ERROR)
"""A kernel that cannot launch on the target: its CPU verdict (the interpreter has no limits) does not stand."""


def probe_wanted(code: str, device: str, target_gpu: str | None) -> bool:
    """A resource probe runs for Triton code evaluated on the CPU for a target GPU."""
    return device == "cpu" and bool(target_gpu) and "triton" in code and not any(m in code for m in EXTENSION_MARKERS)


def evidence_dtype(task: Task) -> str:
    """The dtype whose dense peak a shape's compute floor uses: the task's own choice (``roofline_evidence_dtype``),
    else its physics-floor dtype, except fp8 (chosen there only to never reject an honest kernel) becomes bf16."""
    chosen = task.roofline_evidence_dtype
    if chosen:
        return str(chosen)
    floor = task.roofline_compute_dtype
    return "bf16" if floor == "fp8" else floor


def roofline_point(
    config: str, measured_ms: float, flops: float, bytes_moved: float, gpu: GpuSpec, dtype: str
) -> RooflinePoint:
    """One shape against ``gpu``'s roofline (pure)."""
    used, peak = gpu.flops_for(dtype)
    memory_ms = bytes_moved / gpu.bandwidth_bytes_s * 1e3
    compute_ms = flops / peak * 1e3
    floor_ms = max(memory_ms, compute_ms)
    return RooflinePoint(
        config=config,
        measured_ms=measured_ms,
        floor_ms=floor_ms,
        memory_ms=memory_ms,
        compute_ms=compute_ms,
        bound="memory" if memory_ms >= compute_ms else "compute",
        fraction=floor_ms / measured_ms if measured_ms > 0 else 0.0,
        dtype=used,
        gpu=gpu.name,
    )


def roofline_points(task: Task, timings: list[Timing], device_name: str, device: str = "cuda") -> list[RooflinePoint]:
    """Every timed shape's point on the GPU named ``device_name``; empty when the table does not know it."""
    gpu = spec_for_device(device_name)
    if gpu is None or not timings:
        return []
    by_name = {c.name: c for c in task.benchmark_configs(device)}
    dtype = evidence_dtype(task)
    points = []
    for t in timings:
        config = by_name.get(t.config)
        if config is None:
            continue
        flops, bytes_moved = task.flops_and_bytes(config)
        points.append(roofline_point(t.config, t.headline_ms, flops, bytes_moved, gpu, dtype))
    return points


def floors_text(task: Task, gpu: GpuSpec) -> str:
    """The roofline floor of each timed shape on ``gpu``, for prompts ('' when the task has no GPU shapes)."""
    dtype = evidence_dtype(task)
    lines = []
    for config in task.benchmark_configs("cuda"):
        try:
            flops, bytes_moved = task.flops_and_bytes(config)
        except Exception:  # noqa: BLE001 - a task without a cost model for this shape
            continue
        point = roofline_point(config.name, 1.0, flops, bytes_moved, gpu, dtype)
        lines.append(
            f"  {config.name}: {point.floor_ms:.4g} ms, {point.bound}-bound (memory {point.memory_ms:.4g} "
            f"ms, {point.dtype} compute {point.compute_ms:.4g} ms)"
        )
    if not lines:
        return ""
    return (
        f"Roofline floors of the timed shapes on the {gpu.name} (the task's minimal bytes at peak bandwidth, its "
        f"flops at the dense {dtype} peak; no kernel can be faster):\n" + "\n".join(lines)
    )


def with_evidence(
    evaluation: Evaluation,
    task: Task,
    *,
    device: str,
    target_gpu: str | None,
    worker: WorkerResult | None,
    probe: WorkerResult | None,
    probe_problem: str = "",
) -> Evaluation:
    """``evaluation`` with its resources, roofline and profile, and a compile error for a kernel over the target's
    limits (the CPU with a target GPU only)."""
    resources: list[KernelResources] = list(probe.resources if probe is not None else [])
    if not resources and worker is not None:
        resources = list(worker.resources)
    update: dict[str, Any] = {"resources": resources}
    if evaluation.passed and evaluation.timed:
        update["roofline"] = roofline_points(task, evaluation.timings, evaluation.device, device)
        update["profile"] = list(worker.profile) if worker is not None else []
        update["tuning"] = list(worker.tuning) if worker is not None else []
        problem = profile_problem(worker)
        if problem and not update["profile"]:
            update["environment"] = {**evaluation.environment, "profile": problem}
    notes = list(probe.notes if probe is not None else [])
    if target_gpu:
        gpu = gpu_spec(target_gpu)
        update["environment"] = {
            **update.get("environment", evaluation.environment),
            "target_gpu": gpu.key,
            **(probe.environment if probe is not None else {}),
        }
        if probe_problem:
            notes.append(probe_problem)
        notes.extend(tuned_notes(resources, gpu))
        error = over_limits(resources, gpu)
        if error and evaluation.verdict in VERDICTS_A_LIMIT_OVERRIDES:
            log = "\n".join([error, *notes, evaluation.log.strip()]).strip()
            return evaluation.model_copy(
                update={
                    **update,
                    "verdict": Verdict.COMPILE_ERROR,
                    "score": None,
                    "latency_ms": None,
                    "timings": [],
                    "timed": False,
                    "mismatch": None,
                    "log": log,
                }
            )
    if notes:
        update["log"] = "\n".join([evaluation.log.strip(), *(f"note: {n}" for n in notes)]).strip()
    return evaluation.model_copy(update=update)


def profile_problem(worker: WorkerResult | None) -> str:
    """Why the worker took no profile after its timing, from its note (``kernel_profile.PROFILE_NOTE``), or ''."""
    for note in worker.notes if worker is not None else []:
        if note.startswith(PROFILE_NOTE):
            return note.removeprefix(PROFILE_NOTE)[:NOTE_CHARS]
    return ""


def probe_report(result_text: str | None) -> WorkerResult | None:
    """The probe's report, or None when it left none (killed, crashed) or an unreadable one."""
    from pydantic import ValidationError

    from ksearch.contracts.exchange import WorkerResult

    if not result_text:
        return None
    try:
        return WorkerResult.model_validate_json(result_text)
    except ValidationError:
        return None
