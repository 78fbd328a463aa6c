"""How a candidate's latency is measured: named timing methods (``methods``), the pure statistics and stop rules they
use (``stats``), and the physics floor that rejects impossible times (``roofline``)."""

from ksearch.tools.timing.methods import (
    FLUSH_BYTES,
    HEADLINE,
    MAX_INPUT_SETS,
    SEED_STRIDE,
    FlashInfer,
    GpuMode,
    GpuModeBenchmark,
    MethodRun,
    Robust,
    TimingError,
    TimingMethod,
    TimingRunner,
    get_method,
    method_names,
    resolve_method,
)
from ksearch.tools.timing.roofline import DEVICE_PEAKS, FLOOR_FACTOR, DevicePeak, FloorCheck, device_peak, physics_floor
from ksearch.tools.timing.stats import (
    gpumode_should_stop,
    mean_ci,
    relative_standard_error,
    robust_should_stop,
    summarize,
    t_quantile_975,
)

__all__ = [
    "DEVICE_PEAKS",
    "FLOOR_FACTOR",
    "FLUSH_BYTES",
    "HEADLINE",
    "MAX_INPUT_SETS",
    "SEED_STRIDE",
    "DevicePeak",
    "FlashInfer",
    "FloorCheck",
    "GpuMode",
    "GpuModeBenchmark",
    "MethodRun",
    "Robust",
    "TimingError",
    "TimingMethod",
    "TimingRunner",
    "device_peak",
    "get_method",
    "gpumode_should_stop",
    "mean_ci",
    "method_names",
    "physics_floor",
    "relative_standard_error",
    "resolve_method",
    "robust_should_stop",
    "summarize",
    "t_quantile_975",
]
