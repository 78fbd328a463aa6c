"""Built-in task ``trimul``: GPU MODE's TriMul problem, the outgoing Triangle Multiplicative Update of AlphaFold-3.

Solutions use GPU MODE's interface, so a leaderboard ``submission.py`` runs unchanged: the module defines
``custom_kernel(data)`` with ``data = (x, mask, weights, config)``, and may start with the template's
``from task import input_t, output_t`` and import helpers such as ``from utils import DisableCuDNNTF32`` (the
evaluator provides both modules: ``gpumode_support``). ``call_args`` builds the ``data`` tuple
once per input set from the worker's flat list of tensors ``[x, mask, *weights in WEIGHT_KEYS order]``, so every
tensor (weights included) is checked for mutation like any other input, and timing methods that reuse an input set
reuse the same ``data`` object as upstream's harness does (a kernel may cache derived weights in its ``weights``
dict). ``x`` and ``mask`` are the activations: after a timing loop they are re-randomised in place for one more
checked call.

Differences from upstream (gpu-mode/reference-kernels ``problems/bioml/trimul``), on purpose:

- Masks are real in the tests. Upstream passes ``nomask`` as the *string* "False", which is truthy, so every official
  case uses an all-ones mask. Here the 7 masked tests get a random 0/1 mask that is applied by the reference (a kernel
  that ignores the mask fails them). The 7 benchmarks are timed as upstream times them, all masks ones (their
  task.yml flag is kept as ``yml_nomask``), so a kernel's fast path for a full mask is timed as on the leaderboard.
  Masks are float32 in both cases (upstream would make an int64 mask in the masked case, which it never reaches).
- Cauchy inputs (``2 * tan(pi * (u - 0.5))``, i.e. Cauchy(0, 2)) are drawn from the seeded generator, like
  everything else; upstream draws them from the global RNG.
- Inputs are generated on the target device with a private generator of that device (fast for the 3.2 GB test
  inputs), so values are deterministic per (seed, device type) but differ between CPU and GPU.
- On the CPU (Triton interpreter) the configs are tiny: N in {8, 16, 32}, B in {1, 2}, C in {16, 32}, H = 128.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Iterator
from importlib import resources
from string import Template
from typing import Any

import torch

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Mismatch
from ksearch.tasks import sampling
from ksearch.tasks.base import ExpectedSample, InputRole, Task, TaskConfig, device_kind
from ksearch.tasks.trimul import reference as _reference
from ksearch.tasks.trimul.cost_text import ShapeCost, cost_table
from ksearch.tasks.trimul.reference import WEIGHT_KEYS
from ksearch.tasks.trimul.reference_sample import trimul_reference_at

HIDDEN = 128
DISTRIBUTIONS = ("normal", "cauchy")
AUDIT_SAMPLE_ROWS = 32
"""An audit's sampled reference covers this many rows i and as many columns j of the output (all of them below N =
32): every (i, j) pair of the two, all channels (``TrimulTask.expected_sample``)."""


def _config(
    prefix: str, n: int, b: int, c: int, seed: int, nomask: bool, distribution: str, h: int = HIDDEN
) -> TaskConfig:
    name = f"{prefix}_n{n}_b{b}_c{c}_{distribution}_{'nomask' if nomask else 'mask'}"
    return TaskConfig(
        name=name,
        params={"seqlen": n, "bs": b, "dim": c, "hiddendim": h, "nomask": nomask},
        seed=seed,
        distribution=distribution,
    )


# GPU MODE's 18 tests and 7 benchmarks (task.yml), with their seeds; nomask as the real booleans it was meant to be.
_T, _F = True, False
_CUDA_TESTS = [
    _config(f"t{i:02d}", n, b, c, seed, nomask, dist)
    for i, (n, b, c, seed, nomask, dist) in enumerate(
        [
            (32, 1, 128, 9371, _T, "normal"),
            (32, 1, 128, 1092, _F, "normal"),
            (64, 2, 256, 2291, _T, "normal"),
            (64, 2, 256, 210284, _F, "normal"),
            (128, 1, 768, 81934, _T, "normal"),
            (256, 1, 128, 1932, _T, "normal"),
            (256, 1, 128, 10432, _F, "normal"),
            (768, 2, 128, 731, _T, "normal"),
            (1024, 1, 384, 53121, _F, "normal"),
            (1024, 1, 768, 31, _T, "normal"),
            (1024, 1, 768, 4921, _F, "normal"),
            (32, 1, 128, 937321, _T, "cauchy"),
            (64, 2, 256, 2291, _T, "cauchy"),
            (128, 1, 768, 8134, _T, "cauchy"),
            (256, 1, 128, 932, _T, "cauchy"),
            (768, 2, 128, 31, _T, "cauchy"),
            (1024, 1, 384, 5321, _F, "cauchy"),
            (1024, 1, 768, 491, _F, "cauchy"),
        ]
    )
]
# The benchmarks are timed as upstream's harness runs them: every mask all ones (its "False" is a truthy string), so a
# kernel with a fast path for a full mask (``if mask.min() < 1: ...``) is timed on the path the leaderboard times.
# task.yml's flag is kept as ``yml_nomask``. The 18 tests keep their real masks, which is where masking is checked.
_CUDA_BENCHMARKS = [
    _config(f"b{i}", n, b, c, seed, True, dist).model_copy(
        update={"params": {"seqlen": n, "bs": b, "dim": c, "hiddendim": HIDDEN, "nomask": True, "yml_nomask": yml}}
    )
    for i, (n, b, c, seed, yml, dist) in enumerate(
        [
            (256, 2, 128, 9371, _T, "normal"),
            (768, 1, 128, 381, _T, "cauchy"),
            (256, 2, 384, 2301, _F, "normal"),
            (512, 1, 128, 12819, _T, "normal"),
            (1024, 1, 128, 381, _T, "cauchy"),
            (768, 1, 384, 481, _F, "normal"),
            (1024, 1, 384, 23291, _T, "normal"),
        ]
    )
]
# Tiny shapes for the Triton interpreter; H stays 128 so CPU and GPU exercise the same kernel code paths.
_CPU_TESTS = [
    _config("cpu_t0", 8, 2, 16, 11, _F, "normal"),
    _config("cpu_t1", 16, 1, 32, 12, _T, "normal"),
    _config("cpu_t2", 16, 2, 32, 13, _F, "cauchy"),
    _config("cpu_t3", 32, 1, 16, 14, _F, "normal"),
]
_CPU_BENCHMARKS = [
    _config("cpu_b0", 16, 1, 32, 21, _T, "normal"),
    _config("cpu_b1", 32, 1, 32, 22, _F, "cauchy"),
]

_INTERFACE = {
    "triton": """Write a Python module in GPU MODE's submission format that defines

    def custom_kernel(data: tuple) -> torch.Tensor:
        x, mask, weights, config = data
        ...

using Triton (@triton.jit) kernels for the work you optimise. Hybrid Triton + PyTorch is allowed, as on the GPU MODE
leaderboard: torch for allocation, reshapes, casts and, if you choose, library GEMMs (torch.matmul / torch.bmm) for
parts of the computation; but never the reference itself. Fusing the LayerNorm, projections, gating and mask into as
few passes over x as possible, and the output LayerNorm, gate and projection into one, keeps intermediates out of
memory; which part takes the time at each shape is for the measurements to say (see the flops above).""",
    "cuda": """Write a Python module in GPU MODE's submission format that builds CUDA C++ kernels with
torch.utils.cpp_extension.load_inline (at import time, once: put the CUDA source in a string, pass cpp_sources with
the function declarations and functions=[...] or a PYBIND11 module) and defines

    def custom_kernel(data: tuple) -> torch.Tensor:
        x, mask, weights, config = data
        ...

calling your compiled functions. torch may be used for allocation, reshapes and casts, and library GEMMs
(torch.matmul / torch.bmm) are allowed for parts you choose, but never the reference itself. Compile for the device's
compute capability (load_inline does this by default) and keep compile flags modest (-O3, --use_fast_math).""",
}


@contextlib.contextmanager
def fp32_exact() -> Iterator[None]:
    """TF32 off for cuBLAS and cuDNN while the reference runs; the caller's settings are restored afterwards."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = cudnn


def shape_of(config: TaskConfig) -> tuple[int, int, int, int]:
    """(B, N, C, H) of a config."""
    p = config.params
    return int(p["bs"]), int(p["seqlen"]), int(p["dim"]), int(p["hiddendim"])


SUPPORT_MODULE = resources.files(__package__).joinpath("gpumode_support.py").read_text(encoding="utf-8")
"""GPU MODE's ``task`` and ``utils`` as submissions import them (``ksearch.tasks.trimul.gpumode_support``)."""
TASK_MODULE = SUPPORT_MODULE


def as_data(inputs: list[Any], config: TaskConfig) -> tuple[Any, Any, dict[str, Any], dict[str, int]]:
    """The worker's flat input list as GPU MODE's ``data`` tuple (a new tuple and weights dict each time)."""
    _, _, c, h = shape_of(config)
    x, mask, *weights = inputs
    return x, mask, dict(zip(WEIGHT_KEYS, weights, strict=True)), {"dim": c, "hidden_dim": h}


class TrimulTask(Task):
    name = "trimul"
    title = "GPU MODE TriMul: AlphaFold-3 outgoing triangle multiplicative update (custom_kernel(data))"
    entry_point = "custom_kernel"
    languages = ("triton", "cuda")
    atol = 2e-2
    rtol = 2e-2
    timing_methods: tuple[str, ...] = ("gpumode-benchmark", "gpumode", "robust")
    default_timing_method = "gpumode-benchmark"
    """GPU MODE's benchmark procedure (the data object reused, sync around every call, mean): what ``eval.py
    benchmark`` reads and K-Search reported; ``gpumode`` is the leaderboard's scored procedure (fresh inputs and a
    recheck every repeat, slower)."""
    flush_l2 = False
    """Upstream's TriMul harness does not flush the L2 cache (and every benchmark input is larger than it)."""
    roofline_compute_dtype = "fp8"
    """The physics floor uses the fastest rate a partly low-precision kernel could reach, so it never rejects an
    honest one (fp8 everywhere would not meet the tolerance, but fp8 for parts is not ruled out)."""
    data_parameters = (2, 3)
    """The weights dict and the config of ``data = (x, mask, weights, config)``: what a kernel derives from them it may
    cache (the integrity rules let a table keyed by the weights' identity through; ``input_roles`` says what the
    evaluator re-randomises)."""
    gpumode_problem = "trimul"
    """Marks the GPU MODE solution interface: ``ksearch export --format gpumode`` accepts this task."""
    side_stream_rule = (
        'GPU MODE\'s leaderboard rejects any file that contains the letters "stream" anywhere (even inside a word such '
        'as "upstream"), so use no side stream and never write that word. ksearch\'s evaluator would accept a side '
        "stream joined back to the current one before the call returns, but `ksearch export --format gpumode` warns "
        "of the word and the leaderboard refuses the file."
    )

    def spec(self, language: str) -> str:
        if language not in self.languages:
            raise ValueError(f"task {self.name!r} has no spec for language {language!r}; it supports {self.languages}")
        text = resources.files(__package__).joinpath("spec.txt").read_text(encoding="utf-8")
        shapes = "; ".join(
            f"(B={b}, N={n}, C={c}, {'mask' if not cfg.params['nomask'] else 'no mask'}, {cfg.distribution})"
            for cfg in _CUDA_BENCHMARKS
            for b, n, c, _ in [shape_of(cfg)]
        )
        costs = [
            ShapeCost(label=cfg.name.split("_")[0], b=b, n=n, c=c, h=h)
            for cfg in _CUDA_BENCHMARKS
            for b, n, c, h in [shape_of(cfg)]
        ]
        return Template(text).substitute(
            interface=_INTERFACE[language],
            benchmark_shapes=shapes,
            tol=f"{self.atol:g}",
            cost_table=cost_table(costs),
            stream_rule=self.side_stream_rule,
        )

    def reference_source(self) -> str:
        return inspect.getsource(_reference)

    def reference_submission_source(self) -> str:
        """The reference packaged as a GPU MODE submission (for baselines: ``bench/trimul.py``)."""
        return (
            "# The ksearch trimul reference, packaged as a GPU MODE submission (float32; PyTorch's default keeps\n"
            "# TF32 off for matmuls).\n" + self.reference_source() + "\n\ndef custom_kernel(data):\n"
            "    x, mask, weights, _config = data\n"
            "    return trimul_reference(x, mask, weights)\n"
        )

    def reference_candidate(self) -> Candidate:
        """The GPU MODE submission of the reference, as the evaluator runs a candidate."""
        return Candidate(
            task=self.name, language="triton", code=self.reference_submission_source(), entry_point=self.entry_point
        )

    def test_configs(self, device: str) -> list[TaskConfig]:
        return list(_CPU_TESTS if device_kind(device) == "cpu" else _CUDA_TESTS)

    def benchmark_configs(self, device: str) -> list[TaskConfig]:
        return list(_CPU_BENCHMARKS if device_kind(device) == "cpu" else _CUDA_BENCHMARKS)

    def resource_configs(self) -> list[TaskConfig]:
        """One masked config per width C of GPU MODE's configs (128, 256, 384, 768), at N=16, B=1: a kernel tiled by
        C is compiled for the target at every width it will meet, not only the CPU's 16 and 32."""
        widths = sorted({shape_of(c)[2] for c in _CUDA_TESTS + _CUDA_BENCHMARKS})
        return [_config(f"cpu_r{i}", 16, 1, width, 31 + i, _F, "normal") for i, width in enumerate(widths)]

    def make_inputs(self, config: TaskConfig, device: str) -> list[Any]:
        """[x, mask, *weights in WEIGHT_KEYS order], all float32, from a private generator seeded with config.seed."""
        b, n, c, h = shape_of(config)
        if config.distribution not in DISTRIBUTIONS:
            raise ValueError(f"unknown distribution {config.distribution!r} for task {self.name!r}")
        dev = torch.device(device)
        g = torch.Generator(device=dev).manual_seed(config.seed)
        f32 = {"dtype": torch.float32, "device": dev, "generator": g}

        if config.distribution == "normal":
            x = sampling.randn(b, n, n, c, **f32)
        else:  # Cauchy(0, 2) from the seeded generator
            x = sampling.cauchy(b, n, n, c, scale=2.0, generator=g, device=dev)
        if config.params["nomask"]:
            mask = torch.ones(b, n, n, dtype=torch.float32, device=dev)
        else:
            mask = torch.randint(0, 2, (b, n, n), generator=g, device=dev).to(torch.float32)

        def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
            t = sampling.randn(*shape, **f32)
            return t.mul_(scale) if scale != 1.0 else t

        proj = 1.0 / math.sqrt(h)
        weights = {
            "norm.weight": randn(c),
            "norm.bias": randn(c),
            "left_proj.weight": randn(h, c, scale=proj),
            "right_proj.weight": randn(h, c, scale=proj),
            "left_gate.weight": randn(h, c, scale=proj),
            "right_gate.weight": randn(h, c, scale=proj),
            "out_gate.weight": randn(h, c, scale=proj),
            "to_out_norm.weight": randn(h),
            "to_out_norm.bias": randn(h),
            "to_out.weight": randn(c, h, scale=1.0 / math.sqrt(c)),
        }
        return [x, mask, *(weights[k] for k in WEIGHT_KEYS)]

    def reference(self, *inputs: Any) -> torch.Tensor:
        x, mask, *weights = inputs
        with fp32_exact():
            return _reference.trimul_reference(x, mask, dict(zip(WEIGHT_KEYS, weights, strict=True)))

    def expected(self, config: TaskConfig, inputs: list[Any]) -> Any:
        return self.reference(*inputs)

    def expected_sample(self, config: TaskConfig, inputs: list[Any], generator: torch.Generator) -> ExpectedSample:
        """The reference at ``AUDIT_SAMPLE_ROWS`` rows and as many columns drawn from ``generator``: at N = 1024 a few
        percent of the whole reference's work (``reference_sample``). An output replayed from another call is wrong
        at nearly every position, so a sample of a thousand (i, j) pairs finds it as surely as the whole output."""
        x, mask, *weights = inputs
        n = x.shape[1]
        count = min(n, AUDIT_SAMPLE_ROWS)
        rows = torch.randperm(n, generator=generator, device=x.device)[:count]
        cols = torch.randperm(n, generator=generator, device=x.device)[:count]
        with fp32_exact():
            values = trimul_reference_at(x, mask, dict(zip(WEIGHT_KEYS, weights, strict=True)), rows, cols)
        return ExpectedSample(shape=tuple(x.shape), axes=(None, rows, cols, None), values=values)

    def check(self, config: TaskConfig, output: Any, expected: torch.Tensor) -> Mismatch | None:
        """GPU MODE's rule: values within tolerance, whatever the output's floating dtype. Upstream subtracts the
        reference from the output (type promotion), so a float16 or bfloat16 result that is close enough passes there
        (leaderboard kernels return one from their small-shape paths), and so it does here."""
        if type(output) is torch.Tensor and output.is_floating_point() and output.dtype != expected.dtype:
            if output.dtype.itemsize == 1:  # float8: torch promotes it with nothing (upstream's subtraction fails too)
                return Mismatch(
                    config=config.name,
                    message=f"{config.name}: dtype {output.dtype}, expected "
                    f"{expected.dtype} (float16 and bfloat16 are accepted too, as upstream does)",
                )
            common = torch.promote_types(output.dtype, expected.dtype)
            return super().check(config, output.to(common), expected.to(common))
        return super().check(config, output, expected)

    def output_strides(self, config: TaskConfig, expected: Any) -> Any:
        """Any layout: upstream compares values, and a kernel may return a permuted view of its channel-major result."""
        return None

    def call_args(self, inputs: list[Any], config: TaskConfig) -> tuple[Any, ...]:
        return (as_data(inputs, config),)

    def input_roles(self, config: TaskConfig) -> tuple[InputRole, ...]:
        """x and the mask are activations; the weights stay (a kernel may cache what it derives from them)."""
        return (InputRole.ACTIVATION, InputRole.ACTIVATION, *(InputRole.PARAMETER for _ in WEIGHT_KEYS))

    def support_modules(self) -> dict[str, str]:
        return {"task": SUPPORT_MODULE, "utils": SUPPORT_MODULE}

    def flops_and_bytes(self, config: TaskConfig) -> tuple[float, float]:
        b, n, c, h = shape_of(config)
        m = float(b) * n * n
        contraction = 2.0 * b * h * float(n) ** 3
        projections = 5 * 2.0 * m * c * h + 2.0 * m * h * c  # five C->H maps and the H->C output map
        weights = 6 * h * c + 2 * c + 2 * h
        moved = 4.0 * (m * c + m + m * c + weights)  # read x and the mask once, write y once, read the weights
        return contraction + projections, moved


__all__ = ["SUPPORT_MODULE", "TASK_MODULE", "TrimulTask", "as_data", "fp32_exact", "shape_of"]
