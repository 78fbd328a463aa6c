"""The evaluator's candidate worker: runs ONE untrusted candidate in its own process.

Started by an evaluator session as ``python -P -m ksearch.tools.evaluator.worker.main --device D`` ahead of need: it
imports torch, Triton and the harness (and creates its CUDA context) while nothing waits for it, then blocks until
the parent writes its ``WorkerRequest`` on stdin. It never computes the reference (``task.expected`` is not called
here: the reference lives only in the trusted checker, ``ksearch.tools.evaluator.checker.main``), so there is no answer
in this process for a candidate to find.

One process does everything for one candidate, so nothing is imported, compiled or autotuned twice:

``evaluate``
    every test config once, on inputs made from the salted seed; each output is copied in stream order into the
    checker's staging buffer and handed off; the checker copies it out before it answers and judges it while the
    next config runs, and the worker settles (waits for every verdict) before timing. Then, when the
    request asks for timing, every benchmark config with a timing method of ``ksearch.tools.timing``: the raw
    samples are reported (the parent computes the statistics) and audited outputs go to the checker the same way.
``compare``
    two candidates (incumbent and challenger) imported under different module names and timed interleaved.
``scout``
    the candidate's Triton kernels compiled ahead of the ``evaluate`` worker of the same evaluation, into the Triton
    cache the two share (``ksearch.tools.evaluator.worker.scout``); nothing is checked or timed.
``counters``
    a process started as ``--role counters`` under Nsight Compute, which calls the candidate once per chosen shape
    inside an NVTX range (``ksearch.tools.counters``); nothing is checked or timed.
``profile``
    a process started as ``--role profiler`` (the profiler's start paid before its request), which waits for the
    parent's go, sent once the evaluate worker has exited, then imports the candidate from the shared Triton cache and
    profiles one call per benchmark config (``ksearch.tools.evaluator.parent.profile_process``); nothing is checked or
    timed.

Around every call of the candidate (never between a timed call's events) the worker checks, with references to the
harness's functions taken before the candidate was imported: no timer or harness function was replaced
(``timer_monkeypatch``), no thread started by the candidate is still running (``thread_injection``), the inputs are
unchanged (``input_mutation``), the output is a real ``torch.Tensor`` (``lazy_output`` for subclasses) on the right
device with no method or property of its own (``tensor_attributes``, on inputs too), and on a GPU that the output
equals its stream-ordered staged copy after a device-wide sync (``deferred_work``). Output buffers the task
preallocates are poisoned with NaN first. Every one of these reads a tensor of the candidate's through torch's own
implementations (``shared.tensor_access``), never a method looked up on it, and the records sent to the checker are
written by hand (``channel.encode_record``); an audit's inputs come from the checker (``receive_inputs``).

Messages: phase names and handoffs go to the parent on a pipe (``KSEARCH_MSG_FD``), answers come back on stdin; the
report goes to a file at the end. The parent trusts the report only for the candidate's own failures and the timing
samples, never for correctness.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from ksearch import settings
from ksearch.contracts.evaluation import (
    KernelResources,
    Mismatch,
    Rejection,
    ShapeProfile,
    TunedChoice,
    Verdict,
    YardstickReading,
)
from ksearch.contracts.exchange import (
    CompareSamples,
    ConfigSamples,
    WorkerRequest,
    WorkerResult,
)
from ksearch.tasks.base import RuleBroken, Task, TaskConfig, WorkPolicy
from ksearch.tasks.registry import resolve_task
from ksearch.tools import timing as timing_mod
from ksearch.tools.evaluator.profiler.kernel_profile import NOTE_CHARS, PROFILE_NOTE, profile_shapes
from ksearch.tools.evaluator.shared.profiling import profiled
from ksearch.tools.evaluator.shared.resources import loaded_resources
from ksearch.tools.evaluator.shared.sandbox import die_with_parent
from ksearch.tools.evaluator.shared.seeds import salted_seed
from ksearch.tools.evaluator.shared.staging import StagingWriter
from ksearch.tools.evaluator.worker import correctness, handoffs
from ksearch.tools.evaluator.worker.aot import probe_resources
from ksearch.tools.evaluator.worker.autotune_choices import autotuners, forget_choices, tuned_choices
from ksearch.tools.evaluator.worker.channel import Channel
from ksearch.tools.evaluator.worker.guard import (
    CandidateFailure,
    Guard,
    format_exception,
    reject,
)
from ksearch.tools.evaluator.worker.timing_runner import HarnessFault, WorkerTimingRunner
from ksearch.tools.evaluator.worker.tuning import WinnowTally, winnowed_tuning
from ksearch.tools.evaluator.worker.work_phases import start_observing
from ksearch.tools.evaluator.worker.worker_modes import (
    run_compare,
    run_counters,
    run_profiler,
    run_scout,
    run_yardstick,
)
from ksearch.tools.evaluator.worker.worker_process import (
    cache_autotuning,
    diagnostic,
    freeze_heap,
    interpret_autotune_with_first_config,
    release_cached_memory,
    warm_start,
    worker_environment,
    write_result,
)

CANDIDATE_MODULE = "candidate"
CHALLENGER_MODULE = "challenger"
_T = TypeVar("_T")


HARNESS_FAULT = "harness:"
"""How a worker's error starts when the harness, not the candidate, failed (the parent retries, then stops)."""
STAGING_FAULT = f"{HARNESS_FAULT} staging: cannot open the checker's buffer"


def prime_activation_probe(task: Any, config: Any) -> None:
    """Ask the task which inputs may be re-randomised before the config's timing loop starts. KernelBench and user
    ops answer by probing their input generator on the meta device, and that first call imports PyTorch's reference
    implementations (seconds: 2.9 s on an H200). Asked first inside the loop, between two windows, it read as work
    done where no sample counts it, and the smoke suite's honest KernelBench and user-op kernels were rejected as
    ``timing_forgery`` (2026-11-27). The answer is cached per config; a failure here is the loop's to report."""
    try:
        task.activation_inputs(config)
    except Exception:  # noqa: BLE001 - fresh_values raises it again where it is handled
        pass


INDUCTOR_SUBDIR = "inductor"
"""Inductor's cache inside an evaluation's shared cache folder (``WorkerRequest.triton_cache_dir``)."""


class Worker:
    """One candidate, one process: load, correctness, timing (or compare). Override a phase to harden it further.

    Slotted, like the guard and the timing runner: a candidate cannot shadow a method on the instance (a no-op
    ``verify`` set on the worker object) since an instance has no dictionary to put it in."""

    __slots__ = (
        "request",
        "channel",
        "task",
        "device",
        "phase",
        "configs_passed",
        "configs_total",
        "samples",
        "yardstick_readings",
        "comparison",
        "guard",
        "staging",
        "stages",
        "_stage_started",
        "spin_cycles_per_ms",
        "device_bytes",
        "resources",
        "profiles",
        "notes",
        "tuning",
        "winnowed",
        "work_policy",
    )

    def __init__(self, request: WorkerRequest, channel: Channel | None = None, task: Task | None = None) -> None:
        self.request = request
        self.channel = channel or Channel(None, None)
        self.task = task if task is not None else resolve_task(request.task)
        self.device = request.device
        self.phase = "start"
        self.configs_passed = 0
        self.configs_total = 0
        self.samples: list[ConfigSamples] = []
        self.yardstick_readings: list[YardstickReading] = []
        self.comparison: list[CompareSamples] = []
        self.guard: Guard | None = None
        self.staging: StagingWriter | None = None
        self.stages: dict[str, float] = {}
        self._stage_started = time.monotonic()
        self.spin_cycles_per_ms: float | None = None
        """Clock cycles of the spin kernel per millisecond on this device (measured by the first timing runner)."""
        self.device_bytes: int | None = None
        """The GPU's memory, read before the candidate is imported (``prepare_device``); None on the CPU."""
        self.resources: list[KernelResources] = []
        self.profiles: list[ShapeProfile] = []
        self.notes: list[str] = []
        self.tuning: list[TunedChoice] = []
        """Per timed config, the config each autotuned kernel kept there (``autotune_choices``)."""
        self.winnowed: WinnowTally | None = None
        """What Triton's autotuners did on the timed configs (``tuning.winnowed_tuning``)."""
        self.work_policy: WorkPolicy | None = None
        """What the task asks the worker to observe of where the work happens (``work_phases``)."""

    # -- the template -------------------------------------------------------------------------------------------
    def run(self) -> WorkerResult:
        if self.request.triton_cache_dir:  # shared with this evaluation's compile scout, and with nobody else
            os.environ["TRITON_CACHE_DIR"] = self.request.triton_cache_dir
            # Inductor's graphs too: the profiling process then loads what torch.compile built in the worker instead
            # of compiling it again (a public leaderboard kernel compiling for small shapes: 19 s of a 92 s verdict
            # were its profiling process recompiling them, H200, 2026-11-29).
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(self.request.triton_cache_dir, INDUCTOR_SUBDIR)
        if self.request.mode == "scout":
            return self.scout()
        if self.request.mode == "resources":
            return probe_resources(self)
        if self.request.mode == "profile":
            return run_profiler(self)
        if self.request.mode == "counters":
            return run_counters(self)
        if self.request.mode == "staging":
            return self.open_staging_only()
        if self.request.cache_autotuning:
            cache_autotuning()
        try:
            self.enter("load")
            self.prepare_device()
            self.install_support_modules()
            if self.request.staging is not None:
                try:
                    self.staging = StagingWriter(self.request.staging)
                except Exception as exc:  # noqa: BLE001 - the parent confirms, then falls back to host memory
                    return self.result(Verdict.CRASHED, error=f"{STAGING_FAULT} ({type(exc).__name__}: {exc})")
            if self.request.mode == "evaluate":
                self.work_policy = start_observing(self)  # its hooks are in place before the guard's references
            self.guard = Guard(allow_threads=self.request.allow_threads)  # before the candidate is imported
            module = self.load_candidate()
            self.verify("importing the candidate")
            if self.request.mode == "evaluate":
                self.enter("run")
                self.check_correctness(module)
                if self.request.timing:
                    self.enter("timing")
                    self.measure(module)
                    if self.request.profile and self.device.startswith("cuda"):
                        self.enter("profile")  # after timing, outside every timed window: diagnostics only
                        self.profiles = self.profile_after_timing(module)
                        self.mark("profile")
                self.resources = diagnostic(lambda: loaded_resources(module), [])
            else:
                other = self.load_candidate(self.request.challenger_path, CHALLENGER_MODULE)
                self.verify("importing the challenger")
                self.enter("timing")
                self.compare(module, other)
        except CandidateFailure as failure:
            return self.result(
                failure.verdict, error=failure.error, mismatch=failure.mismatch, rejection=failure.rejection
            )
        except HarnessFault as fault:
            return self.result(Verdict.CRASHED, error=f"{HARNESS_FAULT} {fault}")
        return self.result(Verdict.PASSED)

    def scout(self) -> WorkerResult:
        """Compile-only calls of the candidate (``worker_modes.run_scout``)."""
        return run_scout(self)

    # -- phases -------------------------------------------------------------------------------------------------
    def open_staging_only(self) -> WorkerResult:
        """Mode ``staging``: whether this process, which loads no candidate, can open the checker's buffer."""
        try:
            self.prepare_device()
            if self.request.staging is not None:
                StagingWriter(self.request.staging).close()
        except Exception as exc:  # noqa: BLE001 - the answer the parent asked for
            return self.result(Verdict.CRASHED, error=f"{STAGING_FAULT} ({type(exc).__name__}: {exc})")
        return self.result(Verdict.PASSED)

    def prepare_device(self) -> None:
        import torch

        try:
            import triton  # noqa: F401 - imported before the candidate so its functions are in the references
        except Exception:  # noqa: BLE001 - a task without Triton candidates still works
            pass
        if self.device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise RuntimeError(f"device {self.device!r} asked for, but CUDA is not available in the worker")
            index = torch.device(self.device).index or 0
            torch.cuda.set_device(index)
            self.device = f"cuda:{index}"  # explicit, so tensors made here compare equal to the kernel's outputs
            self.device_bytes = torch.cuda.get_device_properties(index).total_memory
        elif os.environ.get("TRITON_INTERPRET") == "1":
            interpret_autotune_with_first_config()

    def install_support_modules(self) -> None:
        """The modules the task lets candidates import (GPU MODE's ``task``), first on the import path."""
        modules = self.task.support_modules()
        if not modules or not self.request.support_dir:
            return
        folder = Path(self.request.support_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for name, source in modules.items():
            (folder / f"{name}.py").write_text(source, encoding="utf-8")
        sys.path.insert(0, str(folder))

    def load_candidate(self, path_text: str = "", module_name: str = CANDIDATE_MODULE) -> Any:
        """Import the candidate; an import or syntax error, or a missing entry point, is a compile error."""
        path = Path(path_text or self.request.candidate_path)
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise CandidateFailure(Verdict.COMPILE_ERROR, f"cannot load {path.name} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:  # noqa: BLE001 - anything the candidate raises is its verdict
            raise CandidateFailure(Verdict.COMPILE_ERROR, format_exception(exc)) from None
        entry = self.request.entry_point
        fn = getattr(module, entry, None)
        if fn is None:
            defined = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
            raise CandidateFailure(
                Verdict.COMPILE_ERROR,
                f"{path.name} defines no function {entry!r} (the entry point); it defines: {', '.join(defined) or '-'}",
            )
        if not callable(fn):
            raise CandidateFailure(Verdict.COMPILE_ERROR, f"{entry!r} in {path.name} is not callable")
        return module

    def prepare(self, module: Any, config: TaskConfig) -> Callable[..., Any]:
        """The task's callable for this config; failing to build it (e.g. a bad ModelNew constructor) is a runtime
        error."""
        try:
            fn = self.task.prepare(module, config, self.device)
        except RuleBroken as broken:  # the task's own rule (KernelBench: construction_draws): a rejection
            raise reject(broken.rule, f"preparing config {config.name}: {broken.evidence}") from None
        except BaseException as exc:  # noqa: BLE001 - anything the candidate raises is its verdict
            raise CandidateFailure(
                Verdict.RUNTIME_ERROR, f"preparing config {config.name}:\n{format_exception(exc)}"
            ) from None
        self.verify(f"preparing config {config.name}")
        return fn

    def salted(self, config: TaskConfig, salt: int | None = None) -> TaskConfig:
        """``config`` with this evaluation's seed (the correctness salt unless ``salt`` is given)."""
        seed = salted_seed(config.seed, self.request.salt if salt is None else salt)
        return config.model_copy(update={"seed": seed})

    # the correctness phase (``correctness``)
    check_correctness = correctness.check_correctness
    check_config = correctness.check_config
    check_inputs_unchanged = correctness.check_inputs_unchanged
    poison_free_memory = correctness.poison_free_memory

    # -- outputs for the checker (``handoffs``) ------------------------------------------------------------------
    stage = handoffs.stage
    check_staged = handoffs.check_staged
    handoff = handoffs.handoff
    settle = handoffs.settle
    ask = handoffs.ask
    _quiet_device = handoffs._quiet_device
    receive_inputs = handoffs.receive_inputs
    _answered = staticmethod(handoffs._answered)

    # -- timing -----------------------------------------------------------------------------------------------
    def measure(self, module: Any) -> None:
        freeze_heap()
        release_cached_memory(self.device)
        method = timing_method(self.request)
        configs = self.task.benchmark_configs(self.device)
        self.configs_total = len(configs)
        # each timed config's key is tuned at its first, untimed call: the full benchmark for the contenders only
        tuners = diagnostic(lambda: autotuners(module), [])
        with winnowed_tuning() if self.request.winnowed_tuning else contextlib.nullcontext() as tally:
            self.winnowed = tally
            for index, config in enumerate(configs):
                diagnostic(lambda: forget_choices(tuners), None)
                salted = self.salted(config, self.request.bench_salt)
                prime_activation_probe(self.task, salted)
                runner = WorkerTimingRunner(self, self.prepare(module, salted), salted, index)
                if index == 0:
                    warm = WorkerTimingRunner(self, self.prepare(module, salted), salted, index, audited=False)
                    method.warm_up(warm, flush_l2=self.request.flush_l2)
                    del warm
                run = method.run(runner, flush_l2=self.request.flush_l2)
                self.samples.append(ConfigSamples(config=config.name, method=method.name, samples_ms=run.samples_ms))
                self.tuning.extend(diagnostic(partial(tuned_choices, tuners, config.name), []))
                self.configs_passed += 1
                del runner
        self.mark("timing")
        if self.request.yardstick_rounds > 0:
            self.enter("yardstick")  # its loops are diagnostics: the parent's ledger counts no window of them
            self.yardstick(module, method, configs)
            self.mark("yardstick")

    def yardstick(self, module: Any, method: timing_mod.TimingMethod, configs: list[TaskConfig]) -> None:
        """A bare GPU MODE loop beside ``method`` after the timing (``worker_modes.run_yardstick``)."""
        run_yardstick(self, module, method, configs)

    def compare(self, incumbent: Any, challenger: Any) -> None:
        """Two candidates timed interleaved (``worker_modes.run_compare``)."""
        run_compare(self, incumbent, challenger)

    # -- helpers ------------------------------------------------------------------------------------------------
    def verify(self, where: str) -> None:
        if self.guard is not None:
            self.guard.verify(where)

    def synchronize(self) -> None:
        if self.device.startswith("cuda"):
            sync = self.guard.refs["torch.cuda.synchronize"][2] if self.guard else None
            if sync is None:
                import torch

                sync = torch.cuda.synchronize
            sync(self.device)

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.channel.phase(phase)

    def mark(self, stage: str) -> None:
        now = time.monotonic()
        self.stages[stage] = round(now - self._stage_started, 3)
        self._stage_started = now

    def environment(self) -> dict[str, str]:
        env = worker_environment(
            self.device,
            self.staging.handle.kind if self.staging is not None else None,
            low_memory=self.request.low_memory,
        )
        if self.winnowed is not None and self.winnowed.keys:
            env["autotuning"] = self.winnowed.describe()  # the candidate's process wrote it: a note, never a verdict
        return env

    def profile_after_timing(self, module: Any) -> list[ShapeProfile]:
        """The per-kernel profile taken in this process once the timing is over (a diagnostic: a failure leaves a note
        for the evaluation, ``PROFILE_NOTE``, never a verdict)."""
        try:
            return profile_shapes(self, module)
        except Exception as exc:  # noqa: BLE001 - diagnostics never decide a verdict
            self.notes.append(f"{PROFILE_NOTE}{type(exc).__name__}: {exc}"[:NOTE_CHARS])
            return []

    def result(
        self, verdict: Verdict, *, error: str = "", mismatch: Mismatch | None = None, rejection: Rejection | None = None
    ) -> WorkerResult:
        return WorkerResult(
            verdict=verdict,
            phase=self.phase,
            configs_passed=self.configs_passed,
            configs_total=self.configs_total,
            mismatch=mismatch,
            rejection=rejection,
            error=error,
            environment=self.environment(),
            samples=self.samples,
            comparison=self.comparison,
            stage_seconds=self.stages,
            yardstick=self.yardstick_readings,
            resources=self.resources,
            profile=self.profiles,
            tuning=self.tuning,
            notes=self.notes,
        )


def timing_method(request: WorkerRequest) -> timing_mod.TimingMethod:
    """The timing method ``request`` names, re-randomising at the rate the parent chose (``KSEARCH_AUDIT_RATE``)."""
    return timing_mod.get_method(request.timing_method, audit_rate=request.audit_rate)


def main(argv: list[str] | None = None) -> int:
    faulthandler.enable()  # a segfault still leaves a Python stack in stderr for the log
    parent = settings.PARENT_PID.number()
    if parent is not None:
        die_with_parent(parent)
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--role", choices=("worker", "profiler", "counters"), default="worker")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    channel = Channel(settings.MSG_FD.number(), sys.stdin, settings.DOORBELL_FD.number())
    # a counters worker runs under Nsight Compute: it times nothing, so it calibrates nothing
    calibration = {} if args.role == "counters" else warm_start(args.device, profiler=args.role == "profiler")
    channel.send(json.dumps({"op": "ready", "calibration": calibration}))
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # the session closed without using this worker
    request = WorkerRequest.model_validate_json(line)
    with profiled("worker"):
        result = Worker(request, channel).run()
    write_result(Path(request.result_path), result)
    return 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # skip atexit hooks and non-daemon threads a candidate may have left behind
