"""Workloads of a FlashInfer-Bench definition: read from a dataset, or synthesised from the definition's axes.

A workload is a binding of the definition's variable axes plus, per input, where its value comes from. ksearch
turns each into one ``WorkloadSpec`` and then into a ``TaskConfig``.

Synthesis (no dataset: always in CI) follows the published facts about the real workloads:

- decode (MLA, GQA): ``num_kv_indices`` is split into ``batch_size`` lengths >= 1 (no empty sequence, whose
  reference output would be -inf), ``kv_indptr = [0, cumsum]``, ``kv_indices = randperm(num_pages)[:N]``;
- prefill (MLA): ``total_q`` and ``num_kv_indices`` are split over the sequences with ``kv_len >= q_len >= 1``,
  giving ``qo_indptr`` and ``kv_indptr``;
- MoE: ``routing_logits ~ randn``, ``routing_bias ~ 0.1 * randn`` (bf16), fp8 tensors ``randn.clamp(-2, 2)``,
  block scales positive (about 1 / sqrt(reduction length), so outputs stay O(1));
- every other tensor ``randn`` in its dtype, generated on the target device (MLA caches are ~1 GB: never built on
  the host). Index structures are small and built on the CPU from the config's seed, then moved.

What synthesis loses is the real per-request length distribution (the dataset records only totals): that changes
load balance and timing, not correctness. CPU (Triton interpreter) workloads are tiny: page counts scaled down and,
for MoE, a scaled-down hidden/intermediate size (flagged ``cpu_scaled`` in the config).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ksearch.tasks.flashinfer.definitions import GQA_DECODE, MLA_DECODE, MLA_PREFILL, MOE, FlashInferError

GQA_SM_SCALE = 1.0 / math.sqrt(128.0)
MLA_SM_SCALE = (1.0 / math.sqrt(192.0)) * (0.1 * math.log(40.0) + 1.0) ** 2
"""The value in the real MLA workloads: 1/sqrt(128+64) times the YaRN mscale squared (0.1352338)."""
MLA_NUM_PAGES = 989_669
"""Every real MLA decode workload has this many pages (the ckv cache is then 1.01 GB of bf16)."""
MOE_ROUTED_SCALING = 2.5
MOE_CPU_HIDDEN = 256
MOE_CPU_INTERMEDIATE = 128

_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "bool": torch.bool,
}


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload: its id, variable-axis values, scalar inputs, and for dataset workloads the blob inputs."""

    uuid: str
    axes: dict[str, int]
    scalars: dict[str, float | int | bool] = field(default_factory=dict)
    blobs: dict[str, tuple[str, str]] = field(default_factory=dict)
    """input name -> (absolute safetensors path, tensor key); dataset workloads only."""
    synthetic: bool = True
    sequences: int = 0
    """Prefill only: the number of sequences (len_indptr - 1)."""
    cpu_scaled: bool = False


def torch_dtype(name: str) -> torch.dtype:
    dtype = _DTYPES.get(str(getattr(name, "value", name)))
    if dtype is None:
        raise FlashInferError(f"dtype {name!r} is not supported by ksearch's FlashInfer-Bench inputs")
    return dtype


# -- synthetic axis bindings ----------------------------------------------------------------------------------------
def _decode(batch: int, n: int, pages: int, scale: float, tag: str) -> WorkloadSpec:
    return WorkloadSpec(
        uuid=f"synthetic-{tag}-b{batch}-n{n}",
        axes={"batch_size": batch, "num_pages": pages, "len_indptr": batch + 1, "num_kv_indices": n},
        scalars={"sm_scale": scale},
    )


def _prefill(seqs: int, total_q: int, n: int, pages: int) -> WorkloadSpec:
    return WorkloadSpec(
        uuid=f"synthetic-mla-prefill-s{seqs}-q{total_q}-n{n}",
        axes={"total_q": total_q, "num_pages": pages, "len_indptr": seqs + 1, "num_kv_indices": n},
        scalars={"sm_scale": MLA_SM_SCALE},
        sequences=seqs,
    )


def _moe(seq_len: int, offset: int, cpu: bool) -> WorkloadSpec:
    return WorkloadSpec(
        uuid=f"synthetic-moe-t{seq_len}-off{offset}" + ("-cpu" if cpu else ""),
        axes={"seq_len": seq_len},
        scalars={"local_expert_offset": offset, "routed_scaling_factor": MOE_ROUTED_SCALING},
        cpu_scaled=cpu,
    )


# The published ranges (bench reference §1.8): GQA B in {1,16,64}, N 2..61,519, P up to 61,535; MLA decode B in
# {1,16,64}, N 8..75,145, P = 989,669; MLA prefill T 1..16,384, 1..56 sequences, N 5..17,759 >= T; MoE T in
# {1, 7, ..., 14107}, offsets 0..224 (all 8 expert-parallel ranks).
_CUDA: dict[str, list[WorkloadSpec]] = {
    GQA_DECODE: [
        _decode(b, n, n + 16, GQA_SM_SCALE, "gqa")
        for b, n in [
            (1, 8),
            (1, 512),
            (1, 8192),
            (1, 61519),
            (16, 256),
            (16, 1024),
            (16, 4096),
            (16, 32768),
            (64, 64),
            (64, 2048),
            (64, 16384),
            (64, 61519),
        ]
    ],
    MLA_DECODE: [
        _decode(b, n, MLA_NUM_PAGES, MLA_SM_SCALE, "mla")
        for b, n in [
            (1, 8),
            (1, 1024),
            (1, 8192),
            (1, 32768),
            (16, 512),
            (16, 4096),
            (16, 32768),
            (64, 1024),
            (64, 8192),
            (64, 75145),
        ]
    ],
    MLA_PREFILL: [
        _prefill(s, t, n, 2 * n + 1024)
        for s, t, n in [
            (1, 1, 5),
            (2, 7, 300),
            (1, 64, 512),
            (1, 1024, 1024),
            (4, 256, 2048),
            (8, 2048, 4096),
            (16, 4096, 8192),
            (56, 16384, 17759),
        ]
    ],
    MOE: [
        _moe(t, off, cpu=False)
        for t, off in [
            (1, 0),
            (7, 32),
            (14, 64),
            (16, 96),
            (32, 128),
            (52, 160),
            (62, 192),
            (80, 224),
            (901, 0),
            (11948, 96),
            (14107, 224),
        ]
    ],
}
_CPU: dict[str, list[WorkloadSpec]] = {
    GQA_DECODE: [_decode(b, n, p, GQA_SM_SCALE, "gqa") for b, n, p in [(1, 5, 16), (2, 37, 64), (3, 20, 48)]],
    MLA_DECODE: [_decode(b, n, p, MLA_SM_SCALE, "mla") for b, n, p in [(1, 4, 16), (2, 19, 64), (3, 9, 32)]],
    MLA_PREFILL: [_prefill(s, t, n, p) for s, t, n, p in [(1, 1, 3, 16), (2, 5, 12, 32), (3, 7, 20, 64)]],
    MOE: [_moe(t, off, cpu=True) for t, off in [(3, 0), (5, 224), (4, 96)]],
}


def synthetic_workloads(definition: str, device_kind: str) -> list[WorkloadSpec]:
    """The synthetic workloads of a built-in definition for 'cpu' (tiny) or 'cuda' (the published ranges)."""
    table = _CPU if device_kind == "cpu" else _CUDA
    if definition not in table:
        raise FlashInferError(
            f"ksearch cannot synthesise workloads for {definition!r}",
            hint="give a dataset with its workloads: flashinfer:<definition>@/path/to/flashinfer-trace",
        )
    return list(table[definition])


def spread(items: list[Any], k: int, key: Any = None) -> list[Any]:
    """``k`` items evenly spaced over ``items`` sorted by ``key`` (all of them when k >= len), in the sorted order."""
    ordered = sorted(items, key=key) if key is not None else list(items)
    if k >= len(ordered):
        return ordered
    if k <= 1:
        return ordered[len(ordered) // 2 : len(ordered) // 2 + 1]
    picks = sorted({round(i * (len(ordered) - 1) / (k - 1)) for i in range(k)})
    return [ordered[i] for i in picks]


def work_size(spec: WorkloadSpec) -> int:
    """A rough size key to order workloads by (total KV pages, or tokens)."""
    axes = spec.axes
    return int(axes.get("num_kv_indices", axes.get("seq_len", 0))) * 1000 + int(
        axes.get("batch_size", axes.get("total_q", 0))
    )


# -- dataset workloads ----------------------------------------------------------------------------------------------
def load_trace_set(path: str | Path) -> Any:
    """``flashinfer_bench.TraceSet.from_path`` on an existing directory (it would otherwise create it)."""
    from ksearch.tasks.flashinfer.definitions import fib

    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise FlashInferError(f"FlashInfer-Bench dataset {root} does not exist or is not a directory")
    return fib().TraceSet.from_path(str(root))


def dataset_workloads(trace_set: Any, definition: Any) -> list[WorkloadSpec]:
    """The definition's workloads in a TraceSet, in file order; safetensors paths made absolute."""
    traces = trace_set.workloads.get(definition.name, [])
    specs = []
    root = Path(trace_set.root)
    for trace in traces:
        workload = trace.workload
        scalars: dict[str, float | int | bool] = {}
        blobs: dict[str, tuple[str, str]] = {}
        for name, spec in workload.inputs.items():
            kind = spec.type
            if kind == "scalar":
                scalars[name] = spec.value
            elif kind == "safetensors":
                blobs[name] = (str((root / spec.path).resolve()), spec.tensor_key)
        for name, tensor in definition.inputs.items():
            if tensor.shape is None and name not in scalars:
                raise FlashInferError(
                    f"workload {workload.uuid} of {definition.name} gives no value for scalar {name!r}"
                )
        axes = {k: int(v) for k, v in workload.axes.items()}
        sequences = axes.get("len_indptr", 1) - 1
        specs.append(
            WorkloadSpec(
                uuid=workload.uuid, axes=axes, scalars=scalars, blobs=blobs, synthetic=False, sequences=sequences
            )
        )
    return specs


# -- inputs ---------------------------------------------------------------------------------------------------------
def _split(total: int, parts: int, minimum: int, generator: torch.Generator) -> list[int]:
    """``total`` split into ``parts`` random integers, each >= ``minimum``."""
    free = total - parts * minimum
    if parts <= 0 or free < 0:
        raise FlashInferError(f"cannot split {total} into {parts} parts of at least {minimum}")
    if parts == 1:
        return [total]
    cuts = torch.randint(0, free + 1, (parts - 1,), generator=generator).sort().values.tolist()
    edges = [0, *cuts, free]
    return [minimum + edges[i + 1] - edges[i] for i in range(parts)]


def _indptr(lengths: list[int]) -> torch.Tensor:
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32)


def synthetic_structure(definition: str, spec: WorkloadSpec, seed: int) -> dict[str, torch.Tensor]:
    """The index tensors of a synthetic workload (on the CPU): kv_indptr, kv_indices and, for prefill, qo_indptr."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    axes = spec.axes
    if definition in (GQA_DECODE, MLA_DECODE):
        batch, n, pages = axes["batch_size"], axes["num_kv_indices"], axes["num_pages"]
        kv_lengths = _split(n, batch, 1, generator)
    elif definition == MLA_PREFILL:
        seqs, total_q, n, pages = spec.sequences, axes["total_q"], axes["num_kv_indices"], axes["num_pages"]
        q_lengths = _split(total_q, seqs, 1, generator)
        extra = _split(n - total_q, seqs, 0, generator)
        kv_lengths = [q + e for q, e in zip(q_lengths, extra, strict=True)]
    else:
        return {}
    if n > pages:
        raise FlashInferError(f"{spec.uuid}: {n} kv indices do not fit in {pages} pages")
    out = {
        "kv_indptr": _indptr(kv_lengths),
        "kv_indices": torch.randperm(pages, generator=generator)[:n].to(torch.int32),
    }
    if definition == MLA_PREFILL:
        out["qo_indptr"] = _indptr(q_lengths)
    return out


def input_shapes(definition: Any, spec: WorkloadSpec) -> dict[str, list[int] | None]:
    """Each input's concrete shape (None for scalars); MoE on the CPU uses the scaled-down sizes."""
    axes = {**definition.const_axes, **spec.axes}
    if spec.cpu_scaled:
        hidden, inter = MOE_CPU_HIDDEN, MOE_CPU_INTERMEDIATE
        axes.update(
            hidden_size=hidden,
            intermediate_size=inter,
            gemm1_out_size=2 * inter,
            num_hidden_blocks=hidden // 128,
            num_intermediate_blocks=inter // 128,
            num_gemm1_out_blocks=2 * inter // 128,
        )
    return {name: None if t.shape is None else [int(axes[a]) for a in t.shape] for name, t in definition.inputs.items()}


def make_workload_inputs(definition: Any, spec: WorkloadSpec, seed: int, device: str) -> list[Any]:
    """All inputs of one workload, positional in declaration order, scalars as Python numbers."""
    shapes = input_shapes(definition, spec)
    structure = synthetic_structure(definition.name, spec, seed) if spec.synthetic else {}
    generator = torch.Generator(device=device).manual_seed(seed)
    blob_cache: dict[str, dict[str, torch.Tensor]] = {}
    inputs: list[Any] = []
    for name, tensor in definition.inputs.items():
        dtype = torch_dtype(tensor.dtype)
        shape = shapes[name]
        if shape is None:
            value = spec.scalars.get(name)
            if value is None:
                raise FlashInferError(f"workload {spec.uuid} has no value for scalar input {name!r}")
            inputs.append(
                bool(value) if dtype == torch.bool else int(value) if not dtype.is_floating_point else float(value)
            )
            continue
        if name in spec.blobs:
            value = _load_blob(blob_cache, *spec.blobs[name], name=name)
        elif name in structure:
            value = structure[name]
        elif not dtype.is_floating_point and dtype != torch.bool:
            raise FlashInferError(
                f"workload {spec.uuid}: integer input {name!r} has no data (random indices would be invalid)"
            )
        else:
            value = _random(definition.name, name, shape, dtype, generator, device)
        if list(value.shape) != shape or value.dtype != dtype:
            raise FlashInferError(
                f"workload {spec.uuid}: input {name!r} is {value.dtype} {list(value.shape)}, expected {dtype} {shape}"
            )
        inputs.append(value.to(device))
    return inputs


def _load_blob(cache: dict[str, dict[str, torch.Tensor]], path: str, key: str, *, name: str) -> torch.Tensor:
    from safetensors.torch import load_file

    if path not in cache:
        try:
            cache[path] = load_file(path)
        except (OSError, ValueError) as exc:
            raise FlashInferError(f"cannot read {path} for input {name!r}: {exc}") from exc
    if key not in cache[path]:
        raise FlashInferError(
            f"{path} has no tensor {key!r} (input {name!r}); it holds {sorted(cache[path])}",
            hint="the v0.1.2 MoE workloads have this bug; mark those inputs random (upstream fix b8049ff6)",
        )
    return cache[path][key]


def _random(
    definition: str, name: str, shape: list[int], dtype: torch.dtype, generator: torch.Generator, device: str
) -> torch.Tensor:
    """A random tensor made on ``device``; fp8 and block scales as described in the module docstring."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator, device=device).bool()
    if definition == MOE and name.endswith("_scale"):
        # Positive block scales of about 1/sqrt(K), K the length each scale's block is summed over downstream.
        k = {"hidden_states_scale": 1, "gemm1_weights_scale": shape[-1] * 128, "gemm2_weights_scale": shape[-1] * 128}[
            name
        ]
        u = torch.rand(shape, generator=generator, device=device, dtype=torch.float32)
        return (0.5 + u) / math.sqrt(k)
    if definition == MOE and name == "routing_bias":
        return (0.1 * torch.randn(shape, generator=generator, device=device, dtype=torch.float32)).to(dtype)
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        out = torch.empty(shape, dtype=dtype, device=device)
        flat, rows = out.view(shape[0], -1), shape[0]
        for r in range(rows):  # per leading slice, so the float32 temporary stays small (MoE weights are 1.4 GB)
            chunk = torch.randn(flat.shape[1], generator=generator, device=device, dtype=torch.float32)
            flat[r] = chunk.clamp_(-2.0, 2.0).to(dtype)
        return out
    return torch.randn(shape, generator=generator, device=device, dtype=dtype)
