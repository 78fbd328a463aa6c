"""Evaluate one candidate outside the caller's process: the trust boundary between the agent and untrusted code.

An evaluation is a sequence of processes, each started as ``python -P -m ...`` in its own session (process group),
with an environment rebuilt from an allowlist so API keys never reach it, killed as a group at its time limit, and
dying with the parent (PDEATHSIG):

1. candidate worker, pass ``correctness`` (``ksearch.tools.evaluator.worker``): every test config once, outputs saved;
2. checker (``ksearch.tools.evaluator.checker``, trusted, never imports the candidate): regenerates the inputs, computes the
   reference and compares; only its verdict can say "correct";
3. on a GPU and only when correct: candidate worker, pass ``timing`` (same private dir and build caches);
4. checker again, on the timed outputs the worker kept.

The worker and the checker share a per-evaluation secret salt mixed into every seed (see ``ksearch.tools.evaluator.checker``).
The candidate's processes get a private temp dir as cwd and HOME with their own Triton and torch-extension caches;
the checker runs in a separate dir and reports through its stdout pipe, which the candidate never held. The parent
computes the timing statistics, the physics floor and the score itself. Knows nothing about the graph or the agent.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.contracts.exchange import WorkerRequest
from ksearch.tasks.base import Task
from ksearch.tasks.registry import resolve_task
from ksearch.tools import integrity
from ksearch.tools import timing as timing_mod
from ksearch.tools.evaluator.request import EvalRequest
from ksearch.tools.evaluator.sandbox import Outcome, abort_checker, finish_checker, run_worker, start_checker
from ksearch.tools.evaluator.verdicts import (
    CANDIDATE_FILE,
    checked_evaluation,
    failed_evaluation,
    parent_environment,
    timed_evaluation,
)

CHALLENGER_FILE = "challenger.py"


def evaluate(request: EvalRequest) -> Evaluation:
    """Run the candidate sandboxed and return its typed verdict. Never raises for the candidate's faults; raises
    ``TimingError`` for a timing method the task does not support."""
    started = time.monotonic()
    task = resolve_task(request.task)
    method = timing_mod.resolve_method(task, request.timing_method)
    if str(request.candidate.language) not in task.languages:
        return Evaluation(
            verdict=Verdict.COMPILE_ERROR,
            device=request.device,
            configs_total=len(task.test_configs(request.device)),
            log=f"task {task.name!r} accepts {', '.join(task.languages)} candidates, not {request.candidate.language}",
            environment=parent_environment(),
        )
    rejection = integrity.check_source(request.candidate.code, task_name=task.name)  # static rules: no worker
    if rejection is not None:
        return Evaluation(
            verdict=Verdict.REJECTED,
            device=request.device,
            configs_total=len(task.test_configs(request.device)),
            rejection=rejection,
            log=f"rejected ({rejection.rule}): {rejection.evidence}",
            environment=parent_environment(),
        )
    salt = request.seed_salt if request.seed_salt is not None else secrets.randbits(62)
    with tempfile.TemporaryDirectory(prefix="ksearch-eval-") as root_text:
        root = Path(root_text)
        scrub = (str(root / "work") + os.sep, str(root / "io") + os.sep, str(root))
        evaluation = _evaluate_in(root, request, task, method, salt, scrub)
    return evaluation.model_copy(update={"duration_s": round(time.monotonic() - started, 3)})


def _evaluate_in(root: Path, request: EvalRequest, task: Task, method: str, salt: int, scrub: tuple[str, ...]) -> Evaluation:
    """Correctness pass, check, then (GPU, correct only) timing pass and recheck.

    Each checker is started alongside its worker pass and waits on its stdin: its start-up (torch, CUDA) overlaps
    the worker's run, and it reads the worker's files only after the parent has killed the worker's process group.
    """
    work, io = prepare_dirs(root)
    (work / CANDIDATE_FILE).write_text(request.candidate.code, encoding="utf-8")
    stages = _Stages()

    checker = start_checker(root, request, salt, "test", io / "result.json", io / "out-correctness")
    with stages.time("correctness"):
        first = run_worker(root, request, worker_request(request, work, io, "correctness", salt, task, method))
    if worker_failed(first):
        abort_checker(checker)
        return stages.stamp(failed_evaluation(request, task, first, scrub))
    with stages.time("check"):
        check = finish_checker(checker, request)
    if check.verdict != Verdict.PASSED or not request.timing:
        return stages.stamp(checked_evaluation(request, task, first, check, scrub))

    checker = start_checker(root, request, salt, "bench", io / "result.json", io / "out-timing")
    with stages.time("timing"):
        second = run_worker(root, request, worker_request(request, work, io, "timing", salt, task, method))
    counts = {"configs_passed": check.configs_passed, "configs_total": check.configs_total}
    if worker_failed(second):
        abort_checker(checker)
        return stages.stamp(failed_evaluation(request, task, second, scrub).model_copy(update=counts))
    with stages.time("recheck"):
        recheck = finish_checker(checker, request)
    if recheck.verdict != Verdict.PASSED:
        return stages.stamp(checked_evaluation(request, task, second, recheck, scrub).model_copy(update=counts))
    return stages.stamp(timed_evaluation(request, task, method, first, second, check, recheck, scrub))


class _Stages:
    """Wall time of each stage, reported in the evaluation's environment (so slow stages are visible to users)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def time(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(time.monotonic() - started, 2)

    def stamp(self, evaluation: Evaluation) -> Evaluation:
        text = " ".join(f"{k}={v:g}s" for k, v in self.seconds.items())
        return evaluation.model_copy(update={"environment": {**evaluation.environment, "stage_seconds": text}})


def prepare_dirs(root: Path) -> tuple[Path, Path]:
    work, io = root / "work", root / "io"
    for folder in (work, work / "tmp", io, io / "out-correctness", io / "out-timing", root / "check"):
        folder.mkdir(mode=0o700, exist_ok=True)
    return work, io


def worker_request(
    request: EvalRequest, work: Path, io: Path, mode: str, salt: int, task: Task, method: str
) -> WorkerRequest:
    return WorkerRequest(
        task=request.task,
        device=request.device,
        entry_point=request.candidate.entry_point,
        candidate_path=str(work / CANDIDATE_FILE),
        result_path=str(io / "result.json"),
        timing=mode == "timing",
        mode=mode,  # type: ignore[arg-type]
        salt=salt,
        outputs_dir=str(io / f"out-{mode}"),
        timing_method=method,
        flush_l2=bool(getattr(task, "flush_l2", True)),
        allow_threads=request.harness_baseline,
    )


def worker_failed(outcome: Outcome) -> bool:
    return outcome.timed_out or outcome.result is None or outcome.result.verdict != Verdict.PASSED
