"""The worker's modes beyond ``evaluate``: ``scout`` (compile-only calls that fill the Triton cache the evaluating
worker shares), ``profile`` (a per-kernel profile once the evaluating worker has exited), ``counters`` (calls in
NVTX ranges under Nsight Compute), ``compare`` (two candidates timed interleaved) and the yardstick (a bare GPU MODE
loop beside a method, after the timing). Functions of the worker, so that its class holds the evaluation's phases."""

from __future__ import annotations

import json
import statistics
from typing import TYPE_CHECKING, Any

from ksearch.contracts.evaluation import Verdict, YardstickReading
from ksearch.contracts.exchange import PROFILE_GO, CompareSamples, WorkerResult
from ksearch.tasks.base import TaskConfig
from ksearch.tools.counters.ncu_csv import RANGE_PREFIX
from ksearch.tools.evaluator.profiler.kernel_profile import profile_shapes
from ksearch.tools.evaluator.shared.object_access import exception_text
from ksearch.tools.evaluator.shared.pairing import alternating
from ksearch.tools.evaluator.worker.guard import CandidateFailure, format_exception
from ksearch.tools.evaluator.worker.scout import compile_threads, dry_pass, scouting
from ksearch.tools.evaluator.worker.timing_runner import WorkerTimingRunner
from ksearch.tools.evaluator.worker.worker_process import cache_autotuning
from ksearch.tools.timing.methods import AUDIT_RATE, Robust, TimingMethod

if TYPE_CHECKING:
    from ksearch.tools.evaluator.worker.protocol import WorkerProtocol


def run_scout(worker: WorkerProtocol) -> WorkerResult:
    """Compile-only calls of the candidate on every config's inputs, so its Triton kernels are built in parallel
    into the cache the worker shares (``ksearch.tools.evaluator.worker.scout``); the report is diagnostics only."""
    worker.enter("load")
    worker.prepare_device()
    worker.install_support_modules()
    configs = worker.task.test_configs(worker.device)
    if worker.request.timing:
        configs = configs + worker.task.benchmark_configs(worker.device)
    worker.configs_total = len(configs)
    try:
        with scouting(compile_threads()):
            module = worker.load_candidate()
            worker.mark("import")
            worker.enter("run")
            worker.configs_passed, _ = dry_pass(worker.task, module, configs, worker.device)
            worker.mark("calls")
            worker.enter("compile")  # the session starts the worker's calls now: the scout's memory is given back
        worker.mark("compile")
    except CandidateFailure as failure:
        return worker.result(failure.verdict, error=failure.error)
    return worker.result(Verdict.PASSED)


def run_profiler(worker: WorkerProtocol) -> WorkerResult:
    """A profiling process's work (``ksearch.tools.evaluator.parent.profile_process``): wait for the parent's go (no
    code of the candidate runs here before it, so nothing of this process touches the GPU while the worker times), then
    import the candidate with the autotuner's choices read from the shared cache and profile one call per benchmark
    config (``kernel_profile.profile_shapes``). The report is diagnostics only."""
    worker.enter("load")
    worker.prepare_device()
    worker.install_support_modules()
    worker.enter("armed")
    worker.mark("armed")
    line = worker.channel.answers.readline() if worker.channel.answers is not None else ""
    try:
        go = json.loads(line).get("op") == PROFILE_GO if line.strip() else False
    except (ValueError, AttributeError):
        go = False
    worker.mark("profile_wait")
    if not go:
        return worker.result(Verdict.PASSED)
    worker.enter("profile")
    if worker.request.cache_autotuning:
        cache_autotuning()
    worker.configs_total = len(worker.task.benchmark_configs(worker.device))
    try:
        module = worker.load_candidate()
    except CandidateFailure as failure:
        return worker.result(failure.verdict, error=failure.error)
    worker.mark("profile_import")
    try:
        worker.profiles = profile_shapes(worker, module)
    except Exception as exc:  # noqa: BLE001 - a diagnostic: the parent notes why there is no profile
        return worker.result(Verdict.RUNTIME_ERROR, error=exception_text(exc))
    worker.configs_passed = len(worker.profiles)
    return worker.result(Verdict.PASSED)


def run_counters(worker: WorkerProtocol) -> WorkerResult:
    """A counters worker's work, under Nsight Compute (``ksearch.tools.counters``): per config of
    ``counter_configs``, on public seeds, one unmarked call (compile, autotune, the steady state the timing saw),
    then one call inside the NVTX range ncu profiles. Nothing is checked or timed; ncu's report, written outside
    this process, holds the numbers, and this report only says which calls failed, and where its time went
    (``counters_load``, ``counters_warm``: the unmarked calls, ``counters_profiled``: the marked ones, ncu's replay
    included)."""
    import time

    import torch

    worker.enter("load")
    worker.prepare_device()
    worker.install_support_modules()
    by_name = {c.name: c for c in worker.task.benchmark_configs(worker.device)}
    chosen = [by_name[name] for name in worker.request.counter_configs if name in by_name]
    worker.configs_total = len(chosen)
    try:
        module = worker.load_candidate()
    except CandidateFailure as failure:
        return worker.result(failure.verdict, error=failure.error)
    worker.mark("counters_load")
    worker.enter("counters")
    warm = profiled = 0.0
    for index, config in enumerate(chosen):
        salted = worker.salted(config, worker.request.bench_salt)
        inputs = args = None
        started = time.monotonic()
        try:
            fn = worker.task.prepare(module, salted, worker.device)
            inputs = worker.task.make_inputs(salted, worker.device)
            args = worker.task.call_args(inputs, salted)
            fn(*args)
            torch.cuda.synchronize(worker.device)
            marked = time.monotonic()
            warm += marked - started
            torch.cuda.nvtx.range_push(f"{RANGE_PREFIX}{index}")
            try:
                fn(*args)
                torch.cuda.synchronize(worker.device)
            finally:
                torch.cuda.nvtx.range_pop()
                profiled += time.monotonic() - marked
            worker.configs_passed += 1
        except Exception as exc:  # noqa: BLE001 - a diagnostic: the parent says which call failed
            worker.notes.append(f"{config.name}: {exception_text(exc)}"[:300])
        finally:
            inputs = args = None  # noqa: F841 - this config's tensors go before the next is made
    worker.stages["counters_warm"] = round(warm, 3)
    worker.stages["counters_profiled"] = round(profiled, 3)
    return worker.result(Verdict.PASSED)


def run_yardstick(worker: WorkerProtocol, module: Any, method: TimingMethod, configs: list[TaskConfig]) -> None:
    """After the timing (its verdict and samples are already final), per benchmark config: rounds alternating a
    bare GPU MODE loop (``timing.yardstick``, no ksearch code inside) and ``method`` on the same callable and data
    object, unaudited, in this process, so that the machine's state reaches both alike (``ksearch eval
    --yardstick``)."""
    from ksearch.tools.timing.yardstick import bare_benchmark

    cuda = worker.device.startswith("cuda")
    for index, config in enumerate(configs):
        salted = worker.salted(config, worker.request.bench_salt)
        runner = WorkerTimingRunner(worker, worker.prepare(module, salted), salted, index, audited=False)
        call = runner.call_on(0)  # the data object method.run times too (benchmark mode reuses it)
        bare: list[float] = []
        ours: list[float] = []
        for side in alternating(worker.request.yardstick_rounds):
            if side == "a":
                try:
                    samples = bare_benchmark(call.fn, call.args, cuda=cuda)
                except BaseException as exc:  # noqa: BLE001 - the candidate's failure, here only a diagnostic's
                    raise CandidateFailure(
                        Verdict.RUNTIME_ERROR, f"yardstick on config {config.name}:\n{format_exception(exc)}"
                    ) from None
                bare.append(statistics.fmean(samples))
            else:
                ours.append(statistics.fmean(method.run(runner, flush_l2=worker.request.flush_l2).samples_ms))
        worker.yardstick_readings.append(YardstickReading(config=config.name, bare_ms=bare, ksearch_ms=ours))


def run_compare(worker: WorkerProtocol, incumbent: Any, challenger: Any) -> None:
    """Per benchmark config: ``rounds`` rounds of short robust blocks, A B then B A alternately, same inputs. Audited
    like robust timing where the checker takes handoffs (issue 59: a challenger that replayed where nothing was
    checked won promotion's comparison 81x): each block's last output of either candidate goes to the checker, and
    blocks at random positions end on re-randomised activations."""
    configs = worker.task.benchmark_configs(worker.device)
    worker.configs_total = len(configs)
    audited = worker.staging is not None
    block = Robust(
        time_cap_s=max(0.05, worker.request.time_cap_s / 4),
        min_samples=worker.request.min_samples,
        fresh_value_audits=audited,
        audit_rate=AUDIT_RATE if worker.request.audit_rate is None else worker.request.audit_rate,
    )
    for index, config in enumerate(configs):
        salted = worker.salted(config, worker.request.bench_salt)
        if audited:  # asked before the loop, as ``Worker.measure`` does (its first answer may take seconds)
            try:
                worker.task.activation_inputs(salted)
            except Exception:  # noqa: BLE001 - the loop's own call reports it
                pass
        runners = {
            side: WorkerTimingRunner(
                worker, worker.prepare(module, salted), salted, index, audited=audited, windows=True
            )
            for side, module in (("a", incumbent), ("b", challenger))
        }
        runners["b"].share_inputs_with(runners["a"])  # identical inputs for both
        medians: dict[str, list[float]] = {"a": [], "b": []}
        for run_index, side in enumerate(alternating(worker.request.rounds)):
            runners[side].run = run_index  # the parent assigns each run's windows to a side by this order
            run = block.run(runners[side], flush_l2=worker.request.flush_l2)
            runners[side].end_run()  # names the run's last window: nothing is handed to the checker here
            medians[side].append(statistics.median(run.samples_ms))
        worker.comparison.append(
            CompareSamples(config=config.name, incumbent_ms=medians["a"], challenger_ms=medians["b"])
        )
        worker.configs_passed += 1
