"""Compiling a candidate's Triton kernels ahead of time for a GPU, on a machine that need not have one.

Triton compiles for a target it is told (``GPUTarget("cuda", 90, 32)``), and its wheel ships ``ptxas``: nothing of
the compile needs the device. What a launch needs from the driver before it compiles is the current device, stream
and target; ``TargetDriver`` answers those for a GPU of ``ksearch.tools.gpu_specs``, so the candidate's own host code,
called on small CPU tensors with every launch turned into a compile (the compile scout's ``scouting``), specialises
and compiles each kernel exactly as it would on that GPU, in parallel, and nothing runs. ``recording`` notes every
kernel so compiled (and whether an autotuner asked for it) for ``ksearch.tools.evaluator.shared.resources``.

Used by the resource probe (``probe_resources``): on the CPU with a target GPU (``--target-gpu``), a worker process
in mode ``resources`` imports the candidate with the interpreter off, calls it once per CPU config and reports the
figures of every kernel (``WorkerResult.resources``); the parent holds them against the target's limits.

Trust: the probe runs the candidate's code, in its own sandboxed process like any worker, so its report is the
candidate's word. It can only ever turn the candidate's own verdict into a compile error (a kernel over a limit),
never improve a verdict or a score, and the limits are the parent's, so a candidate that lied about its figures
would meet the real limit on the GPU. The figures are those of the CPU configs' specialisations and of the task's
``resource_configs`` (small shapes at the GPU's widths: TriMul's C of 128-768): a kernel whose block sizes follow
another dimension (N, or the row count) is checked for real when it runs on the GPU's shapes.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ksearch.contracts.evaluation import KernelResources, Verdict
from ksearch.tools.evaluator.shared import object_access as oa
from ksearch.tools.evaluator.shared.resources import distinct, kernel_resources
from ksearch.tools.evaluator.shared.triton_objects import source_name, triton_kinds
from ksearch.tools.evaluator.worker.scout import compile_threads, dry_pass, scouting
from ksearch.tools.gpu_specs import GpuSpec, gpu_spec

if TYPE_CHECKING:
    from ksearch.contracts.exchange import WorkerResult

_TUNING: contextvars.ContextVar[bool] = contextvars.ContextVar("ksearch_tuning", default=False)
COMPILE_ERROR_NOTES = 3
"""At most this many compile failures are quoted in the probe's notes."""


class _Utils:
    """The part of ``driver.active.utils`` host code may read (device properties), from the table."""

    def __init__(self, gpu: GpuSpec) -> None:
        self.gpu = gpu

    def get_device_properties(self, device: int = 0) -> dict[str, int]:
        g = self.gpu
        return {
            "max_shared_mem": g.shared_per_block_optin,
            "multiprocessor_count": g.sms,
            "max_num_regs": g.registers_per_sm,
            "warpSize": 32,
            "sm_clock_rate": 0,
            "mem_clock_rate": 0,
            "mem_bus_width": 0,
        }


class TargetDriver:
    """Enough of a Triton driver for a launch with ``warmup=True`` to compile for ``gpu`` without one."""

    def __init__(self, gpu: GpuSpec) -> None:
        self.gpu = gpu
        self.utils = _Utils(gpu)

    @staticmethod
    def is_active() -> bool:
        return True

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", self.gpu.triton_capability, 32)

    @staticmethod
    def get_current_device() -> int:
        return 0

    @staticmethod
    def set_current_device(device: int) -> None:
        return None

    @staticmethod
    def get_current_stream(device: int | None = None) -> int:
        return 0

    @staticmethod
    def get_active_torch_device() -> Any:
        import torch

        return torch.device("cpu")

    def get_benchmarker(self) -> Any:
        raise RuntimeError(f"nothing runs ahead of time: kernels are only compiled for the {self.gpu.name}")


@contextlib.contextmanager
def aimed_at(gpu: GpuSpec) -> Iterator[None]:
    """Triton compiles for ``gpu`` while active (its active driver is ``TargetDriver``); restored after."""
    from triton.runtime.driver import driver

    before = dict(vars(driver))  # Triton versions keep the active driver under different names; restore them all
    driver.set_active(TargetDriver(gpu))
    try:
        yield
    finally:
        for name in [n for n in vars(driver) if n not in before]:
            delattr(driver, name)
        vars(driver).update(before)


@dataclass
class Compiled:
    """What a ``recording`` block compiled: (kernel or Triton future, asked for by an autotuner) per launch, and
    the compile failures."""

    launches: list[tuple[Any, bool]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def resources(self) -> list[KernelResources]:
        """The figures of every kernel that compiled (call after the ``recording`` block: compiles are done)."""
        figures = []
        for kernel, tuned in self.launches:
            r = kernel_resources(kernel, tuned=tuned)
            if r is not None:
                figures.append(r)
        return distinct(figures)


@contextlib.contextmanager
def recording(threads: int) -> Iterator[Compiled]:
    """``scouting`` (every launch compiles instead of running, in a pool of ``threads``), noting each compiled
    kernel and whether an autotuner launched it, and the text of every compile that failed. On exit every compile
    has finished."""
    import triton.compiler
    from triton.runtime import autotuner
    from triton.runtime.jit import JITFunction

    compiled = Compiled()
    original_compile = triton.compiler.compile

    def noting_failures(src: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original_compile(src, *args, **kwargs)
        except Exception as exc:
            kinds = triton_kinds()
            name = (source_name(src, kinds) if kinds is not None else None) or "kernel"
            kind = oa.type_name(exc)
            first = (oa.exception_message(exc).strip().splitlines() or [kind])[-1]
            compiled.failures.append(f"{name}: {kind}: {first[:300]}")
            raise

    with scouting(threads):
        launch = JITFunction.run
        tune = autotuner.Autotuner.run

        def noting(self: Any, *args: Any, **kwargs: Any) -> Any:
            kernel = launch(self, *args, **kwargs)
            if kernel is not None:
                compiled.launches.append((kernel, _TUNING.get()))
            return kernel

        def tuning(self: Any, *args: Any, **kwargs: Any) -> Any:
            token = _TUNING.set(True)
            try:
                return tune(self, *args, **kwargs)
            finally:
                _TUNING.reset(token)

        JITFunction.run = noting  # type: ignore[method-assign]
        autotuner.Autotuner.run = tuning  # type: ignore[method-assign]
        triton.compiler.compile = noting_failures
        try:
            yield compiled
        finally:
            JITFunction.run = launch  # type: ignore[method-assign]
            autotuner.Autotuner.run = tune  # type: ignore[method-assign]
            triton.compiler.compile = original_compile


def probe_resources(worker: Any) -> WorkerResult:
    """The ``resources`` mode of a worker (``ksearch.tools.evaluator.worker.main``): the candidate's kernels compiled
    for ``request.target_gpu`` from calls on every CPU config, their figures reported. Nothing is checked or judged
    here: the parent holds the figures against the target's limits."""
    gpu = gpu_spec(worker.request.target_gpu)
    os.environ["TRITON_INTERPRET"] = "0"  # real JIT functions, compiled for the target instead of interpreted
    worker.enter("load")
    worker.install_support_modules()
    configs = worker.task.test_configs("cpu") + worker.task.benchmark_configs("cpu") + worker.task.resource_configs()
    worker.configs_total = len(configs)
    from ksearch.tools.evaluator.worker.guard import CandidateFailure

    try:
        with aimed_at(gpu), recording(compile_threads()) as compiled:
            module = worker.load_candidate()
            worker.mark("import")
            worker.enter("run")
            worker.configs_passed, _ = dry_pass(worker.task, module, configs, "cpu")
            worker.mark("calls")
            worker.enter("compile")
        worker.mark("compile")
    except CandidateFailure as failure:
        return worker.result(failure.verdict, error=failure.error)
    notes = [
        f"compiling for the {gpu.name} ({gpu.arch}) at the CPU configs' shapes failed for {failure}"
        for failure in compiled.failures[:COMPILE_ERROR_NOTES]
    ]
    return worker.result(Verdict.PASSED).model_copy(update={"resources": compiled.resources(), "notes": notes})
