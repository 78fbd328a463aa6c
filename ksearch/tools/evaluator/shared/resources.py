"""What each compiled Triton kernel asks of the GPU, and whether that fits a GPU's limits.

Figures per kernel (one specialisation): shared memory per block (Triton's ``metadata.shared``), registers and local
memory (spills and stack) per thread, warps and pipeline stages. Registers and local memory come from the driver
where the kernel was loaded on a GPU (what Triton's own launch check reads), else from the cubin's resource table
(``cuobjdump --dump-resource-usage``, the tool ships in Triton's wheel): the same numbers, read without a GPU.

The limit check (``over_limits``) is pure: what a launch of each kernel on the GPU would be refused for, in the
words Triton's ``OutOfResources`` uses (shared memory, threads). A config of an ``@triton.autotune`` kernel that does
not fit is no failure (the autotuner skips it), unless no config of that kernel fits.

The figures are read from Triton's own objects by exact type (``triton_objects``, issue 59): no method, property or
hook of an object the candidate made runs, and an object that only looks like a kernel adds nothing.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ksearch.contracts.evaluation import KernelResources
from ksearch.tools.evaluator.shared import object_access as oa
from ksearch.tools.evaluator.shared.triton_objects import (
    compiled_fields,
    compiled_of,
    metadata_fields,
    module_kernels,
    triton_kinds,
)
from ksearch.tools.gpu_specs import GpuSpec

RESOURCES_LIMIT = 48
"""At most this many distinct kernel figures are kept per evaluation (an autotuned kernel can compile hundreds)."""
_USAGE = re.compile(r"Function ([^\s:]+):\s*\n\s*REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")
WARP = 32
REGISTER_ALLOCATION_UNIT = 256
"""Registers are allocated per warp in units of 256 (8 per thread)."""


def cuobjdump_path() -> str | None:
    """Triton's ``cuobjdump`` (its knob, else the copy in its wheel), or None (registers then stay unknown)."""
    try:
        from triton import knobs

        return knobs.nvidia.cuobjdump.path
    except Exception:  # noqa: BLE001 - an older Triton without the knob: look in its wheel
        pass
    try:
        import triton
    except Exception:  # noqa: BLE001
        return None
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(bundled) if bundled.exists() else None


def cubin_usage(cubin: bytes, name: str) -> tuple[int | None, int | None]:
    """(registers per thread, local memory bytes per thread) of ``name`` in ``cubin``; (None, None) when unreadable."""
    tool = cuobjdump_path()
    if not cubin or tool is None:
        return None, None
    with tempfile.TemporaryDirectory(prefix="ksearch-cubin-") as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            text = subprocess.run(
                [tool, "--dump-resource-usage", str(path)], capture_output=True, text=True, timeout=60, check=False
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None, None
    return parse_usage(text, name)


def parse_usage(text: str, name: str) -> tuple[int | None, int | None]:
    """The REG and STACK + LOCAL figures of function ``name`` in cuobjdump's resource listing (the only function
    when the name is not found: a cubin of Triton's holds one kernel)."""
    found = {m.group(1): (int(m.group(2)), int(m.group(3)) + int(m.group(5))) for m in _USAGE.finditer(text)}
    if name in found:
        return found[name]
    if len(found) == 1:
        return next(iter(found.values()))
    return None, None


def kernel_resources(kernel: Any, *, tuned: bool = False, read_cubin: bool = True) -> KernelResources | None:
    """The figures of one compiled kernel (exactly a Triton ``CompiledKernel``, or a finished ``FutureKernel``); None
    for anything else. Registers and local memory: the driver's where the kernel was loaded, else the cubin's
    (``read_cubin``), else unknown. Read by exact type (``triton_objects``): no code of the candidate's runs."""
    kinds = triton_kinds()
    fields = compiled_fields(kernel, kinds) if kinds is not None else None
    if kinds is None or fields is None:
        return None
    metadata = metadata_fields(oa.field(fields, "metadata"))
    shared = oa.plain_field(metadata, "shared", int)
    if shared is None:
        return None
    name = oa.plain_field(metadata, "name", str) or oa.plain_field(fields, "name", str) or "kernel"
    registers: int | None = None
    spilled: int | None = None
    loaded_registers = oa.plain_field(fields, "n_regs", int)
    if oa.field(fields, "module") is not None and loaded_registers is not None:
        registers = loaded_registers  # loaded on a GPU: the driver's figures
        spilled = (oa.plain_field(fields, "n_spills", int) or 0) * 4  # Triton stores the local size in 4-byte words
    elif read_cubin:
        asm = oa.field(fields, "asm")
        cubin = oa.field(asm, "cubin") if oa.exactly(asm, *kinds.asm) else None
        registers, spilled = cubin_usage(cubin if oa.exactly(cubin, bytes) else b"", name)
    return KernelResources(
        name=name,
        shared_bytes=shared,
        registers=registers,
        spilled_bytes=spilled,
        num_warps=_launch_figure(metadata, "num_warps", 4),
        num_stages=_launch_figure(metadata, "num_stages", 3),
        tuned=tuned,
    )


def _launch_figure(metadata: dict[str, Any], name: str, default: int) -> int:
    value = oa.plain_field(metadata, name, int)
    return default if value is None else value


def distinct(resources: Iterable[KernelResources], limit: int = RESOURCES_LIMIT) -> list[KernelResources]:
    """Each distinct figure once, sorted by kernel name (largest shared memory first within a name), at most
    ``limit``; a kernel launched directly beats the same figures as an autotune config."""
    best: dict[tuple[Any, ...], KernelResources] = {}
    for r in resources:
        key = (r.name, r.shared_bytes, r.registers, r.spilled_bytes, r.num_warps, r.num_stages)
        if key not in best or (best[key].tuned and not r.tuned):
            best[key] = r
    ordered = sorted(best.values(), key=lambda r: (r.name, -r.shared_bytes, r.num_warps, r.num_stages))
    return ordered[:limit]


def problems(r: KernelResources, gpu: GpuSpec) -> list[str]:
    """Why a launch of ``r`` on ``gpu`` would be refused (empty: it fits)."""
    found = []
    if r.shared_bytes > gpu.shared_per_block_optin:
        found.append(
            f"needs {r.shared_bytes} bytes of shared memory per block, but the {gpu.name} allows at most "
            f"{gpu.shared_per_block_optin} ({gpu.shared_per_block_optin // 1024} KB; num_warps={r.num_warps}, "
            f"num_stages={r.num_stages})"
        )
    threads = r.num_warps * WARP
    if threads > gpu.max_threads_per_block:
        found.append(
            f"uses {threads} threads per block (num_warps={r.num_warps}), but the {gpu.name} allows "
            f"{gpu.max_threads_per_block}"
        )
    elif r.registers is not None:
        per_warp = -(-r.registers * WARP // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
        if per_warp * r.num_warps > gpu.registers_per_sm:
            found.append(
                f"needs {per_warp * r.num_warps} registers per block ({r.registers} per thread x "
                f"{threads} threads), but the {gpu.name} has {gpu.registers_per_sm}"
            )
    return found


def over_limits(resources: list[KernelResources], gpu: GpuSpec) -> str:
    """'' when every kernel can launch on ``gpu``; else the compile error's text, naming the kernel, the resource,
    the figure and the limit. Autotune configs count only when none of that kernel's configs fits."""
    lines: list[str] = []
    for r in resources:
        if not r.tuned and (found := problems(r, gpu)):
            lines.append(f"kernel {r.name} " + "; ".join(found))
    tuned_names = sorted({r.name for r in resources if r.tuned})
    for name in tuned_names:
        configs = [r for r in resources if r.tuned and r.name == name]
        if all(problems(r, gpu) for r in configs):
            smallest = min(configs, key=lambda r: (r.shared_bytes, r.num_warps))
            lines.append(
                f"no autotune config of kernel {name} fits ({len(configs)} tried); the smallest "
                + "; ".join(problems(smallest, gpu))
            )
    if not lines:
        return ""
    return (
        " | ".join(lines)
        + f". Found by compiling for the {gpu.name} ({gpu.arch}) before running: the launch would fail there "
        "(Triton: OutOfResources). Use smaller tiles, fewer pipeline stages (num_stages: each stage keeps its own copy "
        "of the tiles a loop loads) or fewer warps."
    )


def tuned_notes(resources: list[KernelResources], gpu: GpuSpec) -> list[str]:
    """A line per autotuned kernel some (not all) of whose configs do not fit: the autotuner skips them."""
    notes = []
    for name in sorted({r.name for r in resources if r.tuned}):
        configs = [r for r in resources if r.tuned and r.name == name]
        bad = [r for r in configs if problems(r, gpu)]
        if bad and len(bad) < len(configs):
            notes.append(
                f"{len(bad)} of {len(configs)} autotune configs of {name} do not fit the {gpu.name} "
                "(the autotuner skips them)"
            )
    return notes


def candidate_kernels(module: Any) -> list[Any]:
    """The Triton JIT functions a candidate module defines (through ``@triton.autotune`` / ``@triton.heuristics``
    wrappers), each once: Triton's own objects only, found by exact type (``triton_objects``)."""
    kinds = triton_kinds()
    found: dict[int, Any] = {}
    for kernel in module_kernels(module):
        if kinds is not None and oa.exactly(kernel.jit, kinds.jit):
            found.setdefault(id(kernel.jit), kernel.jit)
    return list(found.values())


def loaded_resources(module: Any) -> list[KernelResources]:
    """The figures of every kernel of ``module`` compiled in this process (on a GPU: loaded, so the driver's
    registers and local memory), distinct and bounded. A diagnostic, read in the candidate's own process from
    Triton's objects by exact type: nothing of the candidate's runs, and nothing it defines is read."""
    kinds = triton_kinds()
    if kinds is None:
        return []
    out: list[KernelResources] = []
    seen: set[int] = set()
    for kernel in module_kernels(module):
        if not oa.exactly(kernel.jit, kinds.jit) or id(kernel.jit) in seen:
            continue
        seen.add(id(kernel.jit))
        for compiled in compiled_of(kernel.jit_fields, kinds):
            r = kernel_resources(compiled, read_cubin=False)
            if r is not None:
                out.append(r)
    return distinct(out)
