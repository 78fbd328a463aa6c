"""The evaluator's worker: runs ONE untrusted candidate in its own process and writes its verdict to a JSON file.

Started by ``ksearch.tools.evaluator`` as ``python -P -m ksearch.tools.worker REQUEST.json``, never imported into the
agent's process to run code. The result goes to a file, not stdout, because candidates may print. Each phase is a
method of ``Worker`` (a template method) so a hardened evaluator can override one phase (output poisoning, rechecks,
static rules) without rewriting the others.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import math
import os
import platform
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ksearch.tasks.base import Task, TaskConfig
from ksearch.tasks.registry import resolve_task
from ksearch.tools.evaluation import Mismatch, Rejection, Timing, Verdict

CANDIDATE_MODULE = "candidate"
TIMING_METHOD = "cuda-events, device sync before end event, L2 flush before each call"


class WorkerRequest(BaseModel):
    """What the parent asks of one worker process (written as JSON next to the candidate)."""

    model_config = ConfigDict(extra="forbid")

    task: str
    device: str
    entry_point: str
    candidate_path: str
    result_path: str
    timing: bool = False
    status_fd: int | None = None
    """Pipe to the parent; the worker writes each phase name on it so the parent applies the right time limit."""
    time_cap_s: float = 2.0
    """Stop sampling a benchmark config after this long (once min_samples are taken)."""
    min_samples: int = 10
    target_rel_se: float = 0.01
    """Stop sampling once stdev / sqrt(n) / mean falls below this."""
    flush_bytes: int = 256 * 1024 * 1024
    """Bytes written before each timed call to evict the L2 cache."""


class WorkerResult(BaseModel):
    """What the worker reports. The parent turns it into an Evaluation (and computes the score itself)."""

    model_config = ConfigDict(extra="forbid")

    verdict: Verdict
    phase: str
    configs_passed: int = 0
    configs_total: int = 0
    mismatch: Mismatch | None = None
    rejection: Rejection | None = None
    timings: list[Timing] = Field(default_factory=list)
    error: str = ""
    """The candidate's exception with its traceback, or a one-line reason."""
    environment: dict[str, str] = Field(default_factory=dict)


class CandidateFailure(Exception):
    """Raised inside a phase to end the evaluation with a verdict other than passed."""

    def __init__(
        self,
        verdict: Verdict,
        error: str,
        *,
        mismatch: Mismatch | None = None,
        rejection: Rejection | None = None,
    ) -> None:
        super().__init__(error)
        self.verdict = verdict
        self.error = error
        self.mismatch = mismatch
        self.rejection = rejection


class Worker:
    """Load, check correctness, then (on a GPU) time one candidate. Override a phase to harden it."""

    def __init__(self, request: WorkerRequest, task: Task | None = None) -> None:
        self.request = request
        self.task = task if task is not None else resolve_task(request.task)
        self.device = request.device
        self.phase = "start"
        self.configs_passed = 0
        self.configs_total = 0

    # -- the template -------------------------------------------------------------------------------------------
    def run(self) -> WorkerResult:
        timings: list[Timing] = []
        try:
            self.enter("load")
            self.prepare_device()
            module = self.load_candidate()
            self.enter("run")
            self.check_correctness(module)
            if self.request.timing:
                self.enter("timing")
                timings = self.measure(module)
        except CandidateFailure as failure:
            return self.result(
                failure.verdict, error=failure.error, mismatch=failure.mismatch, rejection=failure.rejection
            )
        return self.result(Verdict.PASSED, timings=timings)

    # -- phases -------------------------------------------------------------------------------------------------
    def prepare_device(self) -> None:
        import torch

        if self.device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise RuntimeError(f"device {self.device!r} asked for, but CUDA is not available in the worker")
            index = torch.device(self.device).index or 0
            torch.cuda.set_device(index)
            self.device = f"cuda:{index}"  # explicit, so tensors made here compare equal to the kernel's outputs

    def load_candidate(self) -> Any:
        """Import candidate.py; an import or syntax error, or a missing entry point, is a compile error."""
        path = Path(self.request.candidate_path)
        spec = importlib.util.spec_from_file_location(CANDIDATE_MODULE, path)
        if spec is None or spec.loader is None:
            raise CandidateFailure(Verdict.COMPILE_ERROR, f"cannot load {path.name} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[CANDIDATE_MODULE] = module
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

    def prepare(self, module: Any, config: TaskConfig) -> Callable[[list[Any]], Any]:
        """The task's callable for this config; failing to build it (e.g. a bad ModelNew constructor) is a runtime error."""
        try:
            return self.task.prepare(module, config, self.device)
        except BaseException as exc:  # noqa: BLE001 - anything the candidate raises is its verdict
            raise CandidateFailure(Verdict.RUNTIME_ERROR, f"preparing config {config.name}:\n{format_exception(exc)}") from None

    def check_correctness(self, module: Any) -> None:
        configs = self.task.test_configs(self.device)
        self.configs_total = len(configs)
        for config in configs:
            self.check_config(self.prepare(module, config), config)
            self.configs_passed += 1

    def check_config(self, fn: Callable[[list[Any]], Any], config: TaskConfig) -> None:
        """Reference first, on a pristine clone; then the candidate on the originals; then inputs and output."""
        inputs = self.task.make_inputs(config, self.device)
        expected = self.task.expected(config, clone_inputs(inputs))
        snapshot = clone_inputs(inputs)
        output = self.call(fn, inputs, config)
        self.check_inputs_unchanged(config, inputs, snapshot)
        self.check_output(config, output, expected)

    def call(self, fn: Callable[[list[Any]], Any], inputs: list[Any], config: TaskConfig) -> Any:
        """One call of the candidate, synchronised so asynchronous device errors surface here."""
        try:
            output = fn(inputs)
            self.synchronize()
        except BaseException as exc:  # noqa: BLE001 - anything the candidate raises is its verdict
            verdict = Verdict.COMPILE_ERROR if is_compile_error(exc) else Verdict.RUNTIME_ERROR
            raise CandidateFailure(verdict, f"on config {config.name}:\n{format_exception(exc)}") from None
        return output

    def check_inputs_unchanged(self, config: TaskConfig, inputs: list[Any], snapshot: list[Any]) -> None:
        for position, (now, before) in enumerate(zip(inputs, snapshot, strict=True)):
            changed = count_changed(now, before)
            if changed:
                evidence = f"config {config.name}: input {position} was modified by the call ({changed})"
                raise CandidateFailure(
                    Verdict.REJECTED, evidence, rejection=Rejection(rule="input_mutation", evidence=evidence)
                )

    def check_output(self, config: TaskConfig, output: Any, expected: Any) -> None:
        mismatch = self.task.check(config, output, expected)
        if mismatch is not None:
            raise CandidateFailure(Verdict.INCORRECT, mismatch.message, mismatch=mismatch)

    def measure(self, module: Any) -> list[Timing]:
        return [
            self.time_config(self.prepare(module, config), config) for config in self.task.benchmark_configs(self.device)
        ]

    def time_config(self, fn: Callable[[list[Any]], Any], config: TaskConfig) -> Timing:
        """Warm up, then time single calls with device events until the relative standard error is small."""
        import torch

        inputs = self.task.make_inputs(config, self.device)
        expected = self.task.expected(config, clone_inputs(inputs))
        snapshot = clone_inputs(inputs)
        flush = torch.empty(self.request.flush_bytes // 4, dtype=torch.int32, device=self.device)

        started, calls = time.perf_counter(), 0
        while calls < 3 or (calls < 100 and time.perf_counter() - started < 0.1):
            output = self.call(fn, inputs, config)
            calls += 1
        self.check_output(config, output, expected)

        start_event = torch.cuda.Event(enable_timing=True)
        end_event = torch.cuda.Event(enable_timing=True)
        samples: list[float] = []
        started = time.perf_counter()
        while True:
            flush.zero_()
            start_event.record()
            output = self.call(fn, inputs, config)  # synchronises the whole device before the end event
            end_event.record()
            end_event.synchronize()
            samples.append(start_event.elapsed_time(end_event))
            if len(samples) >= self.request.min_samples and (
                relative_standard_error(samples) < self.request.target_rel_se
                or time.perf_counter() - started > self.request.time_cap_s
            ):
                break
        self.check_output(config, output, expected)  # the last timed output must be right too
        self.check_inputs_unchanged(config, inputs, snapshot)
        return Timing(
            config=config.name,
            median_ms=statistics.median(samples),
            mean_ms=statistics.fmean(samples),
            stdev_ms=statistics.stdev(samples) if len(samples) > 1 else 0.0,
            samples=len(samples),
            method=TIMING_METHOD,
        )

    # -- helpers ------------------------------------------------------------------------------------------------
    def synchronize(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)

    def enter(self, phase: str) -> None:
        self.phase = phase
        if self.request.status_fd is not None:
            try:
                os.write(self.request.status_fd, f"{phase}\n".encode())
            except OSError:
                pass  # the parent enforces limits from its own clock; a lost phase only costs precision

    def environment(self) -> dict[str, str]:
        import torch

        env = {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "triton": _version("triton"),
            "device_name": "cpu",
            "triton_interpret": os.environ.get("TRITON_INTERPRET", "0"),
        }
        if self.device.startswith("cuda") and torch.cuda.is_available():
            index = torch.device(self.device).index or 0
            major, minor = torch.cuda.get_device_capability(index)
            env.update(
                device_name=torch.cuda.get_device_name(index),
                compute_capability=f"{major}.{minor}",
                cuda=str(torch.version.cuda),
            )
        return env

    def result(
        self,
        verdict: Verdict,
        *,
        error: str = "",
        mismatch: Mismatch | None = None,
        rejection: Rejection | None = None,
        timings: list[Timing] | None = None,
    ) -> WorkerResult:
        return WorkerResult(
            verdict=verdict,
            phase=self.phase,
            configs_passed=self.configs_passed,
            configs_total=self.configs_total,
            mismatch=mismatch,
            rejection=rejection,
            timings=timings or [],
            error=error,
            environment=self.environment(),
        )


def clone_inputs(inputs: list[Any]) -> list[Any]:
    import torch

    return [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def count_changed(now: Any, before: Any) -> str:
    """'' when ``now`` still equals ``before`` bit for bit (NaN equals NaN); else what changed, for evidence."""
    import torch

    if not isinstance(before, torch.Tensor):
        return "" if now == before else "value replaced"
    if not isinstance(now, torch.Tensor) or now.shape != before.shape or now.dtype != before.dtype:
        return "tensor replaced or reshaped"
    if torch.equal(now, before):
        return ""
    same = now == before
    if now.is_floating_point() or now.is_complex():
        same |= torch.isnan(now) & torch.isnan(before)
    changed = int((~same).sum())
    return f"{changed} of {now.numel()} elements changed" if changed else ""


def relative_standard_error(samples: list[float]) -> float:
    mean = statistics.fmean(samples)
    if len(samples) < 2 or mean <= 0:
        return math.inf
    return statistics.stdev(samples) / math.sqrt(len(samples)) / mean


def is_compile_error(exc: BaseException) -> bool:
    """Triton compiles at the first call, so its compile errors arrive as call-time exceptions."""
    names = {"CompilationError", "OutOfResources", "PTXASError"}
    return any(cls.__name__ in names and cls.__module__.startswith("triton") for cls in type(exc).__mro__)


def format_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).rstrip()


def write_result(path: Path, result: WorkerResult) -> None:
    """Atomic, so the parent never reads half a result."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(result.model_dump_json(), encoding="utf-8")
    os.replace(partial, path)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this worker when the agent dies (even by SIGKILL), so no orphan keeps a GPU busy."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    faulthandler.enable()  # a segfault still leaves a Python stack in stderr for the log
    if os.environ.get("KSEARCH_PARENT_PID"):
        die_with_parent(int(os.environ["KSEARCH_PARENT_PID"]))
    args = sys.argv[1:] if argv is None else argv
    request = WorkerRequest.model_validate_json(Path(args[0]).read_text(encoding="utf-8"))
    result = Worker(request).run()
    write_result(Path(request.result_path), result)
    return 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # skip atexit hooks and non-daemon threads a candidate may have left behind
