"""The physics floor: a time below what the device's bandwidth and peak rate allow is rejected as impossible."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DevicePeak:
    """Peak rates, deliberately on the high side so the floor never rejects an honest kernel."""

    name: str
    bandwidth_bytes_s: float
    flops_s: dict[str, float]


# Matched by substring of torch.cuda.get_device_name(), most specific first. Dense (no sparsity) tensor rates.
DEVICE_PEAKS: tuple[tuple[str, DevicePeak], ...] = (
    ("H100 PCIe", DevicePeak("H100 PCIe", 2.0e12, {"fp32": 51.2e12, "tf32": 378e12, "bf16": 756e12, "fp8": 1513e12})),
    ("H100 NVL", DevicePeak("H100 NVL", 3.9e12, {"fp32": 60e12, "tf32": 418e12, "bf16": 835e12, "fp8": 1671e12})),
    ("H100", DevicePeak("H100 SXM", 3.35e12, {"fp32": 67e12, "tf32": 495e12, "bf16": 989e12, "fp8": 1979e12})),
    ("H200", DevicePeak("H200", 4.8e12, {"fp32": 67e12, "tf32": 495e12, "bf16": 989e12, "fp8": 1979e12})),
    ("H20", DevicePeak("H20", 4.0e12, {"fp32": 44e12, "tf32": 74e12, "bf16": 148e12, "fp8": 296e12})),
)
FLOOR_FACTOR = 0.8


def device_peak(gpu_name: str) -> DevicePeak | None:
    for needle, peak in DEVICE_PEAKS:
        if needle in gpu_name:
            return peak
    return None


@dataclass(frozen=True)
class FloorCheck:
    floor_ms: float | None
    """None when the GPU is not in the table (the check is skipped)."""
    violated: bool
    evidence: str


def physics_floor(
    median_ms: float, flops: float, bytes_moved: float, gpu_name: str, compute_dtype: str = "bf16"
) -> FloorCheck:
    """Whether ``median_ms`` is below FLOOR_FACTOR x max(bytes / bandwidth, flops / peak) on ``gpu_name``."""
    peak = device_peak(gpu_name)
    if peak is None:
        return FloorCheck(None, False, f"no roofline peaks known for {gpu_name!r}: physics floor skipped")
    flops_peak = peak.flops_s.get(compute_dtype) or max(peak.flops_s.values())
    memory_ms = bytes_moved / peak.bandwidth_bytes_s * 1e3
    compute_ms = flops / flops_peak * 1e3
    floor_ms = max(memory_ms, compute_ms) * FLOOR_FACTOR
    evidence = (
        f"median {median_ms:.6g} ms is below the physics floor {floor_ms:.6g} ms on {peak.name} "
        f"({FLOOR_FACTOR:g} x max(bytes {bytes_moved:.4g} / {peak.bandwidth_bytes_s / 1e12:g} TB/s = {memory_ms:.6g} "
        "ms, "
        f"flops {flops:.4g} / {flops_peak / 1e12:g} TFLOP/s {compute_dtype} = {compute_ms:.6g} ms))"
    )
    return FloorCheck(floor_ms, median_ms < floor_ms, evidence)
