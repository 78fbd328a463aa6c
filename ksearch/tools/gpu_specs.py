"""What each GPU ksearch knows allows: the limits a kernel must fit (shared memory, registers, threads) and the peaks
its speed is measured against (HBM bandwidth, dense throughput per dtype).

Two uses: a CPU run or eval aimed at a GPU (``--target-gpu h100``) writes and checks kernels for that GPU's limits
without one, and every prompt and evaluation on a GPU carries its figures (the limits read from the device itself
where torch reports them, bandwidth and peaks from this table, which the device does not report).

Figures are NVIDIA's published ones for the variant named: dense (no 2:4 sparsity) tensor-core rates; ``fp32`` is the
non-tensor FMA rate. A figure we are not sure of is left out (None) rather than guessed: a prompt never states it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

KB = 1024


class GpuSpec(BaseModel):
    """One GPU model's limits and peaks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    """What ``--target-gpu`` takes: ``h100``, ``a100``, ..."""
    name: str
    """The variant, as people say it (``H100 SXM5 80GB``)."""
    capability: tuple[int, int]
    """CUDA compute capability (9, 0) -> sm_90."""
    sms: int
    memory_gb: int
    l2_mb: int | None
    shared_per_block_optin: int
    """Bytes of shared memory one block may use after opting in (what Triton's kernels are held to)."""
    shared_per_sm: int
    """Bytes of shared memory per SM (all resident blocks together)."""
    registers_per_sm: int = 65536
    """32-bit registers per SM; one block may use them all."""
    max_registers_per_thread: int = 255
    max_threads_per_sm: int = 2048
    max_threads_per_block: int = 1024
    bandwidth_bytes_s: float
    """Peak HBM (or GDDR) bandwidth."""
    peak_flops: dict[str, float]
    """Dense peak FLOP/s per dtype: fp32 (CUDA cores), tf32, bf16 (= fp16), fp8 where the GPU has it."""

    @property
    def arch(self) -> str:
        """``sm_90``."""
        return f"sm_{self.capability[0]}{self.capability[1]}"

    @property
    def triton_capability(self) -> int:
        """The capability as Triton's ``GPUTarget`` takes it (90)."""
        return self.capability[0] * 10 + self.capability[1]

    def flops_for(self, dtype: str) -> tuple[str, float]:
        """(dtype actually used, its dense peak): ``dtype``'s own, else the fastest below it the GPU has."""
        for candidate in _DTYPE_FALLBACK.get(dtype, (dtype,)):
            if candidate in self.peak_flops:
                return candidate, self.peak_flops[candidate]
        best = max(self.peak_flops, key=lambda k: self.peak_flops[k])
        return best, self.peak_flops[best]

    def describe(self) -> str:
        """The figures in one paragraph, for prompts."""
        peaks = ", ".join(
            f"{_PEAK_LABEL.get(dtype, dtype)} {value / 1e12:g}" for dtype, value in self.peak_flops.items()
        )
        l2 = f", {self.l2_mb} MB L2" if self.l2_mb else ""
        return (
            f"{self.name} ({self.arch}): {self.sms} SMs, {self.memory_gb} GB memory at "
            f"{self.bandwidth_bytes_s / 1e12:g} TB/s{l2}. Per block: at most {_kb(self.shared_per_block_optin)} of "
            f"shared memory ({self.shared_per_block_optin} bytes, with the opt-in Triton uses), "
            f"{self.max_threads_per_block} threads, {self.registers_per_sm} registers (at most "
            f"{self.max_registers_per_thread} per thread; more spill to local memory). Per SM: "
            f"{_kb(self.shared_per_sm)} shared memory, {self.registers_per_sm} registers, {self.max_threads_per_sm} "
            f"threads. Dense peak TFLOP/s: {peaks}."
        )


_PEAK_LABEL = {"fp32": "fp32 (CUDA cores)", "tf32": "tf32", "bf16": "bf16/fp16", "fp8": "fp8"}
_DTYPE_FALLBACK = {
    "fp8": ("fp8", "bf16", "tf32", "fp32"),
    "bf16": ("bf16", "tf32", "fp32"),
    "fp16": ("bf16", "tf32", "fp32"),
    "tf32": ("tf32", "fp32"),
    "fp32": ("fp32",),
}


def _kb(nbytes: int) -> str:
    return f"{nbytes / KB:g} KB"


_HOPPER_SHARED = {"shared_per_block_optin": 227 * KB, "shared_per_sm": 228 * KB}
_AMPERE_SHARED = {"shared_per_block_optin": 163 * KB, "shared_per_sm": 164 * KB}
_H100_PEAKS = {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp8": 1978.9e12}

GPUS: tuple[GpuSpec, ...] = (
    GpuSpec(
        key="a100",
        name="A100 SXM4 80GB",
        capability=(8, 0),
        sms=108,
        memory_gb=80,
        l2_mb=40,
        bandwidth_bytes_s=2.039e12,
        peak_flops={"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12},
        **_AMPERE_SHARED,
    ),
    GpuSpec(
        key="a100-40gb",
        name="A100 SXM4 40GB",
        capability=(8, 0),
        sms=108,
        memory_gb=40,
        l2_mb=40,
        bandwidth_bytes_s=1.555e12,
        peak_flops={"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12},
        **_AMPERE_SHARED,
    ),
    GpuSpec(
        key="l40s",
        name="L40S",
        capability=(8, 9),
        sms=142,
        memory_gb=48,
        l2_mb=96,
        max_threads_per_sm=1536,
        shared_per_block_optin=99 * KB,
        shared_per_sm=100 * KB,
        bandwidth_bytes_s=0.864e12,
        peak_flops={"fp32": 91.6e12, "tf32": 183e12, "bf16": 362e12, "fp8": 733e12},
    ),
    GpuSpec(
        key="h100",
        name="H100 SXM5 80GB",
        capability=(9, 0),
        sms=132,
        memory_gb=80,
        l2_mb=50,
        bandwidth_bytes_s=3.35e12,
        peak_flops=_H100_PEAKS,
        **_HOPPER_SHARED,
    ),
    GpuSpec(
        key="h100-pcie",
        name="H100 PCIe 80GB",
        capability=(9, 0),
        sms=114,
        memory_gb=80,
        l2_mb=50,
        bandwidth_bytes_s=2.0e12,
        peak_flops={"fp32": 51.2e12, "tf32": 378e12, "bf16": 756e12, "fp8": 1513e12},
        **_HOPPER_SHARED,
    ),
    GpuSpec(
        key="h100-nvl",
        name="H100 NVL 94GB",
        capability=(9, 0),
        sms=132,
        memory_gb=94,
        l2_mb=50,
        bandwidth_bytes_s=3.9e12,
        peak_flops={"fp32": 60e12, "tf32": 418e12, "bf16": 835e12, "fp8": 1671e12},
        **_HOPPER_SHARED,
    ),
    GpuSpec(
        key="h200",
        name="H200 SXM 141GB",
        capability=(9, 0),
        sms=132,
        memory_gb=141,
        l2_mb=60,  # as the device reports it (60 MiB, examples/trimul-record): all six memory stacks and their L2
        bandwidth_bytes_s=4.8e12,
        peak_flops=_H100_PEAKS,
        **_HOPPER_SHARED,
    ),
    GpuSpec(
        key="b200",
        name="B200 (HGX, 1000 W)",
        capability=(10, 0),
        sms=148,
        memory_gb=180,
        l2_mb=None,
        bandwidth_bytes_s=8.0e12,
        peak_flops={"fp32": 80e12, "tf32": 1100e12, "bf16": 2250e12, "fp8": 4500e12},
        **_HOPPER_SHARED,
    ),
)
_BY_KEY = {g.key: g for g in GPUS}

DEVICE_NAMES: tuple[tuple[str, str], ...] = (
    ("H100 PCIe", "h100-pcie"),
    ("H100 NVL", "h100-nvl"),
    ("H100", "h100"),
    ("H200", "h200"),
    ("B200", "b200"),
    ("A100-SXM4-40GB", "a100-40gb"),
    ("A100-PCIE-40GB", "a100-40gb"),
    ("A100", "a100"),
    ("L40S", "l40s"),
)
"""Substrings of ``torch.cuda.get_device_name()`` -> table key, most specific first."""


class UnknownGpu(ValueError):
    """A ``--target-gpu`` the table does not hold."""


def target_keys() -> list[str]:
    return [g.key for g in GPUS]


def gpu_spec(key: str) -> GpuSpec:
    """The table's entry for a ``--target-gpu`` value (case and ``nvidia-`` prefix ignored)."""
    wanted = key.strip().lower().removeprefix("nvidia-").removeprefix("nvidia ")
    spec = _BY_KEY.get(wanted)
    if spec is None:
        raise UnknownGpu(f"unknown GPU {key!r}: known targets are {', '.join(target_keys())}")
    return spec


def spec_for_device(device_name: str) -> GpuSpec | None:
    """The entry for a GPU by the name torch reports (``NVIDIA H100 80GB HBM3``), or None when the table lacks it."""
    for needle, key in DEVICE_NAMES:
        if needle in device_name:
            return _BY_KEY[key]
    return None


def measured_spec(table: GpuSpec, properties: dict[str, object]) -> GpuSpec:
    """The table's entry with the limits the device itself reports (torch's device properties, as strings of
    ``DeviceInfo``) put in their place, so a prompt states the machine's own figures where it tells them."""
    update: dict[str, int] = {}
    for field in ("shared_per_block_optin", "shared_per_sm", "registers_per_sm", "max_threads_per_sm", "sms", "l2_mb"):
        value = str(properties.get(field) or "")
        if value.isdigit() and int(value) > 0:
            update[field] = int(value)
    return table.model_copy(update=update)


CPU_NO_TARGET = (
    "CPU with the Triton interpreter (TRITON_INTERPRET=1): kernels are checked for correctness only, not timed. "
    "No GPU is targeted, so no GPU limits apply here and none are checked (shared memory, registers and threads "
    "per block are unknown); to write kernels for a GPU from this machine, start the run with --target-gpu "
    "(h100, h200, b200, a100, ...)."
)


def describe_cpu(target_gpu: str | None) -> str:
    """The CPU interpreter for prompts: plainly without GPU limits, or aimed at ``target_gpu`` with its figures."""
    if not target_gpu:
        return CPU_NO_TARGET
    gpu = gpu_spec(target_gpu)
    return (
        f"CPU with the Triton interpreter (TRITON_INTERPRET=1): kernels are checked for correctness only, not timed. "
        f"They are written for the target GPU {gpu.name}: every Triton kernel is also compiled for {gpu.arch} before "
        f"it is judged, and one that needs more than the limits below is a compile error.\nTarget GPU: "
        + gpu.describe()
    )


LIMITS_PREFIX = "Limits and peaks: "
"""How ``describe_gpu`` starts when the table knows the GPU: its line then states every size (one figure each)."""


def describe_gpu(device_name: str, properties: dict[str, object]) -> str:
    """A GPU's limits and peaks for prompts: the table's figures (the device's own limits where it reports them),
    or only the limits it reports when the table does not know it."""
    table = spec_for_device(device_name)
    if table is not None:
        return LIMITS_PREFIX + measured_spec(table, properties).describe()
    figures = {
        k: str(properties.get(k) or "")
        for k in ("shared_per_block_optin", "shared_per_sm", "registers_per_sm", "max_threads_per_sm")
    }
    if not any(v.isdigit() and int(v) > 0 for v in figures.values()):
        return "Limits and peaks of this GPU are not known to ksearch."
    return (
        f"Limits (from the device): shared memory {figures['shared_per_block_optin']} bytes per block (opt-in), "
        f"{figures['shared_per_sm']} bytes per SM; {figures['registers_per_sm']} registers per SM; "
        f"{figures['max_threads_per_sm']} threads per SM. Bandwidth and peak rates of this GPU are not known to "
        "ksearch."
    )
