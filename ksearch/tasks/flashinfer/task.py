"""``FlashInferTask``: one FlashInfer-Bench definition as a ksearch task.

Names (resolved by ``ksearch.tasks.registry``)::

    flashinfer:<definition>[@<dataset path>][?search=N&final=1&baseline=<json path>]

- without ``@path`` (and without ``$FIB_DATASET_PATH``) the definition must be one of the four built in
  (``definitions/*.json``) and its workloads are synthesised (``workloads.py``); the spec says so. With ``@path``
  or ``$FIB_DATASET_PATH`` (a flashinfer-trace layout, read with ``TraceSet.from_path``) the definition and its
  workloads come from the dataset. The task's ``name`` is canonical: the environment variable is folded into it as
  ``@/absolute/path``, because the evaluator's worker resolves the name again with a scrubbed environment.
- every workload is a ``TaskConfig`` (params = the variable axes, the workload uuid, ``synthetic``; seed = the
  structure/value seed). ``test_configs('cuda')`` = all workloads (correctness); ``benchmark_configs('cuda')`` = a
  representative subset of ``search`` workloads (default 5) spread over the work size, or all with ``final=1``.
  On the CPU both are the tiny synthetic set (the interpreter is slow).
- a candidate is a module defining ``run(*inputs)``, inputs positional in declaration order, scalars as Python
  numbers, returning the output tensor or a tuple of outputs in declaration order (value-returning, i.e.
  flashinfer-bench's ``destination_passing_style=False``).
- correctness as flashinfer-bench 0.1.2: shape, dtype, no inf/NaN in the candidate's output, then an element fails
  only if ``|x-y| > atol`` AND ``|x-y| / (|y| + 1e-8) > rtol`` (atol = rtol = 1e-2); the fraction of matching
  elements must be >= ``required_matched_ratio`` (1.0; 0.95 for MoE, as 0.1.2's LowBitEvaluator).
- score: with baseline latencies for every timed config (``baseline=`` JSON ``{"configs": {name: ms}}``, made by
  ``ksearch.tasks.flashinfer.baseline`` by timing the definition's reference as a candidate in the same evaluator
  and timing mode), score = arithmetic mean over configs of baseline_ms / candidate ms (the median; the mean for
  the ``flashinfer`` timing method, as 0.1.2 reports), K-Search's
  ``mean_vs_baseline``; only passed candidates are timed, so a failing workload never yields a score. Without a
  baseline the score is the default 1 / geometric-mean latency (the spec says which).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import torch

import ksearch.tasks.flashinfer.definitions as defs
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Mismatch, Timing
from ksearch.tasks.base import InputRole, Task, TaskConfig, device_kind
from ksearch.tasks.flashinfer.baseline import reference_candidate as _reference_candidate
from ksearch.tasks.flashinfer.definitions import FlashInferError
from ksearch.tasks.flashinfer.workloads import (
    WorkloadSpec,
    dataset_workloads,
    load_trace_set,
    make_workload_inputs,
    spread,
    synthetic_workloads,
    work_size,
)

PREFIX = "flashinfer:"
DATASET_ENV = "FIB_DATASET_PATH"
DEFAULT_SEARCH_WORKLOADS = 5
FIB_ATOL = 1e-2
FIB_RTOL = 1e-2
LOWBIT_MATCHED_RATIO = 0.95
SEED_BASE = 7000


def parse_name(name: str) -> tuple[str, str | None, dict[str, str]]:
    """'flashinfer:<def>[@path][?k=v&...]' -> (definition, dataset path or None, options)."""
    if not name.startswith(PREFIX):
        raise FlashInferError(f"not a FlashInfer-Bench task name: {name!r} (expected {PREFIX}<definition>)")
    rest, _, query = name[len(PREFIX) :].partition("?")
    definition, _, dataset = rest.partition("@")
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = set(options) - {"search", "final", "baseline"}
    if unknown or not definition:
        raise FlashInferError(
            f"bad FlashInfer-Bench task name {name!r}" + (f": unknown options {sorted(unknown)}" if unknown else ""),
            hint="use flashinfer:<definition>[@DATASET][?search=N&final=1&baseline=FILE.json]",
        )
    return definition, dataset or None, options


def canonical_name(
    definition: str,
    dataset: str | Path | None = None,
    *,
    search: int | None = None,
    final: bool = False,
    baseline: str | Path | None = None,
) -> str:
    """The task name the evaluator's worker can resolve on its own: absolute paths, ``FIB_DATASET_PATH`` folded in."""
    if dataset is None and os.environ.get(DATASET_ENV):
        dataset = os.environ[DATASET_ENV]
    name = PREFIX + definition + (f"@{Path(dataset).expanduser().resolve()}" if dataset else "")
    options: dict[str, str] = {}
    if search is not None:
        options["search"] = str(search)
    if final:
        options["final"] = "1"
    if baseline is not None:
        options["baseline"] = str(Path(baseline).expanduser().resolve())
    return name + (f"?{urlencode(options)}" if options else "")


class FlashInferTask(Task):
    entry_point = "run"
    languages = ("triton", "cuda")
    atol = FIB_ATOL
    rtol = FIB_RTOL
    timing_methods: tuple[str, ...] = ("robust", "flashinfer")
    """``flashinfer`` is flashinfer-bench 0.1.2's own procedure (``ksearch.tools.timing``), for parity with its
    numbers."""
    default_timing_method = "robust"

    def __init__(self, name: str) -> None:
        definition_name, dataset, options = parse_name(name)
        dataset = dataset or os.environ.get(DATASET_ENV) or None
        self.name = canonical_name(
            definition_name,
            dataset,
            search=int(options["search"]) if "search" in options else None,
            final=options.get("final", "0") not in ("", "0", "false"),
            baseline=options.get("baseline") or None,
        )
        self.dataset = str(Path(dataset).expanduser().resolve()) if dataset else None
        if dataset is None:
            self.definition = defs.load_builtin_definition(definition_name)
            self._cuda_workloads = synthetic_workloads(definition_name, "cuda")
            self._cpu_workloads = synthetic_workloads(definition_name, "cpu")
        else:
            trace_set = load_trace_set(dataset)
            if definition_name not in trace_set.definitions:
                raise FlashInferError(f"dataset {dataset} has no definition {definition_name!r}")
            self.definition = trace_set.definitions[definition_name]
            self._cuda_workloads = dataset_workloads(trace_set, self.definition)
            if not self._cuda_workloads:
                raise FlashInferError(f"dataset {dataset} has no workloads for {definition_name!r}")
            try:  # the dataset's workloads are real-sized: the interpreter gets ksearch's tiny synthetic ones
                self._cpu_workloads = synthetic_workloads(definition_name, "cpu")
            except FlashInferError:
                self._cpu_workloads = []
        self.title = f"FlashInfer-Bench {definition_name}" + (" (synthetic workloads)" if dataset is None else "")
        self.search_workloads = int(options.get("search", DEFAULT_SEARCH_WORKLOADS))
        self.final = options.get("final", "0") not in ("", "0", "false")
        self.baseline_ms: dict[str, float] = {}
        self._baseline_file = str(Path(options["baseline"]).expanduser().resolve()) if options.get("baseline") else None
        if options.get("baseline"):
            self.baseline_ms = load_baseline(options["baseline"])
        self.output_is_tuple = len(self.definition.outputs) > 1
        self.roofline_compute_dtype = "fp8" if "fp8" in definition_name else "bf16"
        self.required_matched_ratio = LOWBIT_MATCHED_RATIO if "moe_fp8_block_scale" in definition_name else 1.0
        self._configs = {"cuda": self._to_configs(self._cuda_workloads), "cpu": self._to_configs(self._cpu_workloads)}
        self._specs = {c.name: s for kind in ("cuda", "cpu") for c, s in self._configs[kind]}

    # -- configs ------------------------------------------------------------------------------------------------
    def data_paths(self) -> tuple[str, ...]:
        return tuple(p for p in (self.dataset, self._baseline_file) if p)

    def _to_configs(self, specs: list[WorkloadSpec]) -> list[tuple[TaskConfig, WorkloadSpec]]:
        out = []
        for i, spec in enumerate(specs):
            params: dict[str, int | float | str | bool] = {
                **spec.axes,
                "workload": spec.uuid,
                "synthetic": spec.synthetic,
            }
            if spec.cpu_scaled:
                params["cpu_scaled"] = True
            name = spec.uuid if spec.synthetic else f"w{i:02d}-{spec.uuid[:8]}"
            out.append((TaskConfig(name=name, params=params, seed=SEED_BASE + i), spec))
        return out

    def workloads(self, device: str) -> list[tuple[TaskConfig, WorkloadSpec]]:
        return list(self._configs[device_kind(device)])

    def test_configs(self, device: str) -> list[TaskConfig]:
        configs = [c for c, _ in self._configs[device_kind(device)]]
        if not configs:
            raise FlashInferError(f"{self.definition.name}: no workloads small enough for the CPU interpreter")
        return configs

    def benchmark_configs(self, device: str) -> list[TaskConfig]:
        pairs = self._configs[device_kind(device)]
        if self.final or device_kind(device) == "cpu":
            return [c for c, _ in pairs]
        return [c for c, _ in spread(pairs, self.search_workloads, key=lambda p: work_size(p[1]))]

    # -- inputs, reference ----------------------------------------------------------------------------------------
    def make_inputs(self, config: TaskConfig, device: str) -> list[Any]:
        return make_workload_inputs(self.definition, self._specs[config.name], config.seed, device)

    def input_roles(self, config: TaskConfig) -> tuple[InputRole, ...]:
        """Queries and KV caches (MoE: logits, activations and their scales) are activations; page tables and
        lengths structure; weights, scales of weights and scalars parameters (``definitions.input_role``)."""
        return tuple(
            defs.input_role(self.definition.name, name, str(getattr(t.dtype, "value", t.dtype)), t.shape)
            for name, t in self.definition.inputs.items()
        )

    def activation_inputs(self, config: TaskConfig) -> tuple[int, ...]:
        """The activations, less those a dataset workload reads from a file: a fresh seed would give them the same
        values, so swapping them in would check nothing new."""
        blobs = self._specs[config.name].blobs
        return tuple(
            i
            for i, (role, name) in enumerate(zip(self.input_roles(config), self.definition.inputs, strict=True))
            if role is InputRole.ACTIVATION and name not in blobs
        )

    def _reference_fn(self) -> Callable[..., Any]:
        fn = getattr(self, "_ref_cache", None)
        if fn is None:
            namespace: dict[str, Any] = {"__name__": f"fib_reference_{self.definition.name}"}
            exec(compile(self.definition.reference, (f"<reference {self.definition.name}>"), "exec"), namespace)  # noqa: S102
            fn = self._ref_cache = namespace["run"]
        return fn

    def reference(self, *inputs: Any) -> Any:
        out = self._reference_fn()(*inputs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    def reference_source(self) -> str:
        return self.definition.reference

    def reference_candidate(self) -> Candidate:
        """The definition's reference, timed like a solution for the mean-speedup baseline."""
        return _reference_candidate(self)

    def reference_latencies_ms(self) -> dict[str, float]:
        """The reference's latencies from the baseline file named by ``?baseline=`` ({} without one)."""
        return self.baseline_ms

    def flashinfer_definition(self) -> str:
        return str(self.definition.name)

    def candidate_from_file(self, text: str, language: str) -> tuple[str, str]:
        """A FlashInfer-Bench Solution JSON becomes the Python module it describes; any other file is used as it is."""
        from ksearch.tasks.flashinfer.solution import candidate_code_from_solution, looks_like_solution_json

        if not looks_like_solution_json(text):
            return text, language
        code, solution_language = candidate_code_from_solution(text, self.definition)
        return code, solution_language if solution_language in ("triton", "cuda") else language

    def output_names(self) -> list[str]:
        return list(self.definition.outputs)

    # -- prompt text ----------------------------------------------------------------------------------------------
    def spec(self, language: str) -> str:
        if language not in self.languages:
            raise ValueError(f"task {self.name!r} has no spec for language {language!r}; it supports {self.languages}")
        d = self.definition
        lines = [f"FlashInfer-Bench definition {d.name} (op_type {d.op_type})."]
        if d.description:
            lines.append(d.description)
        lines.append("\nAxes:")
        for axis, spec in d.axes.items():
            kind = f"const = {spec.value}" if spec.type == "const" else "variable"
            lines.append(f"  {axis}: {kind}" + (f"  ({spec.description})" if spec.description else ""))
        for title, group in (
            ("Inputs (positional, in this order)", d.inputs),
            ("Outputs (return in this order)", d.outputs),
        ):
            lines.append(f"\n{title}:")
            for n, t in group.items():
                shape = "scalar (a Python number)" if t.shape is None else "[" + ", ".join(t.shape) + "]"
                dtype = getattr(t.dtype, "value", t.dtype)
                lines.append(f"  {n}: {shape} {dtype}" + (f"  ({t.description})" if t.description else ""))
        if d.constraints:
            lines.append("\nConstraints: " + "; ".join(d.constraints))
        outs = ", ".join(d.outputs)
        lines += [
            "",
            f"Write a {'Triton' if language == 'triton' else 'CUDA (torch.utils.cpp_extension.load_inline)'} "
            f"implementation as a Python module defining `run({', '.join(d.inputs)})` that returns "
            + (f"the tuple ({outs})." if len(d.outputs) > 1 else f"{outs}.")
            + " Allocate the outputs yourself (value-returning, not destination-passing). Do not modify the inputs.",
            "Correctness as flashinfer-bench 0.1.2: outputs must have the exact shapes and dtypes, contain no "
            "inf/NaN, "
            f"and an element fails only if |x-y| > {self.atol:g} and |x-y|/(|y|+1e-8) > {self.rtol:g}; "
            f"at least {self.required_matched_ratio:.0%} of the elements of each output must match.",
            self._workload_text(),
            self._score_text(),
            "",
            "Reference implementation:",
            d.reference,
        ]
        return "\n".join(lines)

    def _workload_text(self) -> str:
        cuda = self._cuda_workloads
        src = (
            f"{len(cuda)} workloads from the dataset at {self.dataset}"
            if self.dataset
            else f"{len(cuda)} SYNTHETIC workloads (no dataset: index structures and values generated from the axes "
            "over the published ranges; the real per-request length distribution is not reproduced)"
        )
        shown = "; ".join(", ".join(f"{k}={v}" for k, v in s.axes.items()) for s in cuda[:12])
        return f"Workloads: {src}. Axis values: {shown}."

    def _score_text(self) -> str:
        if self.baseline_ms:
            return (
                "Score: mean over the timed workloads of reference_latency / your_latency (the definition's reference "
                "timed the same way); every workload must pass."
            )
        return "Score: 1 / geometric-mean latency over the timed workloads; every workload must pass."

    # -- calling and checking -------------------------------------------------------------------------------------
    def prepare(self, module: Any, config: TaskConfig, device: str) -> Callable[..., Any]:
        return getattr(module, self.entry_point)

    def expected(self, config: TaskConfig, inputs: list[Any]) -> Any:
        with torch.no_grad():
            return self.reference(*inputs)

    def check(self, config: TaskConfig, output: Any, expected: Any) -> Mismatch | None:
        where = config.name
        names = self.output_names()
        outputs = tuple(output) if isinstance(output, (tuple, list)) else (output,)
        if len(outputs) != len(expected):
            return Mismatch(
                config=where,
                message=f"{where}: returned {len(outputs)} outputs, expected {len(expected)} ({', '.join(names)})",
            )
        for name, got, want in zip(names, outputs, expected, strict=True):
            mismatch = self._check_one(where, name, got, want)
            if mismatch is not None:
                return mismatch
        return None

    def _check_one(self, where: str, name: str, got: Any, want: torch.Tensor) -> Mismatch | None:
        label = f"{where}: output {name!r}"
        if not isinstance(got, torch.Tensor):
            return Mismatch(config=where, message=f"{label}: expected a torch.Tensor, got {type(got).__qualname__}")
        if got.shape != want.shape:
            return Mismatch(config=where, message=f"{label}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
        if got.dtype != want.dtype:
            return Mismatch(config=where, message=f"{label}: dtype {got.dtype}, expected {want.dtype}")
        if got.device != want.device:
            return Mismatch(config=where, message=f"{label}: device {got.device}, expected {want.device}")
        if got.numel() == 0:
            return None
        x = got.detach().to(torch.float64)
        bad_values = ~torch.isfinite(x)
        if bool(bad_values.any()):
            first = [int(i) for i in torch.nonzero(bad_values)[0]]
            return Mismatch(
                config=where,
                worst_index=first,
                message=f"{label}: {int(bad_values.sum())} inf/NaN values, first at {first}: {x[tuple(first)].item()}",
            )
        y = want.detach().to(torch.float64)
        diff = (x - y).abs()
        rel = diff / (y.abs() + 1e-8)
        failed = (diff > self.atol) & (rel > self.rtol)
        n_failed = int(failed.sum())
        matched = 1.0 - n_failed / failed.numel()
        if matched >= self.required_matched_ratio:
            return None
        finite = torch.isfinite(diff)
        score = torch.where(failed & finite, diff, torch.zeros_like(diff))
        worst = [int(i) for i in torch.unravel_index(torch.argmax(score), score.shape)]
        max_abs = float(diff[finite].max()) if bool(finite.any()) else math.inf
        max_rel = float(rel[finite].max()) if bool(finite.any()) else math.inf
        return Mismatch(
            config=where,
            max_abs_error=max_abs,
            max_rel_error=max_rel,
            worst_index=worst,
            message=f"{label}: {n_failed} of {failed.numel()} values fail "
            f"(|x-y| > {self.atol:g} and rel > {self.rtol:g}; "
            f"matched {matched:.4f} < required {self.required_matched_ratio:g}); max abs error {max_abs:.3g}, "
            f"max rel error {max_rel:.3g}; worst at {worst}: got {x[tuple(worst)].item():.6g}, "
            f"expected {y[tuple(worst)].item():.6g}",
        )

    # -- scoring --------------------------------------------------------------------------------------------------
    def score(self, timings: list[Timing]) -> tuple[float, float]:
        """(geometric-mean latency, mean speedup over the baseline) when a baseline covers every timed config; else
        the default (geometric-mean latency, 1 / latency)."""
        latency_ms, default_score = super().score(timings)
        if self.baseline_ms and all(t.config in self.baseline_ms for t in timings):
            speedups = [self.baseline_ms[t.config] / max(t.headline_ms, 1e-6) for t in timings]
            return latency_ms, sum(speedups) / len(speedups)
        return latency_ms, default_score

    def flops_and_bytes(self, config: TaskConfig) -> tuple[float, float]:
        """Lower bounds: the bytes of every input actually read (caches only at the referenced pages) and outputs."""
        spec = self._specs[config.name]
        axes = {**self.definition.const_axes, **spec.axes}
        d = self.definition.name
        if d in (defs.GQA_DECODE, defs.MLA_DECODE):
            n, b, h = axes["num_kv_indices"], axes["batch_size"], axes["num_qo_heads"]
            per_token = 2 * 4 * 128 if d == defs.GQA_DECODE else 576
            flops = 4.0 * n * h * (128 if d == defs.GQA_DECODE else 576)
            return flops, 2.0 * n * per_token + 2.0 * b * h * (128 if d == defs.GQA_DECODE else 1088)
        if d == defs.MLA_PREFILL:
            t, n, h = axes["total_q"], axes["num_kv_indices"], axes["num_qo_heads"]
            return 2.0 * t * h * 576 * 2, 2.0 * n * 576 + 2.0 * t * h * 1088
        if d == defs.MOE:
            t = axes["seq_len"]
            hidden = 256 if spec.cpu_scaled else axes["hidden_size"]
            # How many routes land on this rank's experts is data dependent (possibly none): count only the routing,
            # the activations in and the output out.
            return 0.0, float(t * hidden * 3 + t * 256 * 4)
        return 0.0, 0.0


def load_baseline(path: str | Path) -> dict[str, float]:
    """``{"configs": {config name: baseline ms}}`` from a JSON file (see ``ksearch.tasks.flashinfer.baseline``)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return {str(k): float(v) for k, v in data["configs"].items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FlashInferError(f"cannot read FlashInfer baseline latencies from {path}: {exc}") from exc
