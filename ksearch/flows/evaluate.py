"""The ``eval`` flow: one kernel file through the hardened evaluator, as ``ksearch eval`` and the MCP server run it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation
from ksearch.errors import UserError
from ksearch.flows.placement import default_device, resolve_device
from ksearch.tools.evaluator import EvalRequest, EvaluatorSession, evaluate
from ksearch.tools.evaluator.parent.evaluate import scout_wanted
from ksearch.tools.evaluator.parent.profile_process import profiler_wanted
from ksearch.tools.evaluator.parent.verdicts import CANDIDATE_FILE

# The task registry (and with it torch) is imported where it is used: ``evaluate_file`` starts the evaluator's
# processes before this process pays for torch.


def eval_request_for_file(
    task: str,
    file: Path,
    *,
    device: str = "auto",
    timing_method: str | None = None,
    language: str = "triton",
    kernelbench_root: Path | None = None,
    yardstick_rounds: int = 0,
    target_gpu: str | None = None,
    text: str | None = None,
) -> EvalRequest:
    """The evaluation request for a kernel file (a module, or a FlashInfer-Bench Solution JSON) on ``device``;
    ``text``: the file's contents, where the caller has read them already.

    Task names are made canonical (absolute paths): the worker resolves the task again in its own private directory.
    Raises ``UserError`` for an unreadable file and pydantic's ``ValidationError`` for inconsistent options."""
    from ksearch.tasks.registry import prepare_task

    chosen = resolve_device(device)
    resolved = prepare_task(task, kernelbench_root=kernelbench_root, device=chosen)
    code, language = resolved.candidate_from_file(read_kernel(file) if text is None else text, language)
    candidate = Candidate(task=resolved.name, language=language, code=code, entry_point=resolved.entry_point)
    return EvalRequest(
        candidate=candidate,
        device=chosen,
        timing_method=timing_method,
        yardstick_rounds=yardstick_rounds,
        target_gpu=target_gpu,
    )


def read_kernel(file: Path) -> str:
    try:
        return Path(file).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{file} is not a UTF-8 text file: {exc}") from None
    except OSError as exc:
        raise UserError(f"cannot read {file}: {exc}") from None


def evaluate_file(
    task: str, file: Path, *, device: str = "auto", counters: bool = False, counter_shapes: int = 2, **options: Any
) -> Evaluation:
    """Evaluate one kernel file: see ``eval_request_for_file`` for the options. ``counters``: once it has passed and
    been timed, Nsight Compute's counters of its ``counter_shapes`` longest shapes (``Evaluation.counters``).

    The evaluation's processes (checker, worker and, on a GPU, the profiling process and for a Triton kernel the
    compile scout) start first,
    so that their interpreter and CUDA start-up overlaps this process's own imports (torch, the task): a cold
    ``ksearch eval`` then waits for one start-up, not two in a row. With ``device="auto"`` they start on the likely
    device while the probe runs, and start again on the probed one where the guess was wrong."""
    code = read_kernel(file)
    if device != "auto":
        resolve_device(device)  # an unknown device is refused before any process starts on it

    def start(on: str) -> EvaluatorSession:
        return EvaluatorSession(
            on,
            prestart=False,
            worker_now=True,
            scout_now=scout_wanted(code, on),
            profiler_now=profiler_wanted(code, on),
        )

    guess = likely_device() if device == "auto" else device
    session = start(guess)
    try:
        if device == "auto":
            # The probe (torch in a subprocess) decides; the session started on its likely answer meanwhile.
            with ThreadPoolExecutor(1) as pool:
                probe = pool.submit(default_device)
                import ksearch.tasks.registry  # noqa: F401 - torch loads while the probe runs

                device = probe.result()
            if device != guess:
                session.close()
                session = start(device)
        request = eval_request_for_file(task, file, device=device, text=code, **options)
        evaluation = evaluate(request, session=session)
        if request.candidate.code == code:  # the module as written: its lines are the file's
            evaluation = named_after(evaluation, file)
        evaluation = with_device_note(evaluation, request)
    finally:
        session.close()
    return with_counters(evaluation, request, counter_shapes) if counters else evaluation


def with_counters(evaluation: Evaluation, request: EvalRequest, shapes: int) -> Evaluation:
    """``evaluation`` with the hardware counters of its longest shapes, or with why there are none."""
    from ksearch.contracts.counters import CounterReport, CounterStatus
    from ksearch.tools.counters.budget import choose_shapes
    from ksearch.tools.counters.collect import collect_counters

    if not (evaluation.passed and evaluation.timed and evaluation.timings):
        why = (
            "the CPU has no hardware counters" if request.device == "cpu" else "only a passed, timed kernel is profiled"
        )
        report = CounterReport(
            status=CounterStatus.NO_GPU if request.device == "cpu" else CounterStatus.OFF, detail=why
        )
    else:
        report = collect_counters(request, choose_shapes(evaluation.timings, shapes))
        if report.collected:
            report = report.model_copy(update={"device": evaluation.device})
    return evaluation.model_copy(update={"counters": report})


def named_after(evaluation: Evaluation, file: Path) -> Evaluation:
    """The evaluation with the evaluator's name for its copy of the kernel (``candidate.py``, in tracebacks and
    syntax errors) replaced by the file the user gave, whose lines it has."""
    log = evaluation.log.replace(f'File "{CANDIDATE_FILE}"', f'File "{file}"')
    return evaluation if log == evaluation.log else evaluation.model_copy(update={"log": log})


def with_device_note(evaluation: Evaluation, request: EvalRequest) -> Evaluation:
    """The evaluation with what the task says about how this device checked it (a KernelBench problem checked at
    reduced sizes on the CPU) as the first line of its log, so the user reads it beside the verdict."""
    from ksearch.tasks.registry import resolve_task

    note = resolve_task(request.task).device_note(request.device)
    if not note:
        return evaluation
    return evaluation.model_copy(update={"log": f"note: {note}\n{evaluation.log}".rstrip("\n")})


def likely_device() -> str:
    """What ``default_device`` will most likely say, without importing torch: ``cuda`` where an NVIDIA or AMD GPU's
    device file exists."""
    return "cuda" if any(Path(f).exists() for f in ("/dev/nvidiactl", "/dev/kfd")) else "cpu"
