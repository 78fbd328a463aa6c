"""Issue 60 on the task side: the float64 reference and the allowance for the op's own rounding, weights and inputs from
separate streams, the count of random numbers a construction draws, the secret-statistics distributions, the
sensitivity check and the timed distribution."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ksearch.contracts.evaluation import Mismatch
from ksearch.tasks.base import TaskConfig
from ksearch.tasks.kernelbench import KernelBenchTask
from ksearch.tasks.kernelbench.distributions import (
    BLOCK_FRACTION,
    EXPONENTS,
    GET_INPUTS,
    RESCALED,
    SCALES,
    rescale,
    secret_shape,
    timed_distribution,
)
from ksearch.tasks.kernelbench.judging import REFERENCE_PRECISION, SENSITIVITY, scaled_mismatch
from ksearch.tasks.kernelbench.precision import Rounding
from ksearch.tasks.kernelbench.streams import ConstructionDraws, inputs_seed, weights_seed

CORPUS = Path(__file__).resolve().parent / "kernelbench" / "KernelBench"


def task(name: str) -> KernelBenchTask:
    return KernelBenchTask(CORPUS / name)


def configs_of(t: KernelBenchTask) -> dict[str, TaskConfig]:
    return {c.name: c for c in t.test_configs("cpu")}


# -- the float64 reference and the allowance for the op's own rounding ----------------------------------------------
def test_an_answer_exact_to_float32_and_an_honest_float32_matmul_pass_the_large_variant_tf32_does_not() -> None:
    """Issue 60: against the float32 reference, with its absolute floor capped at 1e-4, even the float64 product
    rounded to float32 failed problem 1's ``large`` variant at N = 512 (the reference's own rounding is ~1e-3)."""
    matmul = task("level1/1_Square_matrix_multiplication_.py")
    config = configs_of(matmul)["large"]
    a, b = matmul.make_inputs(config, "cpu")
    expected = matmul.expected(config, [a, b])
    exact = (a.double() @ b.double()).float()
    assert matmul.check(config, exact, expected) is None
    blocked = sum(a[:, k : k + 32] @ b[k : k + 32] for k in range(0, a.shape[1], 32))  # another summation order
    assert matmul.check(config, blocked, expected) is None
    tf32 = _round_mantissa(a, 10) @ _round_mantissa(b, 10)  # TF32 keeps 10 bits of mantissa
    mismatch = matmul.check(config, tf32, expected)
    assert mismatch is not None and "raised from" in mismatch.message
    own = torch.matmul(a, b)  # what the comparison used to be against: the exact answer misses it
    assert scaled_mismatch("large", exact, own, 1e-4) is not None


def _round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    raw = x.contiguous().view(torch.int32)
    drop = 23 - bits
    return ((raw + (1 << (drop - 1))) & ~((1 << drop) - 1)).view(torch.float32)


def test_the_allowance_for_rounding_says_when_the_reference_itself_misses_the_base_tolerance() -> None:
    expected = torch.tensor([10.0, 0.0, -3.0])
    tight = Rounding(rms=1e-7, needed_floor=0.0)
    assert scaled_mismatch("t", expected + 5e-4, expected, 1e-4, tight) is not None  # rounding too small to matter
    loose = Rounding(rms=1e-3, needed_floor=2e-3)  # the float32 reference misses 1e-4 by 2e-3 itself
    assert scaled_mismatch("t", expected + 3e-3, expected, 1e-4, loose) is None
    mismatch = scaled_mismatch("t", expected + 0.1, expected, 1e-4, loose)
    assert mismatch is not None and mismatch.check == REFERENCE_PRECISION
    assert "misses the base tolerance by up to 0.002 itself" in mismatch.message


def test_a_reference_that_computes_in_its_own_dtype_is_used_as_it_is(tmp_path: Path) -> None:
    problem = tmp_path / "cast.py"
    problem.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return x.float().cumsum(0)\n\n\n"
        "def get_inputs():\n    return [torch.rand(64)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    cast = KernelBenchTask(problem)
    config = cast.test_configs("cpu")[0]
    inputs = cast.make_inputs(config, "cpu")
    assert torch.equal(cast.expected(config, inputs), inputs[0].cumsum(0))  # float32 throughout: no float64 copy


# -- weights and inputs from separate streams; what a construction draws ---------------------------------------------
_PROBE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.seen_seed = torch.initial_seed()
        self.linear = nn.Linear(8, 4)
{extra}
    def forward(self, x):
        return x
"""


def _module(tmp_path: Path, extra: str = "") -> object:
    import importlib.util

    path = tmp_path / f"new{abs(hash(extra))}.py"
    path.write_text(_PROBE.format(extra=extra))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _linear_problem(tmp_path: Path) -> KernelBenchTask:
    problem = tmp_path / "linear.py"
    problem.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.linear = nn.Linear(8, 4)\n\n    def forward(self, x):\n"
        "        return self.linear(x)\n\n\ndef get_inputs():\n    return [torch.rand(16, 8)]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    return KernelBenchTask(problem)


def test_modelnew_construction_sees_the_weights_stream_never_the_inputs(tmp_path: Path) -> None:
    """Issue 60: with one seed for both, ``ModelNew.__init__`` could draw ``get_inputs()`` again and precompute."""
    linear = _linear_problem(tmp_path)
    config = linear.test_configs("cpu")[0]
    run = linear.prepare(_module(tmp_path), config, "cpu")
    model = run.__closure__[0].cell_contents if run.__closure__ else None  # the built ModelNew
    assert model is not None and model.seen_seed == weights_seed(config.seed) != inputs_seed(config.seed)
    (x,) = linear.make_inputs(config, "cpu")
    torch.manual_seed(model.seen_seed)
    assert not torch.equal(torch.rand(16, 8), x)  # the generator state __init__ sees does not give the inputs
    torch.manual_seed(inputs_seed(config.seed))
    assert torch.equal(torch.rand(16, 8), x)
    reference = linear.build(linear.problem.Model, config, "cpu")
    assert torch.equal(reference.linear.weight, model.linear.weight)  # Model and ModelNew still share weights


def test_a_modelnew_whose_construction_draws_more_than_model_is_refused(tmp_path: Path) -> None:
    linear = _linear_problem(tmp_path)
    config = linear.test_configs("cpu")[0]
    linear.prepare(_module(tmp_path), config, "cpu")  # the same layers draw the same numbers
    replay = _module(tmp_path, "        self.replayed = torch.rand(16, 8)\n")
    with pytest.raises(
        ConstructionDraws,
        match=r"construction_draws: building ModelNew drew 164 random numbers, building Model draws 36",
    ):
        linear.prepare(replay, config, "cpu")
    private = _module(
        tmp_path, "        self.g = torch.Generator().manual_seed(3)\n        torch.randn(2, generator=self.g)\n"
    )
    with pytest.raises(ConstructionDraws):
        linear.prepare(private, config, "cpu")  # a private generator's draws count too


# -- distributions with secret statistics, sensitivity, the timed distribution --------------------------------------
def test_rescaled_inputs_keep_the_domain_and_zeros_but_not_the_statistics() -> None:
    relu = task("level1/19_ReLU.py")
    configs = configs_of(relu)
    (plain,) = relu.make_inputs(configs["trial0"], "cpu")
    (shaped,) = relu.make_inputs(configs[RESCALED], "cpu")
    (again,) = relu.make_inputs(configs[RESCALED], "cpu")
    assert torch.equal(shaped, again) and shaped.shape == plain.shape and shaped.dtype == plain.dtype
    assert 0.0 <= float(shaped.min()) and float(shaped.max()) < 1.0  # torch.rand's domain
    k, c = secret_shape(configs[RESCALED].seed)
    assert abs(float(shaped.mean()) - c / (k + 1)) < 0.01  # E[c * U**k]: same domain, other statistics
    assert _distance_from_uniform(shaped) > 0.09 and _distance_from_uniform(plain) < 0.01
    mask = torch.tensor([0.0, 0.5, 0.0, 2.0, 1.0])
    assert torch.equal(rescale([mask], 5)[0] == 0, mask == 0)  # zeros (masks, triangles) stay zeros
    shapes = {secret_shape(seed) for seed in range(200)}
    assert len(shapes) == 200
    assert all((EXPONENTS[0][0] <= k <= EXPONENTS[0][1] or EXPONENTS[1][0] <= k <= EXPONENTS[1][1]) for k, _ in shapes)
    assert all(SCALES[0] <= c <= SCALES[1] for _, c in shapes)


def _distance_from_uniform(x: torch.Tensor) -> float:
    """Kolmogorov-Smirnov distance of ``x``'s values from U(0, 1)."""
    values = x.reshape(-1).double().sort().values
    return float((values - torch.linspace(0, 1, values.numel(), dtype=torch.float64)).abs().max())


def test_perturbed_inputs_move_one_secret_block_of_the_largest_input_within_its_range() -> None:
    mse = task("level1/94_MSELoss.py")
    configs = configs_of(mse)
    base = mse.make_inputs(configs[RESCALED], "cpu")
    changed = mse.make_inputs(configs["perturbed"], "cpu")
    differs = [(a != b).reshape(-1).nonzero().reshape(-1) for a, b in zip(base, changed, strict=True)]
    block = base[0].numel() // BLOCK_FRACTION
    assert differs[1].numel() == 0 and 0.99 * block < differs[0].numel() <= block  # one input, one block
    assert int(differs[0].max() - differs[0].min()) < block
    assert float(changed[0].min()) >= float(base[0].min()) and float(changed[0].max()) <= float(base[0].max())


def test_an_output_that_skips_the_perturbed_block_fails_sensitivity_though_within_the_tolerance() -> None:
    """A mean squared error computed without the block the perturbation moved: its value moves by 5e-5 of it, less
    than the tolerance, so only the sensitivity check sees it."""
    mse = task("level1/94_MSELoss.py")
    configs = configs_of(mse)
    base = mse.make_inputs(configs[RESCALED], "cpu")
    changed = mse.make_inputs(configs["perturbed"], "cpu")
    base_expected = mse.expected(configs[RESCALED], base)
    expected = mse.expected(configs["perturbed"], changed)
    honest = lambda p, t: ((p - t) ** 2).mean()  # noqa: E731 - float32 arithmetic, another order than the reference
    assert mse.check(configs[RESCALED], honest(*base), base_expected) is None
    assert mse.check(configs["perturbed"], honest(*changed), expected) is None  # the honest one follows
    assert mse.check(configs[RESCALED], honest(*base), base_expected) is None
    stale = base_expected.clone()
    assert scaled_mismatch("perturbed", stale, expected, 1e-4) is None  # within the tolerance of the new reference
    mismatch = mse.check(configs["perturbed"], stale, expected)
    assert isinstance(mismatch, Mismatch) and mismatch.check == SENSITIVITY, mismatch
    assert "does not follow that part of the input" in mismatch.message


def test_the_timed_config_draws_get_inputs_or_rescaled_inputs_as_its_salted_seed_decides() -> None:
    chosen = {timed_distribution(seed) for seed in range(40)}
    assert chosen == {GET_INPUTS, RESCALED}
    relu = task("level1/19_ReLU.py")
    (bench,) = relu.benchmark_configs("cpu")
    seeds = {timed_distribution(s): s for s in range(40)}
    plain = relu.make_inputs(bench.model_copy(update={"seed": seeds[GET_INPUTS]}), "cpu")[0]
    shaped = relu.make_inputs(bench.model_copy(update={"seed": seeds[RESCALED]}), "cpu")[0]
    torch.manual_seed(inputs_seed(seeds[GET_INPUTS]))
    assert torch.equal(plain, torch.rand(plain.shape))
    assert _distance_from_uniform(shaped) > 0.09


def test_the_prompt_says_what_is_judged_at_run_time() -> None:
    relu = task("level1/19_ReLU.py")
    strict = relu.spec("triton")
    for phrase in ("traced", "replayed with every kernel launch skipped", "rescaled", "perturbed", "float64"):
        assert phrase in strict, phrase
    assert "may draw no more random numbers than `Model.__init__`" in strict
    allowing = KernelBenchTask(relu.path, allow=("reference_op",)).spec("triton")
    assert "traced" not in allowing and "rescaled" in allowing


def test_the_activation_probe_of_the_timed_config_stays_on_the_meta_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluator probes which inputs it may re-randomise on the meta device (inputs can be gigabytes); a timed
    config drawing rescaled inputs made that probe fall back to drawing them twice on the CPU."""
    from ksearch.tasks import fresh_values

    relu = task("level1/19_ReLU.py")
    (bench,) = relu.benchmark_configs("cpu")
    seed = next(s for s in range(40) if timed_distribution(s) == RESCALED)
    devices: list[str] = []
    original = relu.make_inputs
    monkeypatch.setattr(relu, "make_inputs", lambda c, d: devices.append(d) or original(c, d))
    assert fresh_values.probe_activation_inputs(relu.make_inputs, bench.model_copy(update={"seed": seed})) == (0,)
    assert devices == ["meta", "meta"]
