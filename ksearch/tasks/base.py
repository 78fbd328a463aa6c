"""The task protocol: what a kernel must compute, on which inputs, how it is checked and how its speed is scored.

A task is pure definition plus behaviour; it never calls the evaluator. The evaluator's worker uses it in the
candidate's process to build inputs and the candidate's call; the trusted checker uses it to build the same inputs
and the reference; the parent uses it only to turn timings into a score.

How a candidate is called: ``prepare`` gives the callable (once per config) and ``call_args`` the argument objects
built from one input set. The timed call is exactly ``fn(*args)``: for GPU MODE tasks ``custom_kernel(data)``, with
``data`` built once per input set and reused as the leaderboard's harness reuses it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Mismatch, Timing

MIN_LATENCY_MS = 1e-6
"""Floor for a per-config median before the geometric mean, so one absurd time cannot drive the aggregate to 0."""


class TaskConfig(BaseModel):
    """One input configuration: a shape (``params``), a seed and a value distribution."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    params: dict[str, int | float | str | bool]
    seed: int
    distribution: str = "normal"


class InputRole(StrEnum):
    """What one input of ``make_inputs`` is, which decides whether a check may swap fresh values into it.

    After a timing loop the evaluator copies fresh values into the activations of an input set that was already timed
    and checks one more call, so an output replayed from an earlier call fails while what a kernel rightly keeps
    between calls (derived weights, a plan built from the page table) stays valid."""

    ACTIVATION = "activation"
    """Changes from call to call in real use (x, a query, the KV cache of another layer): a tensor whose shape and
    dtype do not depend on the seed, only its values, so fresh values can be copied into it in place."""
    STRUCTURE = "structure"
    """Where the data is or how much there is (indices, page tables, indptr, lengths): fixed for a batch, and a kernel
    may plan from it (FlashInfer's plan/run split does). Its values depend on the seed and may change sizes the other
    inputs are read with, so it is never swapped."""
    PARAMETER = "parameter"
    """Fixed for a model (weights, block scales, biases, scalars such as ``sm_scale``): a kernel may cache what it
    derives from them. Never swapped; Python scalars cannot be written in place anyway."""


@dataclass(frozen=True)
class ExpectedSample:
    """The reference on a grid of one output tensor's positions (per dimension every position or a subset): what an
    audit on re-randomised inputs compares when the task can compute it for much less than the whole reference
    (``Task.expected_sample``)."""

    shape: tuple[int, ...]
    """The whole output's shape."""
    axes: tuple[torch.Tensor | None, ...]
    """Per dimension of the output, the positions sampled (a 1-D index tensor), or None for every position."""
    values: torch.Tensor
    """The reference on the grid: per dimension, the length of its positions (or of the whole dimension)."""

    @property
    def positions(self) -> int:
        return self.values.numel()

    def gather(self, output: torch.Tensor) -> torch.Tensor:
        """``output`` on the grid, in the layout of ``values``."""
        for dim, positions in enumerate(self.axes):
            if positions is not None:
                output = output.index_select(dim, positions)
        return output

    def output_index(self, index: list[int]) -> list[int]:
        """An index into ``values`` as the index of the same element in the whole output."""
        return [k if positions is None else int(positions[k]) for k, positions in zip(index, self.axes, strict=True)]


class RuleBroken(RuntimeError):
    """Raised by a task in the candidate's process when the candidate breaks one of the task's rules (the worker
    reports it as a rejection with the rule, never as the candidate's runtime error)."""

    def __init__(self, rule: str, evidence: str) -> None:
        super().__init__(f"{rule}: {evidence}")
        self.rule = rule
        self.evidence = evidence


@dataclass(frozen=True)
class WorkPolicy:
    """How the evaluator watches where a candidate's work happens at run time (``ksearch.tools.evaluator``'s
    ``worker.work_observed`` and ``checker.work_judged``), for a task whose candidates must compute in their own
    kernels."""

    trace: bool = True
    """Trace the ATen ops each correctness call runs outside custom launches (``aten_compute``)."""
    ghost: bool = True
    """Replay one correctness call with every custom launch a no-op; its output must be wrong (``ghost_output``)."""
    launches_required: bool = True
    """A traced call must launch a custom kernel (``no_custom_launch``)."""
    glue_ops: frozenset[str] = frozenset()
    """ATen ops (overload packets, ``"add"``) the task declares glue: allowed on input-sized tensors too."""
    share: int = 8
    """PyTorch compute may touch, summed over a call, less than 1/share of the largest input's elements."""


def device_kind(device: str) -> str:
    """'cpu' or 'cuda' for any device string ('cuda:1' -> 'cuda'), for choosing config sets."""
    return "cpu" if device == "cpu" else "cuda"


class Task(ABC):
    """A kernel-writing problem. Subclasses set the class attributes and implement the abstract methods."""

    name: str
    title: str
    entry_point: str = "kernel"
    """Name of the function a candidate module must define."""
    languages: tuple[str, ...] = ("triton",)
    atol: float = 1e-5
    rtol: float = 1e-5
    # -- hardened-evaluator hooks (all optional; the defaults suit a task whose solution returns one new tensor) --
    timing_methods: tuple[str, ...] = ("robust",)
    """Timing methods (``ksearch.tools.timing``) this task may be measured with."""
    default_timing_method: str = "robust"
    flush_l2: bool = True
    """Whether the ``robust`` method evicts the L2 cache (256 MB write) before each timed call."""
    output_is_tuple: bool = False
    """The entry point returns a tuple of tensors instead of one tensor."""
    data_parameters: tuple[int, ...] = ()
    """For an entry point taking one ``data`` tuple: the positions that hold parameters (weights, config) rather than
    activations. What a kernel derives from them it may cache by their identity (the integrity rules allow it)."""
    allow_nonfinite: bool = False
    """Let NaN/inf outputs reach ``check`` (only for tasks whose reference legitimately produces them)."""
    roofline_compute_dtype: str = "bf16"
    """Which peak FLOP/s the physics floor divides by ('fp32', 'tf32', 'bf16', 'fp8'): the highest plausible one."""
    roofline_evidence_dtype: str | None = None
    """The dtype whose dense peak a shape's compute floor uses in the evidence, or None: the evaluator chooses."""
    # -- optional capabilities: what a task may offer beyond the protocol; the defaults say "not offered" --
    gpumode_problem: str | None = None
    """The GPU MODE leaderboard problem whose ``custom_kernel(data)`` interface the task uses (``ksearch export
    --format gpumode`` accepts the task), or None."""
    reference_class: str | None = None
    """The ``nn.Module`` class of the reference source whose PyTorch ops a candidate must not call (the integrity
    rules ``reference_op`` and ``no_custom_kernel``), or None: those rules do not apply."""
    allowed_rules: frozenset[str] = frozenset()
    """Integrity rules this task waives (KernelBench's ``?allow=...``)."""
    forbidden_calls: tuple[str, ...] = ()
    """Calls a candidate must not make besides the common ones (same format as ``TASK_FORBIDDEN_CALLS``)."""
    side_stream_rule: str = (
        "allowed only when joined back to the current stream before the call returns (wait_stream, record_stream); "
        "work still running on a side stream when the call returns is caught and the kernel rejected."
    )
    """What the coder's rules (and a task's spec) say about side streams: one statement, true of what the evaluator
    accepts and of where the task's kernels are submitted."""
    pytorch_baseline_modes: tuple[str, ...] = ()
    """The modes ('eager', 'compile') in which the reference ``Model`` is timed as a baseline by the flows
    (``ksearch.flows.baselines``); empty: the task has no such baseline."""

    @abstractmethod
    def spec(self, language: str) -> str:
        """Prompt text: what to compute, the signature, dtypes and shapes, the tolerance, what is timed."""

    @abstractmethod
    def reference_source(self) -> str:
        """The reference implementation as code text, for prompts."""

    @abstractmethod
    def test_configs(self, device: str) -> list[TaskConfig]:
        """Correctness configs: more shapes, seeds and distributions than are benchmarked. 'cpu' gets small ones."""

    @abstractmethod
    def benchmark_configs(self, device: str) -> list[TaskConfig]:
        """Timed configs: real sizes on 'cuda', tiny ones on 'cpu' (the interpreter is slow)."""

    def resource_configs(self) -> list[TaskConfig]:
        """Extra configs for the resource probe of a CPU run aimed at a GPU (``--target-gpu``): small and cheap on
        the CPU, but with the widths of the GPU's configs, where a kernel's block sizes follow a width (a tile of
        ``next_power_of_2(C)``). The CPU configs alone specialise such a kernel for the CPU's small widths only, and
        its figures at the GPU's widths would first be seen on the GPU. None by default."""
        return []

    @abstractmethod
    def make_inputs(self, config: TaskConfig, device: str) -> list[Any]:
        """Fresh inputs, deterministic in ``config.seed`` (a private torch.Generator, never the global RNG)."""

    @abstractmethod
    def reference(self, *inputs: Any) -> torch.Tensor:
        """The expected output. Called on a pristine clone of the inputs, before the candidate runs."""

    @abstractmethod
    def flops_and_bytes(self, config: TaskConfig) -> tuple[float, float]:
        """Minimal floating-point operations and bytes moved, for a roofline plausibility floor."""

    def prepare(self, module: Any, config: TaskConfig, device: str) -> Callable[..., Any]:
        """The callable the evaluator runs (and times) for ``config`` as ``fn(*call_args(inputs, config))``: by
        default the module's entry point itself.

        Tasks whose solutions are not a plain function override this, e.g. KernelBench's ``ModelNew(*init_inputs)``
        built once per config with seeded weights. Called in the candidate's process, after the module is imported
        and before anything is timed.
        """
        return getattr(module, self.entry_point)

    def call_args(self, inputs: list[Any], config: TaskConfig) -> tuple[Any, ...]:
        """The arguments of one call on one input set: by default the inputs themselves. GPU MODE tasks pack them
        into the ``data`` tuple their ``custom_kernel`` takes. Timing methods that reuse an input set reuse the
        object built here, as the upstream harness does."""
        return tuple(inputs)

    def input_roles(self, config: TaskConfig) -> tuple[InputRole, ...] | None:
        """The role of each input of ``make_inputs(config, ...)``, in order (see ``InputRole``), or None: every input
        is an activation. None suits a task whose inputs are all tensors whose shapes follow from the config alone
        (softmax); a task with indices, page tables, lengths, weights or Python scalars among its inputs says so."""
        return None

    def activation_inputs(self, config: TaskConfig) -> tuple[int, ...] | None:
        """Positions in ``make_inputs``'s list that the evaluator may re-randomise in place: after a timing loop it
        copies the values of ``make_inputs`` with a fresh seed into these positions of a timed input set (the other
        positions keep theirs) and checks one more call; the checker rebuilds the same mixed set to compute the
        expected output.

        Every position returned must hold, for any two seeds, tensors of the same shape, dtype and device whose values
        are valid together with the other positions' old values. None: every input qualifies (the default). An empty
        tuple: none does, so the task offers no fresh-value call and the evaluator checks it without one. By default
        the ACTIVATION positions of ``input_roles``."""
        roles = self.input_roles(config)
        if roles is None:
            return None
        return tuple(position for position, role in enumerate(roles) if role is InputRole.ACTIVATION)

    def data_paths(self) -> tuple[str, ...]:
        """Files and folders the candidate's process reads to build this task (an operator file, a KernelBench
        problem, a data set): the file layer of the containment lets a candidate read them (and nothing else of the
        user's). Empty for a task whose code and data are in an installed package."""
        return ()

    def support_modules(self) -> dict[str, str]:
        """Modules (name -> source) the candidate may import besides installed packages, e.g. the ``task`` module of
        GPU MODE's submission template (``from task import input_t, output_t``)."""
        return {}

    def definition_digest(self) -> str:
        """A hash of what decides a verdict besides the configurations (the evaluation key hashes those itself): the
        reference as the task states it (for an operator file or a KernelBench problem, the whole file: inputs,
        reference, tolerances), the code of the task's own module (input generator, check), the tolerance, the entry
        point and the support modules. Part of the evaluation cache key, so an edited task never reuses a verdict
        of the old one, and stored with each run, so a run whose task changed is not resumed onto new verdicts."""
        payload = json.dumps(
            {
                "reference": self.reference_source(),
                "module": _source_of(type(self)),
                "tolerance": [self.atol, self.rtol],
                "entry_point": self.entry_point,
                "support": self.support_modules(),
            },
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()

    def expected(self, config: TaskConfig, inputs: list[Any]) -> Any:
        """The reference output for ``inputs`` (a pristine clone). Override when the reference needs the config."""
        return self.reference(*inputs)

    def expected_sample(
        self, config: TaskConfig, inputs: list[Any], generator: torch.Generator
    ) -> ExpectedSample | None:
        """The reference at positions drawn from ``generator`` (the checker's, unpredictable to the candidate), when
        that costs far less than ``expected``: the checker then judges an audit's output (one call on re-randomised
        activations among the timed repeats, there to catch an output replayed from another call) at those positions
        only. None (the default): the whole reference is computed and compared. Only for a single-tensor output; the
        values must agree with ``expected`` at those positions to within the float32 rounding of a reordered sum."""
        return None

    def check_sample(self, config: TaskConfig, output: Any, sample: ExpectedSample) -> Mismatch | None:
        """``check`` on a sample's grid: the output's form (a tensor of the whole output's shape, on the device of the
        reference), then the task's own comparison of the output there with ``sample.values``; a mismatch names the
        worst element by its index in the whole output."""
        where = config.name
        if type(output) is not torch.Tensor:
            return Mismatch(config=where, message=f"{where}: expected a torch.Tensor, got {type(output).__qualname__}")
        if tuple(output.shape) != sample.shape:
            return Mismatch(config=where, message=f"{where}: shape {tuple(output.shape)}, expected {sample.shape}")
        if output.device != sample.values.device:
            return Mismatch(config=where, message=f"{where}: device {output.device}, expected {sample.values.device}")
        mismatch = self.check(config, sample.gather(output.detach()), sample.values)
        if mismatch is None:
            return None
        message = mismatch.message
        worst = mismatch.worst_index
        if len(worst) == len(sample.shape):
            real = sample.output_index(worst)
            message = message.replace(f"at {worst}", f"at {real}")
            worst = real
        return mismatch.model_copy(
            update={
                "worst_index": worst,
                "message": f"{message} (compared at {sample.positions} sampled positions of the output)",
            }
        )

    def output_buffers(self, config: TaskConfig, inputs: list[Any]) -> list[torch.Tensor] | None:
        """Tensors among ``inputs`` that the candidate writes its result into (destination-passing style), or None.

        The evaluator fills them with NaN before every call and does not count writes to them as input mutation.
        """
        return None

    def work_policy(self) -> WorkPolicy | None:
        """How the evaluator watches where the candidate's work happens (``WorkPolicy``), or None: not watched."""
        return None

    def output_strides(self, config: TaskConfig, expected: Any) -> Any:
        """The strides the output must have: a tuple per tensor (a list of them for tuple outputs), or None to accept
        any layout. By default the contiguous strides of the expected output's shape."""
        if isinstance(expected, (tuple, list)):
            return [_contiguous_strides(tuple(e.shape)) for e in expected]
        return _contiguous_strides(tuple(expected.shape))

    def starter_code(self, language: str) -> str | None:
        """Code to start the first attempt from, or None to start from the spec alone."""
        return None

    def validate(self, device: str = "cpu") -> None:
        """Refuse (with a UserError) a task that cannot judge kernels, before a run or an evaluation starts: e.g. a
        reference that is not deterministic. By default every task can."""

    def device_note(self, device: str) -> str:
        """What the user should know about how ``device`` checks this task (e.g. reduced sizes on the CPU), or ''."""
        return ""

    def reference_candidate(self) -> Candidate | None:
        """The reference packaged as a candidate the evaluator can run like any other, or None where it cannot be."""
        return None

    def reference_latencies_ms(self) -> dict[str, float]:
        """Per-config latencies of the reference from a file the task names (medians only), or {}."""
        return {}

    def flashinfer_definition(self) -> str | None:
        """The FlashInfer-Bench definition the task reproduces (``ksearch export --format flashinfer`` writes a
        Solution JSON for it), or None."""
        return None

    def candidate_from_file(self, text: str, language: str) -> tuple[str, str]:
        """(module code, language) of a solution file: a file in the task's own solution format (FlashInfer-Bench's
        Solution JSON) becomes the module it describes; by default the file is the module."""
        return text, language

    def check(self, config: TaskConfig, output: Any, expected: torch.Tensor) -> Mismatch | None:
        """None when ``output`` matches ``expected`` within atol + rtol * |expected|; else where it is worst."""
        form = self.form_mismatch(config.name, output, expected)
        if form is not None or output.numel() == 0:
            return form
        return tolerance_mismatch(config.name, output.detach(), expected.detach(), self.atol, self.rtol)

    def form_mismatch(self, where: str, output: Any, expected: torch.Tensor) -> Mismatch | None:
        """What is wrong with the output before its values are compared: not a plain tensor, another shape, dtype
        or device, or non-finite values; None when its form is right."""
        if type(output) is not torch.Tensor:
            return Mismatch(config=where, message=f"{where}: expected a torch.Tensor, got {type(output).__qualname__}")
        if output.shape != expected.shape:
            shapes = f"shape {tuple(output.shape)}, expected {tuple(expected.shape)}"
            return Mismatch(config=where, message=f"{where}: {shapes}")
        if output.dtype != expected.dtype:
            return Mismatch(config=where, message=f"{where}: dtype {output.dtype}, expected {expected.dtype}")
        if output.device != expected.device:
            return Mismatch(config=where, message=f"{where}: device {output.device}, expected {expected.device}")
        if output.numel() == 0:
            return None
        got = output.detach()
        if not all_finite(got):
            finite = torch.isfinite(got)
            count = int((~finite).sum())
            first = _index(torch.nonzero(~finite)[0])
            return Mismatch(
                config=where,
                worst_index=first,
                message=f"{where}: {count} non-finite output values (nan/inf), first at {first}: "
                f"{got[tuple(first)].item()}",
            )
        return None

    def score(self, timings: list[Timing]) -> tuple[float, float]:
        """(aggregate latency in ms = geometric mean of the per-config headline statistic, score = 1 / latency).

        The headline is the statistic the timing method's upstream reports: the mean for GPU MODE and
        flashinfer-bench procedures (so the aggregate is the leaderboard's), the median for ``robust``."""
        if not timings:
            raise ValueError("no timings to score")
        logs = [math.log(max(t.headline_ms, MIN_LATENCY_MS)) for t in timings]
        latency_ms = math.exp(sum(logs) / len(logs))
        return latency_ms, 1.0 / latency_ms


CHECK_CHUNK = 1 << 24
"""Elements compared at a time: bounds the checker's extra memory for outputs of several GB."""


def all_finite(tensor: torch.Tensor) -> bool:
    """``bool(torch.isfinite(tensor).all())``, ``CHECK_CHUNK`` elements at a time: ATen's ``isfinite`` makes a
    temporary of the tensor's size (its ``abs``) and three of a quarter of it, 1.75 outputs' worth beside a 6.4 GB
    output in the checker."""
    flat = tensor.reshape(-1)
    return all(
        bool(torch.isfinite(flat[start : start + CHECK_CHUNK]).all()) for start in range(0, flat.numel(), CHECK_CHUNK)
    )


def tolerance_mismatch(
    where: str, got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float
) -> Mismatch | None:
    """None when every ``|got - expected| <= atol + rtol * |expected|`` (both finite); else where it is worst.

    Compared in float32 chunk by chunk (float64 for float64 tensors), so a 3 GB output needs no 5x copies in
    float64; only the worst elements are re-read in float64 for the message."""
    compute = torch.float64 if expected.dtype == torch.float64 or got.dtype == torch.float64 else torch.float32
    flat_got, flat_exp = got.reshape(-1), expected.reshape(-1)
    if not _count_outside(flat_got, flat_exp, atol, rtol, compute):
        return None
    bad_count, worst_excess, worst_flat, max_abs, max_rel = 0, -1.0, 0, 0.0, None
    for start, g, e in _chunks(flat_got, flat_exp, compute):
        diff = (g - e).abs()
        magnitude = e.abs()
        excess = diff - (atol + rtol * magnitude)
        bad = excess > 0
        count = int(bad.sum())
        max_abs = max(max_abs, float(diff.max()))
        significant = magnitude > atol
        if bool(significant.any()):
            rel = float((diff[significant] / magnitude[significant]).max())
            max_rel = rel if max_rel is None else max(max_rel, rel)
        if count:
            bad_count += count
            position = int(torch.argmax(excess))
            if float(excess[position]) > worst_excess:
                worst_excess, worst_flat = float(excess[position]), start + position
    if not bad_count:
        return None
    worst = [int(i) for i in torch.unravel_index(torch.tensor(worst_flat), expected.shape)]
    got_value = float(got.reshape(-1)[worst_flat].to(torch.float64))
    exp_value = float(expected.reshape(-1)[worst_flat].to(torch.float64))
    rel_text = f", max rel error {max_rel:.3g}" if max_rel is not None else ""
    return Mismatch(
        config=where,
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        worst_index=worst,
        message=f"{where}: {bad_count} of {expected.numel()} values outside atol={atol:g} rtol={rtol:g}; "
        f"max abs error {max_abs:.3g}{rel_text}; worst at {worst}: got {got_value:.6g}, expected {exp_value:.6g}",
    )


def _count_outside(
    flat_got: torch.Tensor, flat_exp: torch.Tensor, atol: float, rtol: float, compute: torch.dtype
) -> int:
    """How many elements are outside the tolerance: a few passes per chunk and ONE synchronisation at the end (the
    common case, a passing output, needs nothing more; the slower pass in ``tolerance_mismatch`` then finds where)."""
    count = torch.zeros((), dtype=torch.int64, device=flat_got.device)
    for _, g, e in _chunks(flat_got, flat_exp, compute):
        diff = torch.sub(g, e).abs_()
        limit = e.abs().mul_(rtol).add_(atol)
        count += torch.gt(diff, limit).sum()
    return int(count)


def _chunks(
    flat_got: torch.Tensor, flat_exp: torch.Tensor, compute: torch.dtype
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """(offset, got, expected) for each ``CHECK_CHUNK`` elements, in the ``compute`` dtype."""
    for start in range(0, flat_got.numel(), CHECK_CHUNK):
        yield (
            start,
            flat_got[start : start + CHECK_CHUNK].to(compute),
            flat_exp[start : start + CHECK_CHUNK].to(compute),
        )


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _source_of(cls: type) -> str:
    """The text of the file defining ``cls`` ('' where there is none, e.g. a class made at run time)."""
    try:
        path = inspect.getsourcefile(cls)
        with open(path or "", encoding="utf-8") as file:
            return file.read()
    except (OSError, TypeError):
        return ""


def _index(parts: Any) -> list[int]:
    """A tensor index (a 1-D tensor or a tuple of 0-d tensors) as plain ints, for JSON and messages."""
    return [int(p) for p in parts]
