"""What a worker process does around its candidate: start-up before the request (``warm_start``), the heap and the
allocator before timing, diagnostics that never decide a verdict, its environment record and its result file."""

from __future__ import annotations

import gc
import os
import platform
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from ksearch.contracts.exchange import WorkerResult
from ksearch.tools.evaluator.shared.object_access import instance_dict


def interpret_autotune_with_first_config() -> None:
    """Under Triton's interpreter (the CPU), an ``@triton.autotune`` kernel runs its first config instead of
    benchmarking every config (which needs a GPU driver): the kernel is checked for correctness as written."""
    try:
        from triton.runtime import autotuner
    except Exception:  # noqa: BLE001 - no Triton, nothing to adapt
        return
    original = autotuner.Autotuner.__init__
    if getattr(original, "_ksearch_first_config", False):
        return

    read = instance_dict(autotuner.Autotuner)

    def first_config_only(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        fields = read(self)  # ``Autotuner``'s own descriptor: no property or ``__getattr__`` of a subclass runs
        configs = dict.get(fields, "configs")
        if type(configs) is list and len(configs) > 1:
            dict.__setitem__(fields, "configs", configs[:1])

    first_config_only._ksearch_first_config = True  # type: ignore[attr-defined]
    autotuner.Autotuner.__init__ = first_config_only  # type: ignore[method-assign]


def diagnostic(work: Callable[[], Any], fallback: Any) -> Any:
    """A diagnostic's result, or ``fallback`` when it fails (a profiler that cannot start, say): a verdict already
    reached never turns into a crash because of evidence collected after it."""
    try:
        return work()
    except Exception:  # noqa: BLE001 - diagnostics never decide a verdict
        return fallback


def freeze_heap() -> None:
    """Collect once and move what survives out of the collector's reach before timing: this process holds far more
    Python objects than upstream's lean benchmark worker (the harness, pydantic models), and a full collection
    that lands inside a timed call would be charged to the candidate."""
    gc.collect()
    gc.freeze()


def peak_gpu_mib(index: int) -> str:
    """The most device memory this process's allocator held (MiB): what the GPU must have free for the evaluation."""
    import torch

    return str(torch.cuda.max_memory_reserved(index) >> 20)


def release_cached_memory(device: str) -> None:
    """Give the correctness phase's cached blocks back to the driver, so timing starts from the allocator state of
    upstream's benchmark process (which never ran the tests): where buffers land changes small shapes' times."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


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


def cache_autotuning() -> None:
    """Triton's autotuner keeps each key's timings in the Triton cache (``WorkerRequest.cache_autotuning``): read when
    an ``@triton.autotune`` decorator runs, so this comes before the candidate is imported."""
    try:
        from triton import knobs

        knobs.autotuning.cache = True
    except Exception:  # noqa: BLE001 - an older Triton: the profiling process tunes again, nothing else changes
        pass


def warm_start(device: str, *, profiler: bool = False) -> dict[str, float]:
    """What a worker does before its request arrives: import the heavy libraries, create the CUDA context, pay
    Triton's one-off compile start-up (``warmup``) and measure the harness's own costs in a timed window
    (``calibration``), which the ``ready`` message carries to the parent before any candidate code can run here.

    A profiling process (``profiler``) times nothing, so it calibrates nothing; it pays the profiler's one-off start
    instead (``kernel_profile.warm_up``), 4-7 s that would otherwise come after the timing."""
    import torch

    try:
        import triton
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 - tasks without Triton still work
        pass
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.set_device(torch.device(device).index or 0)
        torch.empty(1, device=device)
        try:
            from ksearch.tools.evaluator.worker.warmup import warm_up_triton

            warm_up_triton(device)
        except Exception:  # noqa: BLE001 - a failed warm-up only costs the candidate the start-up time
            pass
        if profiler:
            from ksearch.tools.evaluator.profiler.kernel_profile import warm_up

            diagnostic(lambda: warm_up(device), None)
            return {}
        try:
            from ksearch.tools.evaluator.worker.calibration import calibrate

            figures = calibrate(device)
            torch.cuda.empty_cache()
            return figures
        except Exception:  # noqa: BLE001 - the parent then uses conservative defaults
            return {}
    return {}


def worker_environment(device: str, staging_kind: str | None, *, low_memory: bool) -> dict[str, str]:
    """Versions, device and memory mode of this worker, for the evaluation's record."""
    import torch

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "device_name": "cpu",
        "triton_interpret": os.environ.get("TRITON_INTERPRET", "0"),
    }
    if staging_kind is not None:
        env["staging"] = staging_kind
        env["memory_mode"] = "low" if low_memory else "normal"
    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index or 0
        major, minor = torch.cuda.get_device_capability(index)
        env.update(
            device_name=torch.cuda.get_device_name(index),
            compute_capability=f"{major}.{minor}",
            cuda=str(torch.version.cuda),
            worker_peak_gpu_mib=peak_gpu_mib(index),
        )
    return env
