"""Evaluate one candidate outside the caller's process: the trust boundary between the agent and untrusted code.

An evaluation, on an ``EvaluatorSession`` of the device (``session``):

1. static integrity rules (``ksearch.tools.integrity``), before any process runs the code;
2. one fresh candidate worker (``ksearch.tools.evaluator.worker.main``), started ahead of need, runs every test config,
   then, on a GPU, times every benchmark config with the requested method, in the same process (nothing is imported,
   compiled or autotuned twice); for a Triton candidate on a GPU a second process of it, the compile scout
   (``ksearch.tools.evaluator.worker.scout``), first makes compile-only calls (the worker starts once they are done and
   the scout's GPU memory is given back), then builds the kernels in parallel into a Triton cache only the two
   share while the worker runs, and is stopped before anything is timed; on a GPU a third, the profiling process
   (``ksearch.tools.evaluator.parent.profile_process``), starts the profiler while the worker works and profiles one
   call per timed shape once the worker has exited with a passed verdict;
3. every output the worker hands off goes, through the session, to the trusted checker
   (``ksearch.tools.evaluator.checker.main``), which never imports the candidate, recomputes the reference from the same
   seeds and judges it while the worker waits; a failed check ends the evaluation;
4. the parent computes the timing statistics, the physics floor and the score itself (``verdicts``).

``evaluate(request)`` without a session starts one for the call and closes it after; an agent keeps one session per
GPU so that checkers, reference outputs and the next worker are ready before they are needed. Knows nothing about
the graph or the agent.
"""

from __future__ import annotations

import os
import random
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ksearch import settings
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.contracts.exchange import CheckerCommand, CheckResult, StagingHandle, WorkerRequest
from ksearch.errors import KsearchError, UserError
from ksearch.redaction import redact, redact_json
from ksearch.tools import integrity
from ksearch.tools import timing as timing_mod
from ksearch.tools.containment import allowlist
from ksearch.tools.containment import policy as containment
from ksearch.tools.evaluator.parent.evidence import EXTENSION_MARKERS, probe_wanted, with_evidence
from ksearch.tools.evaluator.parent.gpu_sharing import Sharing, shared_gpu
from ksearch.tools.evaluator.parent.outcome import Outcome
from ksearch.tools.evaluator.parent.probe import ResourceProbe
from ksearch.tools.evaluator.parent.processes import CANDIDATE_FILE, SHARED_DIR, CheckerFailure, WorkerProcess
from ksearch.tools.evaluator.parent.profile_process import ask_profiler, collect, profiler_wanted
from ksearch.tools.evaluator.parent.request import EvalRequest
from ksearch.tools.evaluator.parent.session import SCOUT_CALLS_S, EvaluatorSession
from ksearch.tools.evaluator.parent.verdicts import assemble, parent_environment, worker_failed
from ksearch.tools.evaluator.shared.sandbox import remove_tree
from ksearch.tools.timing.primitives import AUDIT_RATE

if TYPE_CHECKING:
    from ksearch.tasks.base import Task

YARDSTICK_METHOD = "gpumode-benchmark"
"""The method the yardstick (a bare loop of GPU MODE's benchmark mode) is read against."""
NO_SCOUT_MARKERS = EXTENSION_MARKERS
"""Code the compile scout cannot help: a C++/CUDA extension build (the scout would build a second copy the worker
waits for). Code that also uses ``torch.compile`` is scouted: the scout runs those parts eagerly
(``scout.eager_torch_compile``) and builds the candidate's own Triton kernels, which Inductor's compile in the worker
does not."""
HARNESS_RETRY_PAUSE_S = 5.0
"""Pause before an evaluation is run again after a failure of the harness (the checker out of device memory)."""
HARNESS_FAULT = "harness:"
"""How a worker's error starts when the harness failed, not the candidate (``worker.HARNESS_FAULT``)."""
STAGING_ERROR = HARNESS_FAULT + " staging"
"""How a worker reports that it could not open the checker's staging buffer (``worker.STAGING_FAULT``)."""
OUT_OF_MEMORY_VERDICTS = (Verdict.RUNTIME_ERROR, Verdict.CRASHED)
OUT_OF_MEMORY_MARKERS = ("OutOfMemoryError", "CUDA out of memory", "CUDA error: out of memory")
"""How a candidate's own out-of-device-memory failure reads in the worker's error (torch's and the CUDA runtime's)."""


class HarnessError(KsearchError):
    """The evaluator itself failed (its checker died, hung or ran out of device memory twice): no verdict about the
    candidate is possible."""

    hint = "the run is resumable once the machine is healthy: ksearch resume RUN"


def evaluate(request: EvalRequest, *, session: EvaluatorSession | None = None) -> Evaluation:
    """Run the candidate sandboxed and return its typed verdict. Never raises for the candidate's faults; raises
    ``TimingError`` for a timing method the task does not support and ``HarnessError`` when the evaluator broke."""
    from ksearch.tasks.registry import resolve_task  # here, so that importing the evaluator does not import torch

    started = time.monotonic()
    task = resolve_task(request.task)
    allowlist.allow(*task.data_paths())  # the candidate's process builds the task: it reads these files
    method = timing_mod.resolve_method(task, request.timing_method)
    if request.yardstick_rounds and method != YARDSTICK_METHOD:
        raise timing_mod.TimingError(
            f"the yardstick is GPU MODE's benchmark loop, so it is read against {YARDSTICK_METHOD!r}, not {method!r}: "
            f"add --timing-method {YARDSTICK_METHOD}"
        )
    early = static_verdict(request, task)
    if early is not None:
        return early
    if session is None:
        with EvaluatorSession(
            request.device,
            prestart=False,
            salt=request.seed_salt,
            worker_now=True,
            scout_now=wants_scout(request),
            profiler_now=wants_profiler(request, low_memory=False),
        ) as own:
            evaluation = _evaluate_with_retry(own, request, task, method)
    else:
        evaluation = _evaluate_with_retry(session, request, task, method)
    evaluation = evaluation.model_copy(update={"duration_s": round(time.monotonic() - started, 3)})
    return Evaluation.model_validate_json(redact_json(evaluation.model_dump_json()))  # the candidate wrote parts of it


def static_verdict(request: EvalRequest, task: Task) -> Evaluation | None:
    """The verdict reached without running anything: a language the task does not take, or a static rule broken."""
    if str(request.candidate.language) not in task.languages:
        return Evaluation(
            verdict=Verdict.COMPILE_ERROR,
            device=request.device,
            configs_total=len(task.test_configs(request.device)),
            log=f"task {task.name!r} accepts {', '.join(task.languages)} candidates, not {request.candidate.language}",
            environment=parent_environment(),
        )
    trusted = integrity.HARNESS_BASELINE_RULES if request.harness_baseline else frozenset()
    rejection = integrity.check_source(request.candidate.code, task_name=task.name, allow=trusted)
    if rejection is not None:
        return Evaluation(
            verdict=Verdict.REJECTED,
            device=request.device,
            configs_total=len(task.test_configs(request.device)),
            rejection=rejection,
            log=f"rejected ({rejection.rule}): {rejection.evidence}",
            environment=parent_environment(),
        )
    return None


def _evaluate_with_retry(session: EvaluatorSession, request: EvalRequest, task: Task, method: str) -> Evaluation:
    """One evaluation; again after a harness failure (in low-memory mode, kept for the session), after the
    candidate ran out of device memory outside low-memory mode (in it), and on shared host memory when the worker
    cannot open the checker's GPU buffer. A second harness failure raises."""
    for attempt in range(2):
        try:
            evaluation, outcome = _evaluate_once(session, request, task, method)
        except CheckerFailure as exc:
            if attempt:
                raise HarnessError(f"the evaluator's checker failed twice: {exc}") from exc
            continue
        staging_failed = outcome.result is not None and outcome.result.error.startswith(STAGING_ERROR)
        if staging_failed and attempt == 0:
            # The worker's word is the candidate's process speaking; a fresh worker that loads no candidate confirms
            # it before the session moves to host memory (whose crossings the timing rules then allow for). Where
            # that worker opens the buffer, the evaluation runs again on it.
            if _buffer_unopenable(session, request, task, method):
                session.ask_checker(CheckerCommand(op="staging", shm=True), 60.0)
            continue
        if outcome.result is not None and outcome.result.error.startswith(HARNESS_FAULT) and not staging_failed:
            # The harness could not do its part (a task whose declared inputs cannot be re-randomised, say): never
            # the candidate's verdict.
            outcome.harness_error = outcome.harness_error or outcome.result.error.removeprefix(HARNESS_FAULT).strip()
        if outcome.harness_error:
            if attempt:
                advice = _memory_advice(session)
                raise HarnessError(f"the evaluator's checker failed twice: {outcome.harness_error}{advice}")
            session.low_memory = True
            # A GPU shared with another process: let its peak pass (jittered, so two evaluations that collided do not
            # retry in step).
            time.sleep(HARNESS_RETRY_PAUSE_S * random.uniform(1.0, 2.0))
            continue
        if attempt == 0 and not session.low_memory and _candidate_out_of_memory(outcome):
            # The candidate ran out of device memory beside the checker's pipelined references: its verdict is the
            # one it gets in low-memory mode, where the two never hold a large config's tensors at once.
            session.low_memory = True
            continue
        if (
            evaluation.rejection is not None
            and evaluation.rejection.rule == "timing_forgery"
            and not outcome.stopped_out_of_order
        ):
            # A forgery shows in every window of every run; an honest worker descheduled at the wrong moments on a
            # busy host passes the second run. Only a second such verdict stands (messages out of order are no
            # scheduling accident: that verdict stands at once), and not on a GPU someone else keeps busy.
            if attempt == 0:
                continue
            sharing = None if worker_failed(outcome) else _shared_gpu(session)  # the parent's ledger's finding only
            if sharing is not None:
                raise HarnessError(
                    f"no verdict for this candidate: {sharing.describe()} (the evidence that would "
                    f"have rejected it: {redact(evaluation.rejection.evidence[:300])})"
                )
        return evaluation
    raise HarnessError("the evaluator could not complete the evaluation")


def _buffer_unopenable(session: EvaluatorSession, request: EvalRequest, task: Task, method: str) -> bool:
    """Whether a fresh worker, asked only to open the checker's staging buffer (``WorkerRequest.mode`` ``staging``: no
    candidate code runs in it), cannot open it either."""
    if session.staging is None:
        return False
    renewed = session.ask_checker(CheckerCommand(op="staging", renew=True), 60.0)  # the candidate may have spoilt it
    if not renewed.get("ok") or renewed.get("staging") is None:
        return False
    session.staging = StagingHandle.model_validate(renewed["staging"])
    worker = session.take_worker()
    try:
        probe = build_worker_request(request, worker.work, worker.result_path, task, method, salt=0)
        probe.mode, probe.staging, probe.timing, probe.profile = "staging", session.staging, False, False
        outcome = session.run(worker, probe, compile_timeout_s=request.compile_timeout_s, run_timeout_s=60.0)
    finally:
        session.retire(worker)
    return outcome.result is not None and outcome.result.error.startswith(STAGING_ERROR)


def _shared_gpu(session: EvaluatorSession) -> Sharing | None:
    """Whether the session's GPU is busy with someone else's work (``gpu_sharing``), found from its checker."""
    checker = session.checker
    if checker is None or not checker.alive():  # not reaped: its process group stays the session's to kill
        return None
    return shared_gpu(checker.process.pid)


def _candidate_out_of_memory(outcome: Outcome) -> bool:
    result = outcome.result
    return (
        result is not None
        and result.verdict in OUT_OF_MEMORY_VERDICTS
        and any(marker in result.error for marker in OUT_OF_MEMORY_MARKERS)
    )


def _memory_advice(session: EvaluatorSession) -> str:
    return (
        "; the evaluation needs more device memory than is free, even in low-memory mode: free the GPU of other "
        "processes, or evaluate this task on a GPU with more memory"
        if session.low_memory
        else ""
    )


def _evaluate_once(
    session: EvaluatorSession, request: EvalRequest, task: Task, method: str
) -> tuple[Evaluation, Outcome]:
    evaluation_id = session.next_evaluation_id()
    setup_started = time.monotonic()
    bench_salt = request.seed_salt if request.seed_salt is not None else secrets.randbits(62)
    worker: WorkerProcess | None = None
    scout: WorkerProcess | None = None
    profiler: WorkerProcess | None = None
    probe: ResourceProbe | None = None
    shared_cache: Path | None = None
    try:  # taken inside the try: a process that fails to start leaves none of those already taken running
        worker = session.take_worker()
        scout = session.take_scout() if wants_scout(request) else None
        profiler = session.take_profiler() if wants_profiler(request, low_memory=session.low_memory) else None
        # Named unpredictably and created here: the shared folder is writable by every candidate of the session, and
        # an earlier one could otherwise plant kernels or autotuner entries in the next evaluation's cache (a red-team
        # review of 2026-11-28).
        if scout is not None or profiler is not None:
            shared_cache = session.root / SHARED_DIR / f"{evaluation_id}-{secrets.token_hex(8)}-triton"
        if wants_probe(request):  # beside the worker, on the CPU: nothing is timed there
            probe = _start_probe(session.root / f"{evaluation_id}-probe", request, task, method)
        (worker.work / CANDIDATE_FILE).write_text(request.candidate.code, encoding="utf-8")
        if shared_cache is not None:
            shared_cache.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            shared_cache.mkdir(mode=0o700)
        if scout is not None and shared_cache is not None:
            _ask_scout(scout, request, task, method, shared_cache)
        if profiler is not None:  # it waits for the go: nothing of the candidate runs there before the worker ends
            profile_request = build_worker_request(request, profiler.work, profiler.result_path, task, method, salt=0)
            profile_request.triton_cache_dir = str(shared_cache)
            ask_profiler(profiler, request.candidate.code, profile_request)
        staging = session.begin(
            evaluation_id,
            request.task,
            bench_salt,
            request.compile_timeout_s,
            observe_work=not request.harness_baseline,
        )
        if scout is not None and not scout.wait_phase("compile", time.monotonic() + SCOUT_CALLS_S):
            scout.kill()  # stuck in the candidate's code: the worker compiles for itself
        salt = session.salt if request.seed_salt is None else request.seed_salt
        worker_request = build_worker_request(
            request, worker.work, worker.result_path, task, method, salt=salt, bench_salt=bench_salt, staging=staging
        )
        if shared_cache is not None:
            worker_request.triton_cache_dir = str(shared_cache)
        if profiler is not None:
            worker_request.profile = False
            worker_request.cache_autotuning = True  # the profiling process launches the configs this worker chose
        worker_request.low_memory = session.low_memory
        setup_s = time.monotonic() - setup_started
        outcome = session.run(
            worker,
            worker_request,
            compile_timeout_s=request.compile_timeout_s,
            run_timeout_s=request.run_timeout_s,
            evaluation=evaluation_id,
            scout=scout,
            paused=profiler,
        )
        outcome.phase_seconds = {"setup": round(setup_s, 3), **outcome.phase_seconds}
        timed = request.timing and outcome.result is not None and outcome.result.verdict == Verdict.PASSED
        asked = time.monotonic()
        try:
            check = session.finish(evaluation_id, timed=timed, timeout=60.0)
        except CheckerFailure as exc:
            outcome.harness_error = outcome.harness_error or str(exc)
            check = CheckResult(verdict=Verdict.CRASHED, error=str(exc))
        outcome.checker_s += time.monotonic() - asked
        if check.harness_error:
            outcome.harness_error = outcome.harness_error or check.harness_error
        scrub = _scrub(worker)
        evaluation = assemble(request, task, method, outcome, check, scrub)
        if profiler is not None:
            evaluation = _profiled(evaluation, outcome, profiler, request, task)
        report, problem = probe.report(evaluation.verdict) if probe is not None else (None, "")
        evaluation = with_evidence(
            evaluation,
            task,
            device=request.device,
            target_gpu=request.target_gpu,
            worker=outcome.result,
            probe=report,
            probe_problem=problem,
        )
        return _stamp(evaluation, outcome, request.device), outcome
    finally:
        if probe is not None:
            probe.close()
        if profiler is not None:
            session.retire(profiler)
        if scout is not None:
            session.retire(scout, scout=True)
        if worker is not None:
            session.retire(worker)
        if shared_cache is not None:
            remove_tree(shared_cache)


def wants_scout(request: EvalRequest) -> bool:
    return scout_wanted(request.candidate.code, request.device)


def wants_profiler(request: EvalRequest, *, low_memory: bool) -> bool:
    """A profiling process (``profile_process``) for a timed, profiled evaluation on a GPU."""
    return (
        request.profile
        and request.timing
        and profiler_wanted(request.candidate.code, request.device, low_memory=low_memory)
    )


def _profiled(
    evaluation: Evaluation, outcome: Outcome, profiler: WorkerProcess, request: EvalRequest, task: Task
) -> Evaluation:
    """The profiling process's profiles put where the worker's would be (``outcome.result``, read by
    ``with_evidence``), with its stage times; asked for only when the evaluation passed and was timed, so a failed
    or rejected candidate never runs again."""
    go = evaluation.passed and evaluation.timed and outcome.result is not None
    configs = [c.name for c in task.benchmark_configs(request.device)]
    report = collect(profiler, go=go, configs=configs)
    if not go or outcome.result is None:
        return evaluation
    outcome.phase_seconds["profile"] = report.wait_s
    outcome.result = outcome.result.model_copy(
        update={
            "profile": report.profiles,
            "stage_seconds": {**outcome.result.stage_seconds, **report.stage_seconds},
        }
    )
    if report.problem:
        return evaluation.model_copy(update={"environment": {**evaluation.environment, "profile": report.problem}})
    return evaluation


def wants_probe(request: EvalRequest) -> bool:
    """The resource probe (``ksearch.tools.evaluator.worker.aot``): Triton code on the CPU for a target GPU."""
    return probe_wanted(request.candidate.code, request.device, request.target_gpu)


def _start_probe(folder: Path, request: EvalRequest, task: Task, method: str) -> ResourceProbe:
    """The resource probe of ``request``: the candidate's kernels compiled for the target GPU, on public seeds."""
    probe_request = build_worker_request(request, folder, folder, task, method, salt=0, bench_salt=0)
    probe_request.target_gpu = request.target_gpu or ""
    return ResourceProbe(
        folder, request.candidate.code, probe_request, request.compile_timeout_s + request.run_timeout_s
    )


def scout_wanted(code: str, device: str) -> bool:
    """A compile scout pays where the candidate JIT-compiles Triton kernels on a GPU; not for ``NO_SCOUT_MARKERS``."""
    return device.startswith("cuda") and "triton" in code and not any(marker in code for marker in NO_SCOUT_MARKERS)


def _ask_scout(scout: WorkerProcess, request: EvalRequest, task: Task, method: str, shared_cache: Path) -> None:
    """The scout's request: the same candidate, public seeds (no salt), no staging, the shared Triton cache."""
    (scout.work / CANDIDATE_FILE).write_text(request.candidate.code, encoding="utf-8")
    scout_request = build_worker_request(request, scout.work, scout.result_path, task, method, salt=0, bench_salt=0)
    scout_request.mode = "scout"
    scout_request.triton_cache_dir = str(shared_cache)
    scout.send(scout_request.model_dump_json())


def _scrub(worker: WorkerProcess) -> tuple[str, ...]:
    folder = worker.work.parent
    return (str(worker.work) + os.sep, str(worker.io) + os.sep, str(folder))


def _stamp(evaluation: Evaluation, outcome: Outcome, device: str) -> Evaluation:
    """Wall time of each stage, and the containment of its candidate, in the evaluation's environment (so slow
    stages and missing protections are visible to users)."""
    seconds = dict(outcome.phase_seconds)
    seconds["check"] = round(outcome.checker_s, 3)
    if outcome.scout_s is not None:
        seconds["scout"] = outcome.scout_s
    if outcome.result is not None:  # the worker's own breakdown of its profile stage (a diagnostic, like the stage)
        seconds.update({k: v for k, v in outcome.result.stage_seconds.items() if k.startswith("profile_")})
    text = " ".join(f"{k}={v:g}s" for k, v in seconds.items())
    environment = {
        **evaluation.environment,
        "stage_seconds": text,
        **containment.record(device),
        "leased_device": device,
    }
    if evaluation.timed:
        environment["audit_rate"] = f"{audit_rate():g}"
    if outcome.timed_span is not None:
        environment["timed_epoch_s"] = "{:.3f}-{:.3f}".format(*outcome.timed_span)
    return evaluation.model_copy(update={"environment": environment})


def build_worker_request(
    request: EvalRequest,
    work: Path,
    result_path: Path,
    task: Task,
    method: str,
    *,
    salt: int,
    bench_salt: int | None = None,
    staging: StagingHandle | None = None,
) -> WorkerRequest:
    """What the worker in ``work`` is asked to do for ``request``; without ``staging`` nothing is checked (compare)."""
    return WorkerRequest(
        task=request.task,
        device=request.device,
        entry_point=request.candidate.entry_point,
        candidate_path=str(work / CANDIDATE_FILE),
        result_path=str(result_path),
        mode="evaluate",
        timing=request.timing,
        timing_method=method,
        salt=salt,
        bench_salt=salt if bench_salt is None else bench_salt,
        staging=staging,
        flush_l2=task.flush_l2,
        allow_threads=request.harness_baseline,
        observe_work=not request.harness_baseline,
        support_dir=str(work / "_support"),
        yardstick_rounds=request.yardstick_rounds,
        profile=request.profile and request.timing,
        audit_rate=audit_rate(),
    )


def audit_rate() -> float:
    """``KSEARCH_AUDIT_RATE``, a number from 0 to 1: the chance each repeat after a timing loop's first audit is
    re-randomised and audited (default ``AUDIT_RATE``; at 0 a loop still audits at least twice; recorded in each
    evaluation's environment). A ``UserError`` that says what is allowed for anything else."""
    text = settings.AUDIT_RATE.raw().strip()
    if not text:
        return AUDIT_RATE
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not 0.0 <= rate <= 1.0:
        raise UserError(
            f"{settings.AUDIT_RATE.name}={text!r}: give a number from 0 to 1 (the chance each timed repeat is "
            f"re-randomised and audited; default {AUDIT_RATE})"
        )
    return rate
