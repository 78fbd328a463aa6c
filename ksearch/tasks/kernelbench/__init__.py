"""KernelBench problems as ksearch tasks.

A problem is a Python file in KernelBench's format: ``class Model(nn.Module)``, ``get_inputs()`` (CPU tensors) and
``get_init_inputs()`` (constructor arguments). A solution is a module defining ``class ModelNew(nn.Module)`` with
the same constructor and forward signature; here its kernels are written in Triton.

Task names (see ``ksearch.tasks.registry``):

- ``kernelbench:<level>/<id>``: problem ``<id>`` of ``level<level>`` in a KernelBench checkout, found at
  ``<root>/KernelBench/level<level>/<id>_*.py`` where ``<root>`` is ``--kernelbench-root`` or ``$KERNELBENCH_ROOT``
  (a root that is itself the ``KernelBench`` folder also works);
- ``kernelbench:path/to/problem.py``: any single file in the format.

Both are canonicalised to ``kernelbench:/absolute/path/to/problem.py`` (``problem_files.canonical_name``) before a
run starts, because the evaluator's worker runs in a private directory with a scrubbed environment and must find the
file again. ``problem_files`` finds and loads the problem files; this module is the task.

Correctness follows KernelBench: 5 trials whose seeds derive from seed 42 exactly as KernelBench derives them; per trial
the global RNG is seeded before ``get_init_inputs()``, before building ``Model``/``ModelNew`` (so their weights match)
and before ``get_inputs()``; outputs compare with KernelBench's tolerances per dtype (fp32 1e-4, fp16/bf16 1e-2), the
absolute one scaled to the output (``judging``). The reference runs in a different process from the candidate, so both
sides are built deterministically: ``prepare`` builds ``ModelNew`` and ``expected`` builds ``Model`` under
``torch.manual_seed(config.seed)`` inside ``torch.random.fork_rng`` (the caller's RNG state is untouched). Speedups over
PyTorch eager (or ``torch.compile``) come from ``ksearch.tasks.kernelbench.baseline``.

Beyond KernelBench (issue 36), each part in its own module:

- ``variants``: correctness also runs on the same shapes and dtypes with other value distributions (signed, large,
  small, positive, sparse), so a kernel that is right only on ``torch.rand`` inputs fails;
- ``judging``: the absolute tolerance scales with the output's magnitude, and failures of a work check are named
  (``output_is_input``, ``insensitive_output``, ``input_distribution``, ``scaled_tolerance``);
- ``ModelNew`` returning its input (or a view of it) fails at once (``output_aliases_input``); the static rules of
  ``ksearch.tools.integrity.reference_ops`` reject a candidate that calls the PyTorch ops the reference computes
  with (``reference_op``), launches no Triton kernel (``no_custom_kernel``) or falls back to PyTorch in an
  ``except`` (``reference_fallback``). ``kernelbench:...?allow=reference_op,no_custom_kernel`` lets the first two
  through (KernelBench's "replace some operators" setting); sweeps then say which kernels used them;
- ``validate`` refuses a problem whose reference is not deterministic (``UnjudgeableProblem``: dropout in training
  mode) before any kernel is judged against it;
- ``sizes``: on the CPU, problems sized for a GPU are checked with their size constants reduced, and say so.

Issue 60, so that a kernel is judged by what it runs:

- ``precision``: the expected output is the reference computed in float64, rounded to the output's dtype, and the
  absolute tolerance widens with the op's own float32 rounding (an honest float32 matmul passes every variant);
- ``streams``: weights and inputs come from separate streams of the config's (salted) seed, and a ``ModelNew``
  whose construction draws more random numbers than ``Model``'s is refused (``construction_draws``);
- ``distributions``: a ``rescaled`` config keeps ``get_inputs()``'s domain with secret statistics, its ``perturbed``
  twin judges whether the output follows a small change of part of the input, and the timed config draws
  ``get_inputs()`` or rescaled inputs as its salted seed decides.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from ksearch.contracts.evaluation import Mismatch
from ksearch.errors import UserError
from ksearch.tasks._loading import to_device, tolerance_for
from ksearch.tasks.base import Task, TaskConfig, WorkPolicy, device_kind
from ksearch.tasks.fresh_values import probed_activation_inputs
from ksearch.tasks.kernelbench.checking import OutputJudge
from ksearch.tasks.kernelbench.distributions import (
    DISTRIBUTIONS,
    PERTURBED,
    RESCALED,
    TIMED,
    perturb,
    rescale,
    timed_distribution,
)
from ksearch.tasks.kernelbench.precision import exact_in_dtype, float64_reference
from ksearch.tasks.kernelbench.problem_files import (
    ALLOWABLE_RULES,
    PREFIX,
    KernelBenchError,
    describe_level_path,
    find_problem,
    load_problem,
    options_suffix,
    parse_options,
)
from ksearch.tasks.kernelbench.prompt import NUM_CORRECT_TRIALS, spec_text
from ksearch.tasks.kernelbench.sizes import CpuTooLarge, Reduction, load_source, reduce_for_cpu
from ksearch.tasks.kernelbench.streams import check_draws, construction_draws, inputs_seed, weights_seed
from ksearch.tasks.kernelbench.variants import VARIANT_SEED_BASE, VARIANTS, redraw
from ksearch.tasks.seeding import drawn_on, seeded_global_rng

SEED_NUM = 42
"""KernelBench's default ``seed_num``: trial seeds are drawn from a generator seeded with it."""
BENCHMARK_SEED = 2025
RESCALED_SEED = 7800
"""Public seed of the ``rescaled`` config and of its ``perturbed`` twin (the same inputs, one block changed)."""
ENTRY_POINT = "ModelNew"
GET_INPUTS = "get_inputs"
"""The ``distribution`` of configs whose inputs are ``get_inputs()``'s own (KernelBench's trials)."""
TRIAL_PREFIX = "trial"


def trial_seeds(n: int = NUM_CORRECT_TRIALS, seed_num: int = SEED_NUM) -> list[int]:
    """The per-trial seeds, drawn the way KernelBench draws them (``torch.randint(0, 2**32 - 1, (1,))`` after
    ``torch.manual_seed(seed_num)``), but from a private generator."""
    generator = torch.Generator(device="cpu").manual_seed(seed_num)
    return [int(torch.randint(0, 2**32 - 1, (1,), generator=generator).item()) for _ in range(n)]


class UnjudgeableProblem(UserError):
    """A problem whose reference gives different outputs for the same inputs: no kernel can be judged against it."""


class OutputAliasesInput(RuntimeError):
    """Raised in the candidate's process when ``ModelNew`` returns (a view of) one of its inputs."""


_LAZY_LOCK = threading.RLock()
"""Guards the problem's lazily computed CPU reduction (``reduce_for_cpu`` toggles process-wide state while it runs)."""


class KernelBenchTask(Task):
    """One KernelBench problem. The candidate defines ``ModelNew``; the reference is the problem's ``Model``."""

    entry_point = ENTRY_POINT
    languages = ("triton",)
    atol = 1e-4
    rtol = 1e-4
    allow_nonfinite = True
    """Non-finite outputs reach ``check``: a variant on which the reference is not finite is not judged; anywhere
    else a non-finite output still fails (``Task.form_mismatch``)."""
    reference_class = "Model"
    """The class whose ops a candidate may not call (``ksearch.tools.integrity.reference_ops``)."""
    pytorch_baseline_modes = ("eager", "compile")
    """The problem's ``Model`` is timed as a baseline eagerly and under ``torch.compile`` (by
    ``ksearch.flows.baselines``)."""

    def __init__(self, path: str | Path, *, allow: tuple[str, ...] | frozenset[str] = ()) -> None:
        self.path = Path(path).resolve()
        self.problem = load_problem(self.path)
        unknown = sorted(set(allow) - set(ALLOWABLE_RULES))
        if unknown:
            raise KernelBenchError(
                f"cannot allow {', '.join(unknown)}: only {', '.join(ALLOWABLE_RULES)} can be allowed",
                hint="e.g. kernelbench:1/19?allow=reference_op (a try/except fallback to PyTorch is never allowed)",
            )
        self.allowed_rules: frozenset[str] = frozenset(allow)
        """Integrity rules of ``ALLOWABLE_RULES`` this task lets through (``?allow=``)."""
        self.name = PREFIX + str(self.path) + options_suffix(self.allowed_rules)
        self.title = f"KernelBench {describe_level_path(self.path)}"
        self.source = self.path.read_text(encoding="utf-8")
        self._reduction: Reduction | None = None
        self._cpu_problem: ModuleType | None = None
        self.judge = OutputJudge(TRIAL_PREFIX + "0", self.form_mismatch)
        """Judges outputs, and remembers between configs what judging needs (in the judging process)."""
        self._model_draws: dict[str, int] = {}
        """Device kind -> random numbers building ``Model`` draws (``streams.construction_draws``)."""

    @classmethod
    def from_name(cls, name: str, root: str | Path | None = None) -> KernelBenchTask:
        """The task a ``kernelbench:...`` name (with or without ``?allow=``) names."""
        spec, allow = parse_options(name.removeprefix(PREFIX))
        return cls(find_problem(spec, root), allow=allow)

    # -- the problem as each device checks it -------------------------------------------------------------------
    def data_paths(self) -> tuple[str, ...]:
        return (str(self.path),)

    def problem_for(self, device: str) -> ModuleType:
        """The problem module: as written on a GPU; on the CPU with its sizes reduced to fit (``sizes``)."""
        if device_kind(device) != "cpu":
            return self.problem
        with _LAZY_LOCK:
            if self._cpu_problem is None:
                reduction = self.cpu_reduction()
                self._cpu_problem = load_source(reduction.source, self.path) if reduction.changes else self.problem
            return self._cpu_problem

    def cpu_reduction(self) -> Reduction:
        """How the CPU checks this problem (raises ``CpuTooLarge`` when no reduction fits). Computed once, by one
        thread: a resumed run's parallel cycles all ask at once (each writes a kernel from the task's spec)."""
        with _LAZY_LOCK:
            if self._reduction is None:
                self._reduction = reduce_for_cpu(self.source, self.path)
            return self._reduction

    def device_note(self, device: str) -> str:
        """What a user should know about how ``device`` checks this problem ('' when nothing)."""
        return self.cpu_reduction().describe() if device_kind(device) == "cpu" else ""

    # -- configs and inputs -------------------------------------------------------------------------------------
    def test_configs(self, device: str) -> list[TaskConfig]:
        """KernelBench's 5 seeded trials on ``get_inputs()``, one input set per distribution of ``variants``, then
        ``rescaled`` and its ``perturbed`` twin (``distributions``)."""
        trials = [
            TaskConfig(name=f"{TRIAL_PREFIX}{i}", params={}, seed=seed, distribution=GET_INPUTS)
            for i, seed in enumerate(trial_seeds())
        ]
        extra = [
            TaskConfig(name=name, params={}, seed=VARIANT_SEED_BASE + i, distribution=name)
            for i, name in enumerate(VARIANTS)
        ]
        shaped = [TaskConfig(name=name, params={}, seed=RESCALED_SEED, distribution=name) for name in DISTRIBUTIONS]
        return trials + extra + shaped

    def benchmark_configs(self, device: str) -> list[TaskConfig]:
        """One timed config, on ``get_inputs()`` or ``rescaled`` inputs as its salted seed decides (``TIMED``)."""
        return [TaskConfig(name="benchmark", params={}, seed=BENCHMARK_SEED, distribution=TIMED)]

    def make_inputs(self, config: TaskConfig, device: str) -> list[Any]:
        """``get_inputs()`` from the inputs' own stream (``streams.inputs_seed``), redrawn per the distribution."""
        problem = self.problem_for(device)
        made = drawn_on(device, inputs_seed(config.seed), lambda: list(problem.get_inputs()))
        inputs = list(to_device(made, device))
        distribution = timed_distribution(config.seed) if config.distribution == TIMED else config.distribution
        if distribution in (RESCALED, PERTURBED):  # changed in place: tensors ``get_inputs()`` may hold are copied
            inputs = [x.clone() if isinstance(x, torch.Tensor) and x is y else x for x, y in zip(inputs, made)]
        del made  # each activation below is released before its replacement is drawn (``redraw``)
        if distribution in VARIANTS:
            inputs = redraw(inputs, distribution, config.seed, device)
        elif distribution in (RESCALED, PERTURBED):
            inputs = rescale(inputs, config.seed)
            if distribution == PERTURBED:
                inputs = perturb(inputs, config.seed)
        return inputs

    def init_inputs(self, config: TaskConfig, device: str = "cuda") -> list[Any]:
        with seeded_global_rng(weights_seed(config.seed)):
            return list(self.problem_for(device).get_init_inputs())

    def build(self, cls: type, config: TaskConfig, device: str) -> torch.nn.Module:
        """``cls(*get_init_inputs())`` with the global RNG seeded by the weights' stream of the config's seed
        (``streams.weights_seed``), moved to ``device``."""
        return self._built(cls, config, device)[0]

    def _built(self, cls: type, config: TaskConfig, device: str) -> tuple[Any, int]:
        """The built model and how many random numbers its construction drew."""
        init = self.init_inputs(config, device)
        with seeded_global_rng(weights_seed(config.seed)):
            model, drawn = construction_draws(lambda: cls(*init))
        return (model.to(device) if isinstance(model, torch.nn.Module) else model), drawn

    def prepare(self, module: Any, config: TaskConfig, device: str) -> Callable[..., Any]:
        """``ModelNew`` built like ``Model`` (refused when its construction draws more random numbers, see
        ``streams``), called without gradients; returning (a view of) an input raises ``OutputAliasesInput``."""
        kind = device_kind(device)
        if kind not in self._model_draws:
            self._model_draws[kind] = self._built(self.problem_for(device).Model, config, "cpu")[1]
        model, drawn = self._built(getattr(module, self.entry_point), config, device)
        check_draws(self._model_draws[kind], drawn)

        def run(*inputs: Any) -> Any:
            with torch.no_grad():
                output = model(*inputs)
            aliased = _aliased_input(output, inputs)
            if aliased is not None:
                raise OutputAliasesInput(
                    f"output_aliases_input: ModelNew returned memory of its input {aliased} (the input itself or a "
                    "view of it); compute the result into a new tensor"
                )
            return output

        return run

    def expected(self, config: TaskConfig, inputs: list[Any]) -> Any:
        """The reference computed in float64 and rounded to the problem's output dtype, the answer exact to it
        (``precision``); the problem's own output where float64 cannot run or fit. Both runs of ``forward`` start
        from the same generator state, so a random op in it (refused by ``validate``) cannot pass for rounding."""
        device = _device_of(inputs)
        self.judge.remember_inputs(config, inputs)
        model = self.build(self.problem_for(device).Model, config, device)
        with seeded_global_rng(weights_seed(config.seed)):
            wide = float64_reference(model, inputs)
        with seeded_global_rng(weights_seed(config.seed)), torch.no_grad():
            own = model(*inputs)
        if wide is None:
            return own
        exact, roundings = exact_in_dtype(own, wide, tolerance_for)
        for tensor, rounding in roundings:
            self.judge.roundings.put(tensor, rounding)
        return exact

    def _own_output(self, config: TaskConfig, inputs: list[Any]) -> Any:
        """The problem's ``Model`` on ``inputs`` as written: its dtype, the generator as it is."""
        model = self.build(self.problem_for(_device_of(inputs)).Model, config, _device_of(inputs))
        with torch.no_grad():
            return model(*inputs)

    def reference(self, *inputs: Any) -> Any:
        return self.expected(self.test_configs("cpu")[0], list(inputs))

    def activation_inputs(self, config: TaskConfig) -> tuple[int, ...]:
        """Every input tensor, when no input's shape, dtype or Python value depends on the seed (found by making
        the inputs of two seeds, on the meta device where the code allows); none otherwise."""
        return probed_activation_inputs(self, config)

    # -- checking -----------------------------------------------------------------------------------------------
    def check(self, config: TaskConfig, output: Any, expected: Any) -> Mismatch | None:
        """KernelBench's per-dtype tolerance, scaled to the output and widened for the op's own rounding; work
        checks named (``checking.OutputJudge``)."""
        return self.judge.check(config, output, expected)

    # -- before any evaluation ----------------------------------------------------------------------------------
    def validate(self, device: str = "cpu") -> None:
        """Refuse at once what no evaluation could judge: on the CPU a problem too large to reduce (``CpuTooLarge``),
        and anywhere a reference that is not deterministic (``UnjudgeableProblem``). The determinism probe runs
        the reference twice on the CPU at reduced sizes (skipped on a GPU run when the problem does not reduce)."""
        try:
            measured = self.cpu_reduction().bytes_before is not None
            self.problem_for("cpu")
        except CpuTooLarge:
            if device_kind(device) == "cpu":
                raise
            return
        if not measured and device_kind(device) != "cpu":
            return  # sizes unknown: running the reference on the CPU could take the machine's memory
        config = self.test_configs("cpu")[0]
        inputs = self.make_inputs(config, "cpu")
        first = self._own_output(config, [_clone(x) for x in inputs])
        second = self._own_output(config, [_clone(x) for x in inputs])
        difference = self.check(config, second, first)
        if difference is None:
            return
        dropout = _training_dropout(self.build(self.problem_for("cpu").Model, config, "cpu"))
        cause = f" ({dropout} in training mode)" if dropout else " (random ops in forward, or dropout in training mode)"
        raise UnjudgeableProblem(
            f"{self.title} cannot be judged as written: its Model gives different outputs for the same inputs and "
            f"weights{cause}, so no kernel can match it ({difference.message})",
            hint="make the reference deterministic: call self.eval() (or build Dropout with p=0) in Model.__init__, "
            "or seed its random ops",
        )

    # -- prompts ------------------------------------------------------------------------------------------------
    def spec(self, language: str) -> str:
        if language not in self.languages:
            raise ValueError(f"task {self.name!r} has no spec for language {language!r}; it supports {self.languages}")
        try:
            cpu = self.cpu_reduction().describe()
        except CpuTooLarge:
            cpu = "too large for the CPU: evaluated on a GPU only"
        return spec_text(self.title, language, self.allowed_rules, cpu, self.source)

    def reference_source(self) -> str:
        return self.source

    def work_policy(self) -> WorkPolicy | None:
        """Every correctness call traced and one ghost replay (``WorkPolicy``), unless the task name allows PyTorch's
        ops (``reference_op``: no trace) or kernels-free candidates (``no_custom_kernel``: no ghost, no launch
        required)."""
        trace = "reference_op" not in self.allowed_rules
        launches = "no_custom_kernel" not in self.allowed_rules
        if not trace and not launches:
            return None
        return WorkPolicy(trace=trace, ghost=launches, launches_required=launches)

    def starter_code(self, language: str) -> str | None:
        return None

    def flops_and_bytes(self, config: TaskConfig) -> tuple[float, float]:
        """Unknown for an arbitrary problem: (0, 0) means "no roofline floor"."""
        return 0.0, 0.0


def _device_of(inputs: list[Any]) -> str:
    for value in inputs:
        if isinstance(value, torch.Tensor):
            return str(value.device)
    return "cpu"


def _aliased_input(output: Any, inputs: tuple[Any, ...]) -> int | None:
    """The position of an input whose memory the output (or one of a tuple of outputs) uses, else None."""
    storages = {
        x.untyped_storage().data_ptr(): i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.numel()
    }
    for tensor in output if isinstance(output, (tuple, list)) else (output,):
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            position = storages.get(tensor.untyped_storage().data_ptr())
            if position is not None:
                return position
    return None


def _clone(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def _training_dropout(model: Any) -> str:
    """'nn.Dropout(p=0.5)' when the model holds a dropout layer in training mode with p > 0, else ''."""
    if not isinstance(model, torch.nn.Module):
        return ""
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.training and module.p > 0:
            return f"nn.{type(module).__name__}(p={module.p:g})"
    return ""


__all__ = ["CpuTooLarge", "KernelBenchTask", "OutputAliasesInput", "UnjudgeableProblem", "trial_seeds"]
