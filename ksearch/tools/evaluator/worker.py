"""The evaluator's candidate worker: runs ONE untrusted candidate in its own process and saves what it returned.

Started by ``ksearch.tools.evaluator`` as ``python -P -m ksearch.tools.evaluator.worker REQUEST.json``, never imported into the
agent's process to run code. It never computes the reference (``task.expected`` is not called here: the reference
lives only in the trusted checker's process, ``ksearch.tools.evaluator.checker``), so there is no answer in this process for a
candidate to find.

One request is one pass:

``correctness``
    every test config once, on inputs made from the salted seed; each output is saved (a CPU copy, ``torch.save``)
    for the checker, with a digest of the inputs.
``timing``
    every benchmark config with a timing method of ``ksearch.tools.timing``; the raw samples are reported (the
    parent computes the statistics) and a sample of the timed outputs is saved for the checker.
``compare``
    two candidates (incumbent and challenger) imported under different module names and timed interleaved.

Around every call of the candidate the worker checks, with references to the harness's functions taken before the
candidate was imported: no timer or harness function was replaced (``timer_monkeypatch``), no thread started by the
candidate is still running (``thread_injection``), the inputs are unchanged (``input_mutation``), the output is a real
``torch.Tensor`` (``lazy_output`` for subclasses) on the right device, and on a GPU that the output does not change
after a device-wide sync (``deferred_work``). Output buffers the task preallocates are poisoned with NaN first.

The report goes to a file, not stdout, because candidates may print; the parent trusts it only for the candidate's
own failures and the timing samples, never for correctness.
"""

from __future__ import annotations


from __future__ import annotations

import faulthandler
import importlib.util
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from ksearch.contracts.evaluation import Mismatch, Rejection, Timing, Verdict
from ksearch.contracts.exchange import CompareSamples, ConfigSamples, OutputRecord, WorkerRequest, WorkerResult
from ksearch.tasks.base import Task, TaskConfig
from ksearch.tasks.registry import resolve_task
from ksearch.tools import timing as timing_mod
from ksearch.tools.evaluator.guard import (
    CandidateFailure,
    Guard,
    clone_inputs,
    count_changed,
    format_exception,
    is_compile_error,
    poison,
    reject,
)
from ksearch.tools.evaluator.sandbox import die_with_parent
from ksearch.tools.evaluator.seeds import input_digest, salted_seed
from ksearch.tools.evaluator.timing_runner import WorkerTimingRunner

CANDIDATE_MODULE = "candidate"
CHALLENGER_MODULE = "challenger"
TIMING_METHOD = "robust"
"""Kept for callers of the first evaluator; the method is now chosen per request (``WorkerRequest.timing_method``)."""


# -- the worker ---------------------------------------------------------------------------------------------------
class Worker:
    """One pass (correctness, timing or compare) over one candidate. Override a phase to harden it further."""

    def __init__(self, request: WorkerRequest, task: Task | None = None) -> None:
        self.request = request
        self.task = task if task is not None else resolve_task(request.task)
        self.device = request.device
        self.phase = "start"
        self.configs_passed = 0
        self.configs_total = 0
        self.records: list[OutputRecord] = []
        self.samples: list[ConfigSamples] = []
        self.comparison: list[CompareSamples] = []
        self.guard: Guard | None = None
        self._perf_counter = time.perf_counter
        self._save: Callable[..., Any] | None = None

    # -- the template -------------------------------------------------------------------------------------------
    def run(self) -> WorkerResult:
        try:
            self.enter("load")
            self.prepare_device()
            self.guard = Guard(allow_threads=self.request.allow_threads)  # before the candidate is imported
            module = self.load_candidate()
            self.verify("importing the candidate")
            if self.request.mode == "correctness":
                self.enter("run")
                self.check_correctness(module)
            elif self.request.mode == "timing":
                self.enter("timing")
                self.measure(module)
            else:
                other = self.load_candidate(self.request.challenger_path, CHALLENGER_MODULE)
                self.verify("importing the challenger")
                self.enter("timing")
                self.compare(module, other)
        except CandidateFailure as failure:
            return self.result(
                failure.verdict, error=failure.error, mismatch=failure.mismatch, rejection=failure.rejection
            )
        return self.result(Verdict.PASSED)

    # -- phases -------------------------------------------------------------------------------------------------
    def prepare_device(self) -> None:
        import torch

        self._save = torch.save
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

    def prepare(self, module: Any, config: TaskConfig) -> Callable[[list[Any]], Any]:
        """The task's callable for this config; failing to build it (e.g. a bad ModelNew constructor) is a runtime error."""
        try:
            fn = self.task.prepare(module, config, self.device)
        except BaseException as exc:  # noqa: BLE001 - anything the candidate raises is its verdict
            raise CandidateFailure(Verdict.RUNTIME_ERROR, f"preparing config {config.name}:\n{format_exception(exc)}") from None
        self.verify(f"preparing config {config.name}")
        return fn

    def salted(self, config: TaskConfig, index: int = 0) -> TaskConfig:
        """``config`` with this evaluation's seed for input set ``index``."""
        seed = salted_seed(config.seed, self.request.salt) + timing_mod.SEED_STRIDE * index
        return config.model_copy(update={"seed": seed})

    def check_correctness(self, module: Any) -> None:
        configs = self.task.test_configs(self.device)
        self.configs_total = len(configs)
        for index, config in enumerate(configs):
            salted = self.salted(config)
            self.check_config(self.prepare(module, salted), salted, index)
            self.configs_passed += 1

    def check_config(self, fn: Callable[[list[Any]], Any], config: TaskConfig, index: int = 0) -> None:
        """One guarded call on fresh inputs; the inputs must be unchanged and the output is saved for the checker."""
        inputs = self.task.make_inputs(config, self.device)
        digest = input_digest(inputs)
        buffers = self.task.output_buffers(config, inputs) or []
        snapshot = clone_inputs(inputs)
        self.poison_free_memory(inputs)
        output = self.guarded_call(fn, inputs, config, buffers)
        self.check_inputs_unchanged(config, inputs, snapshot, buffers)
        self.check_output_form(config, output)
        self.save_output(index, config, config, digest, output, f"test-{index}.pt")

    def guarded_call(
        self, fn: Callable[[list[Any]], Any], inputs: list[Any], config: TaskConfig, buffers: list[Any] = ()
    ) -> Any:
        """Poison output buffers, call, take a stream-ordered copy, sync device-wide, then run every check."""
        poison(buffers)
        self.verify(f"before the call on config {config.name}")
        try:
            output = fn(inputs)
            early = self.early_copy(output)
            self.synchronize()
        except BaseException as exc:  # noqa: BLE001 - anything the candidate raises is its verdict
            verdict = Verdict.COMPILE_ERROR if is_compile_error(exc) else Verdict.RUNTIME_ERROR
            raise CandidateFailure(verdict, f"on config {config.name}:\n{format_exception(exc)}") from None
        self.verify(f"config {config.name}")
        self.check_deferred(config, output, early)
        return output

    def call(self, fn: Callable[[list[Any]], Any], inputs: list[Any], config: TaskConfig) -> Any:
        """One call of the candidate, synchronised so asynchronous device errors surface here (checks included)."""
        return self.guarded_call(fn, inputs, config)

    def early_copy(self, output: Any) -> Any:
        """On a GPU, a copy of the output enqueued on the current stream right after the call (before any sync)."""
        if not self.device.startswith("cuda"):
            return None
        import torch

        tensors = output if isinstance(output, tuple) else (output,)
        if not all(type(t) is torch.Tensor for t in tensors):
            return None
        return [t.detach().clone() for t in tensors]

    def check_deferred(self, config: TaskConfig, output: Any, early: Any) -> None:
        if early is None:
            return
        tensors = output if isinstance(output, tuple) else (output,)
        for position, (now, before) in enumerate(zip(tensors, early, strict=False)):
            changed = count_changed(now, before)
            if changed:
                raise reject(
                    "deferred_work",
                    f"config {config.name}: output {position} changed after a device-wide sync ({changed}): work "
                    "left running on another stream when the kernel returned (join it to the current stream)",
                )

    def check_inputs_unchanged(
        self, config: TaskConfig, inputs: list[Any], snapshot: list[Any], buffers: list[Any] = ()
    ) -> None:
        skip = {id(b) for b in buffers}
        for position, (now, before) in enumerate(zip(inputs, snapshot, strict=True)):
            if id(now) in skip:
                continue
            changed = count_changed(now, before)
            if changed:
                raise reject("input_mutation", f"config {config.name}: input {position} was modified by the call ({changed})")

    def check_output_form(self, config: TaskConfig, output: Any) -> None:
        """Exact type (``torch.Tensor``, or a tuple of them when the task says so), device and a real storage."""
        import torch

        where = config.name
        if self.task.output_is_tuple:
            if type(output) is not tuple:
                self._incorrect(where, f"expected a tuple of torch.Tensor, got {type(output).__qualname__}")
            tensors = list(output)
        else:
            tensors = [output]
        expected_device = torch.device(self.device)
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor) and type(tensor) is not torch.Tensor:
                raise reject(
                    "lazy_output",
                    f"config {where}: the output is a {type(tensor).__qualname__}, a torch.Tensor subclass; "
                    "return a plain torch.Tensor",
                )
            if type(tensor) is not torch.Tensor:
                self._incorrect(where, f"expected a torch.Tensor, got {type(tensor).__qualname__}")
            if tensor.device != expected_device:
                self._incorrect(where, f"device {tensor.device}, expected {expected_device}")
            try:
                real = tensor.numel() == 0 or (tensor.untyped_storage().nbytes() > 0 and tensor.data_ptr() != 0)
            except Exception:  # noqa: BLE001 - no storage at all
                real = False
            if not real:
                raise reject("lazy_output", f"config {where}: the output has no real storage")

    def _incorrect(self, where: str, text: str) -> None:
        message = f"{where}: {text}"
        raise CandidateFailure(Verdict.INCORRECT, message, mismatch=Mismatch(config=where, message=message))

    def save_output(
        self, index: int, prepared: TaskConfig, used: TaskConfig, digest: str, output: Any, file: str,
        stride: list[list[int]] | None = None,
    ) -> None:
        """A CPU copy of the output for the checker (``torch.save``, loaded there with ``weights_only=True``)."""
        if not self.request.outputs_dir:
            return
        tensors = list(output) if isinstance(output, tuple) else [output]
        copies = [t.detach().to("cpu", copy=True) for t in tensors]
        payload = {"output": copies if isinstance(output, tuple) else copies[0]}
        path = Path(self.request.outputs_dir) / file
        assert self._save is not None
        self._save(payload, path)
        record = OutputRecord(
            config_index=index,
            config=prepared.name,
            prepare_seed=prepared.seed,
            input_seed=used.seed,
            digest=digest,
            file=file,
            stride=stride if stride is not None else [list(t.stride()) for t in tensors],
        )
        self.records = [r for r in self.records if r.file != file] + [record]

    def poison_free_memory(self, inputs: list[Any]) -> None:
        """On a GPU, fill and free a block about the size of the inputs with NaN bytes, so an output taken from the
        caching allocator without being written reads as NaN instead of a stale correct answer."""
        if not self.device.startswith("cuda"):
            return
        import torch

        nbytes = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
        nbytes = min(max(nbytes, 1 << 20), 1 << 30)
        block = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        block.fill_(0xFF)
        del block

    # -- timing -----------------------------------------------------------------------------------------------
    def measure(self, module: Any) -> list[Timing]:
        method = timing_mod.get_method(self.request.timing_method)
        configs = self.task.benchmark_configs(self.device)
        self.configs_total = len(configs)
        for index, config in enumerate(configs):
            salted = self.salted(config)
            fn = self.prepare(module, salted)
            runner = WorkerTimingRunner(self, fn, salted, index)
            run = method.run(runner, flush_l2=self.request.flush_l2)
            runner.finish()
            self.samples.append(ConfigSamples(config=config.name, method=method.name, samples_ms=run.samples_ms))
            self.configs_passed += 1
        return []

    def compare(self, incumbent: Any, challenger: Any) -> None:
        """Per benchmark config: ``rounds`` rounds of short robust blocks, A B then B A alternately, same inputs."""
        configs = self.task.benchmark_configs(self.device)
        self.configs_total = len(configs)
        block = timing_mod.Robust(time_cap_s=max(0.05, self.request.time_cap_s / 4), min_samples=self.request.min_samples)
        for index, config in enumerate(configs):
            salted = self.salted(config)
            runners = {
                "a": WorkerTimingRunner(self, self.prepare(incumbent, salted), salted, index, keep=False),
                "b": WorkerTimingRunner(self, self.prepare(challenger, salted), salted, index, keep=False),
            }
            runners["b"].shared = runners["a"].sets  # identical inputs for both
            medians: dict[str, list[float]] = {"a": [], "b": []}
            for round_index in range(self.request.rounds):
                for side in ("ab" if round_index % 2 == 0 else "ba"):
                    run = block.run(runners[side], flush_l2=self.request.flush_l2)
                    medians[side].append(statistics.median(run.samples_ms))
            self.comparison.append(CompareSamples(config=config.name, incumbent_ms=medians["a"], challenger_ms=medians["b"]))
            self.configs_passed += 1

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
            records=self.records,
            samples=self.samples,
            comparison=self.comparison,
        )


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
