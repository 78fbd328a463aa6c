"""Issue 36 and issue 35 item 10, piece by piece: input variants, the scaled tolerance, named work checks, the
reference-op rules, unjudgeable references, CPU size reduction, and the sweep's per-check report."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from ksearch.contracts.evaluation import Evaluation, Mismatch, Rejection, Verdict
from ksearch.tasks.kernelbench import KernelBenchTask, OutputAliasesInput
from ksearch.tasks.kernelbench.distributions import DISTRIBUTIONS
from ksearch.tasks.kernelbench.judging import check_of, output_scale, scaled_mismatch
from ksearch.tasks.kernelbench.problem_files import KernelBenchError
from ksearch.tasks.kernelbench.sizes import CpuTooLarge, reduce_for_cpu, scalable_constants
from ksearch.tasks.kernelbench.variants import VARIANTS, is_activation, redraw
from ksearch.tasks.registry import canonical_task_name, resolve_task
from ksearch.tools import integrity
from ksearch.tools.integrity.reference_op_names import canonical
from ksearch.tools.integrity.reference_ops import reference_ops, waived

CORPUS = Path(__file__).resolve().parent / "kernelbench" / "KernelBench"
OLD_DATA = Path(__file__).resolve().parent / "data" / "kernelbench"


def task(name: str, **kwargs: object) -> KernelBenchTask:
    return KernelBenchTask(CORPUS / name, **kwargs)  # type: ignore[arg-type]


# -- inputs that exercise the op -----------------------------------------------------------------------------------
def test_variants_keep_shapes_dtypes_and_labels_and_are_deterministic() -> None:
    hinge = task("level1/100_HingeLoss.py")
    configs = {c.name: c for c in hinge.test_configs("cpu")}
    assert list(configs) == [f"trial{i}" for i in range(5)] + list(VARIANTS) + list(DISTRIBUTIONS)
    trial = hinge.make_inputs(configs["trial0"], "cpu")
    for name in VARIANTS:
        drawn = hinge.make_inputs(configs[name], "cpu")
        again = hinge.make_inputs(configs[name], "cpu")
        assert all(torch.equal(a, b) for a, b in zip(drawn, again, strict=True)), name  # worker == checker
        assert [(x.shape, x.dtype) for x in drawn] == [(x.shape, x.dtype) for x in trial]
        assert torch.equal(drawn[1], hinge.make_inputs(configs[name], "cpu")[1])
        assert set(drawn[1].unique().tolist()) <= {-1.0, 1.0}  # +-1 targets are labels: kept
        assert not torch.equal(drawn[0], trial[0])
    signed = hinge.make_inputs(configs["signed"], "cpu")[0]
    large = hinge.make_inputs(configs["large"], "cpu")[0]
    sparse = hinge.make_inputs(configs["sparse"], "cpu")[0]
    assert signed.min() < 0 < signed.max() and large.abs().max() <= 8 and large.abs().max() > 7
    assert 0.2 < float((sparse == 0).float().mean()) < 0.3 and sparse.abs().max() > 6
    assert not is_activation(torch.tensor([1.0, -1.0, 1.0])) and not is_activation(torch.arange(5))
    ints = [torch.arange(6), torch.rand(3, 4)]
    kept = redraw(ints, "signed", 1, "cpu")
    assert kept[0] is ints[0] and kept[1].min() < 0


# -- a tolerance that scales -----------------------------------------------------------------------------------------
def test_the_tolerance_scales_with_the_output_so_a_constant_softmax_fails() -> None:
    x = torch.rand(1, 393216, dtype=torch.float64)
    reference = torch.softmax(x, dim=1).float()
    constant = torch.full_like(reference, 1 / reference.shape[1])
    assert torch.allclose(constant, reference, atol=1e-4, rtol=1e-4)  # KernelBench's own check passes it
    mismatch = scaled_mismatch("trial0", constant, reference, 1e-4)
    assert mismatch is not None and mismatch.check == "scaled_tolerance" and "would pass it" in mismatch.message
    honest = torch.softmax(x.float(), dim=1)  # float32 arithmetic, not the float64 reference's
    assert scaled_mismatch("trial0", honest, reference, 1e-4) is None
    big = torch.tensor([1000.0, 0.5])  # scale >= 1: exactly KernelBench's test
    assert scaled_mismatch("t", big + torch.tensor([0.09, 0.0]), big, 1e-4) is None
    assert scaled_mismatch("t", big + torch.tensor([0.0, 2e-4]), big, 1e-4) is not None
    assert scaled_mismatch("t", torch.tensor([3, 4]), torch.tensor([3, 4]), 1e-4) is None
    assert scaled_mismatch("t", torch.tensor([3, 4]), torch.tensor([3, 5]), 1e-4) is not None  # ints: exact
    assert output_scale(torch.tensor([3.0, 4.0, float("nan")])) == pytest.approx((12.5) ** 0.5)


def test_a_variant_the_op_does_not_allow_is_not_judged() -> None:
    relu = task("level1/19_ReLU.py")
    configs = {c.name: c for c in relu.test_configs("cpu")}
    nan = torch.tensor([float("nan"), 1.0])
    assert relu.check(configs["signed"], torch.zeros(2), nan) is None  # the reference is not finite there
    mismatch = relu.check(configs["trial0"], torch.zeros(2), nan)  # on get_inputs() it is judged, and fails
    assert mismatch is not None and "reference" in mismatch.message
    assert relu.check(configs["signed"], torch.tensor([float("nan"), 1.0]), torch.ones(2)) is not None


# -- work checks -------------------------------------------------------------------------------------------------------
def test_failures_name_the_work_check_they_show() -> None:
    relu = task("level1/19_ReLU.py")
    configs = {c.name: c for c in relu.test_configs("cpu")}
    x = relu.make_inputs(configs["signed"], "cpu")
    expected = relu.expected(configs["signed"], [t.clone() for t in x])
    mismatch = relu.check(configs["signed"], x[0].clone(), expected)
    assert mismatch is not None and mismatch.check == "output_is_input"

    constant = torch.full_like(expected, 0.5)
    first = relu.expected(configs["trial0"], relu.make_inputs(configs["trial0"], "cpu"))
    relu.check(configs["trial0"], constant, first)  # a new evaluation starts: its output is remembered
    second = relu.expected(configs["trial1"], relu.make_inputs(configs["trial1"], "cpu"))
    mismatch = relu.check(configs["trial1"], constant.clone(), second)
    assert mismatch is not None and mismatch.check == "insensitive_output" and "trial0" in mismatch.message

    hardtanh = task("level1/32_HardTanh.py")
    config = {c.name: c for c in hardtanh.test_configs("cpu")}["large"]
    y = hardtanh.make_inputs(config, "cpu")
    wanted = hardtanh.expected(config, [t.clone() for t in y])
    mismatch = hardtanh.check(config, y[0].clamp(max=1.0), wanted)
    assert mismatch is not None and mismatch.check == "input_distribution" and "U(-8, 8)" in mismatch.message


def test_modelnew_returning_its_input_fails_at_once() -> None:
    relu = task("level1/19_ReLU.py")
    config = relu.test_configs("cpu")[0]

    class Identity(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.view(-1)

    class Honest(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.clamp(min=0)

    module = type("m", (), {"ModelNew": Identity})
    x = relu.make_inputs(config, "cpu")
    with pytest.raises(OutputAliasesInput, match="output_aliases_input"):
        relu.prepare(module, config, "cpu")(*x)
    assert relu.prepare(type("m", (), {"ModelNew": Honest}), config, "cpu")(*x).shape == x[0].shape


def test_check_of_reads_which_check_failed_an_evaluation() -> None:
    def ev(**kw: object) -> Evaluation:
        return Evaluation(device="cpu", **kw)  # type: ignore[arg-type]

    assert (
        check_of(ev(verdict=Verdict.REJECTED, rejection=Rejection(rule="reference_op", evidence="x"))) == "reference_op"
    )
    assert check_of(ev(verdict=Verdict.REJECTED, rejection=Rejection(rule="stream_use", evidence="x"))) is None
    assert (
        check_of(ev(verdict=Verdict.INCORRECT, mismatch=Mismatch(config="signed", check="input_distribution")))
        == "input_distribution"
    )
    assert check_of(ev(verdict=Verdict.INCORRECT, mismatch=Mismatch(config="trial0"))) is None
    assert (
        check_of(ev(verdict=Verdict.RUNTIME_ERROR, log="OutputAliasesInput: output_aliases_input: ..."))
        == "output_aliases_input"
    )


# -- the reference-op rules ----------------------------------------------------------------------------------------
def test_reference_ops_are_read_from_the_reference_forward() -> None:
    assert reference_ops(task("level1/19_ReLU.py").source, "Model") == {"relu"}
    assert reference_ops(task("level1/100_HingeLoss.py").source, "Model") == {"mean", "clamp"}
    assert reference_ops(task("level2/1_Conv2D_ReLU_BiasAdd.py").source, "Model") == {"conv2d", "relu"}
    assert canonical("torch.nn.functional.leaky_relu") == canonical("torch.nn.LeakyReLU") == "leakyrelu"
    assert canonical("torch.nn.BatchNorm2d") == canonical("torch.batch_norm") == "batchnorm"
    assert canonical("torch.bmm") == canonical("torch.nn.Linear") == "matmul"
    assert canonical("torch.ops.aten.relu.default") == "relu"


RELU_KERNEL = """
import torch, torch.nn as nn, triton, triton.language as tl

@triton.jit
def _k(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + o, tl.maximum(tl.load(x + o, mask=o < n), 0.0), mask=o < n)

def launch(x):
    y = torch.empty_like(x)
    _k[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), B=1024)
    return y
"""


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        ("    def forward(self, x):\n        return launch(x)\n", None),
        ("    def forward(self, x):\n        launch(x)\n        return x.relu()\n", "reference_op"),
        ("    def forward(self, x):\n        launch(x)\n        return nn.ReLU()(x)\n", "reference_op"),
        (
            "    def forward(self, x):\n        launch(x)\n        return torch.ops.aten.relu.default(x)\n",
            "reference_op",
        ),
        ("    def forward(self, x):\n        launch(x)\n        return x.clamp(min=0)\n", "reference_op"),
        ("    def forward(self, x):\n        return torch.clamp(x, min=0)\n", "reference_op"),
        ("    def forward(self, x):\n        return x * (x > 0)\n", "no_custom_kernel"),
        (
            "    def forward(self, x):\n        try:\n            return launch(x)\n        except RuntimeError:\n"
            "            return x.clamp(min=0)\n",
            "reference_fallback",
        ),
        (
            (
                "    def relu(self, x):\n        return launch(x)\n    def forward(self, x):\n"
                "        return self.relu(x)\n"
            ),
            None,
        ),
    ],
)
def test_the_rules_judge_what_modelnew_runs(body: str, rule: str | None) -> None:
    relu = task("level1/19_ReLU.py")
    code = RELU_KERNEL + "\nclass ModelNew(nn.Module):\n" + body
    rejection = integrity.check_source(code, task_name=relu.name)
    assert (rejection.rule if rejection else None) == rule, rejection


@pytest.mark.parametrize(
    ("host", "rule"),
    [
        (
            "auto y = at::empty_like(x); relu_kernel<<<g, b>>>(x.data_ptr<float>(), y.data_ptr<float>()); return y;",
            None,
        ),
        ("return at::relu(x);", "reference_op"),
        ("return torch::nn::functional::relu(x);", "reference_op"),
        ("return x.clamp_min(0);", "reference_op"),
        ("return x.contiguous()->relu();", "reference_op"),
    ],
    ids=["kernel", "aten", "functional", "method", "arrow"],
)
def test_the_rules_read_pytorch_ops_in_cuda_host_code(host: str, rule: str | None) -> None:
    """``load_inline`` host code that calls ``at::relu`` hands the work to PyTorch as ``torch.relu`` does (a red-team
    review of 2026-11-29: the rule read Python only); allocation stays allowed."""
    relu = task("level1/19_ReLU.py")
    source = (
        "#include <torch/extension.h>\n__global__ void relu_kernel(const float* x, float* y) {}\n"
        f"torch::Tensor relu_host(torch::Tensor x) {{ {host} }}\n"
    )
    code = (
        RELU_KERNEL + f"\nSRC = {source!r}\n"
        "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return launch(x)\n"
    )
    rejection = integrity.check_source(code, task_name=relu.name)
    assert (rejection.rule if rejection else None) == rule, rejection


def test_an_unused_reference_copy_and_a_self_test_are_not_judged() -> None:
    relu = task("level1/19_ReLU.py")
    code = RELU_KERNEL + (
        "\nclass Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
        "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return launch(x)\n"
        "\nif __name__ == '__main__':\n    x = torch.randn(8)\n    assert torch.equal(ModelNew()(x), torch.relu(x))\n"
    )
    assert integrity.check_source(code, task_name=relu.name) is None


def test_a_task_name_can_allow_the_pytorch_op_and_the_sweep_sees_it_waived() -> None:
    code = (Path(__file__).parent / "kernelbench" / "honest" / "conv_relu_bias_torch_conv.py").read_text()
    strict = task("level2/1_Conv2D_ReLU_BiasAdd.py")
    allowing = resolve_task(f"kernelbench:{strict.path}?allow=reference_op")
    assert isinstance(allowing, KernelBenchTask) and allowing.name == strict.name + "?allow=reference_op"
    rejection = integrity.check_source(code, task_name=strict.name)
    assert rejection is not None and rejection.rule == "reference_op" and "self.conv" in rejection.evidence
    assert integrity.check_source(code, task_name=allowing.name) is None
    assert waived(code, allowing) == ["reference_op"] and waived(code, strict) == []
    assert "allows calling PyTorch ops" in allowing.spec("triton") and "Do not call" in strict.spec("triton")
    assert canonical_task_name(f"kernelbench:{strict.path}?allow=no_custom_kernel,reference_op").endswith(
        "?allow=no_custom_kernel,reference_op"
    )
    with pytest.raises(KernelBenchError, match="only reference_op, no_custom_kernel can be allowed"):
        resolve_task(f"kernelbench:{strict.path}?allow=reference_fallback")
    with pytest.raises(KernelBenchError, match="unknown KernelBench task option"):
        resolve_task(f"kernelbench:{strict.path}?seed=1")


def test_earlier_honest_solutions_and_the_harness_baselines_pass_the_rules() -> None:
    from ksearch.tasks.kernelbench.baseline import baseline_code

    for spec, solution in [
        ("1/1", "level1_1_ok.py"),
        ("1/2", "level1_2_ok.py"),
        ("2/1", "level2_1_ok.py"),
        ("2/2", "level2_2_ok.py"),
    ]:
        kb = resolve_task(f"kernelbench:{spec}", kernelbench_root=OLD_DATA)
        assert integrity.check_source((OLD_DATA / "solutions" / solution).read_text(), task_name=kb.name) is None
        trusted = frozenset(integrity.reference_ops.RULE_NAMES)
        for mode in ("eager", "compile"):
            assert integrity.check_source(baseline_code(kb, mode), task_name=kb.name, allow=trusted) is None
            assert integrity.check_source(baseline_code(kb, mode), task_name=kb.name) is not None


# -- CPU sizes (issue 35 item 10) --------------------------------------------------------------------------------------
def test_problems_sized_for_a_gpu_are_checked_at_reduced_sizes_on_the_cpu() -> None:
    relu = task("level1/19_ReLU.py")
    reduction = relu.cpu_reduction()
    assert reduction.changes == {"batch_size": (4096, 1024), "dim": (393216, 768)}
    assert reduction.bytes_before == 2 * 4096 * 393216 * 4 and reduction.bytes_after <= 8 << 20
    assert "reduced sizes: batch_size 4096 -> 1024" in relu.device_note("cpu") and relu.device_note("cuda") == ""
    assert relu.make_inputs(relu.test_configs("cpu")[0], "cpu")[0].shape == (1024, 768)
    assert relu.problem_for("cuda").dim == 393216  # the GPU checks the problem as written
    assert "On the CPU (Triton interpreter) this problem is at reduced sizes" in relu.spec("triton")
    mse = task("level1/94_MSELoss.py").cpu_reduction()
    assert set(mse.changes) == {"batch_size", "input_shape[0]"}
    conv = task("level2/1_Conv2D_ReLU_BiasAdd.py").cpu_reduction()
    assert "height = width" in conv.changes and "kernel_size" not in conv.changes
    small = KernelBenchTask(OLD_DATA / "KernelBench" / "level2" / "2_Linear_ReLU_LayerNorm.py")
    assert small.cpu_reduction().changes == {} and small.device_note("cpu") == ""


def test_a_constant_the_problem_needs_is_left_alone(tmp_path: Path) -> None:
    problem = tmp_path / "p.py"
    problem.write_text(
        "import torch\n\nclass Model(torch.nn.Module):\n    def __init__(self, heads):\n        super().__init__()\n"
        "        self.heads = heads\n\n    def forward(self, x):\n        assert x.shape[1] % 96 == 0\n"
        "        return x.view(x.shape[0], self.heads, -1).sum(-1)\n\n"
        "batch_size = 1 << 16\nwidth = 96 * 64\nheads = 32\n\n"
        "def get_inputs():\n    return [torch.rand(batch_size, width)]\n\ndef get_init_inputs():\n    return [heads]\n"
    )
    reduction = reduce_for_cpu(problem.read_text(), problem)
    assert reduction.changes["batch_size"][1] < 1 << 16
    assert reduction.changes.get("width", (0, 96))[1] % 96 == 0  # a halving that broke the model was undone
    assert [c.name for c in scalable_constants(problem.read_text())] == ["batch_size", "width", "heads"]


def test_a_problem_that_cannot_be_reduced_is_refused_with_the_memory_it_needs(tmp_path: Path) -> None:
    problem = tmp_path / "huge.py"
    problem.write_text(
        "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n\n"
        "def get_inputs():\n    return [torch.rand(20000, 20000)]\n\ndef get_init_inputs():\n    return []\n"
    )
    huge = KernelBenchTask(problem)
    with pytest.raises(CpuTooLarge, match=r"need 3\.2 GB, more than the CPU checks") as info:
        huge.validate("cpu")
    assert "--device cuda" in info.value.hint
    huge.validate("cuda")  # a GPU run is not refused (and the CPU probe is skipped)


def test_eval_says_when_the_cpu_checked_reduced_sizes() -> None:
    from ksearch.contracts.candidate import Candidate
    from ksearch.flows.evaluate import with_device_note
    from ksearch.tools.evaluator import EvalRequest

    relu = task("level1/19_ReLU.py")
    request = EvalRequest(candidate=Candidate(task=relu.name, language="triton", code="", entry_point="ModelNew"))
    noted = with_device_note(Evaluation(verdict=Verdict.PASSED, device="cpu"), request)
    assert noted.log.startswith("note: checked on the CPU at reduced sizes: batch_size 4096 -> 1024")


def test_scalable_constants_are_literal_ints_only() -> None:
    source = "a = 4096\nb = 2048 * 2\nc = a\nd = (32768, 3)\ne = 0.5\nf = g = 128\nh = 'x'\n"
    found = {c.name: c.value for c in scalable_constants(source)}
    assert found == {"a": 4096, "b": 4096, "d[0]": 32768, "d[1]": 3, "f = g": 128}
    ast.parse(source)


# -- the sweep's report ------------------------------------------------------------------------------------------------
def test_the_sweep_summary_counts_problems_per_check() -> None:
    from ksearch.flows.sweep import ProblemEntry, checks_summary

    rows = [
        ProblemEntry(
            problem_id=1,
            title="a",
            task="t",
            run_id="r1",
            status="finished",
            correct=True,
            checks={"reference_op": 2, "output_is_input": 1},
            waived=["reference_op"],
        ),
        ProblemEntry(problem_id=2, title="b", task="t", run_id="r2", status="finished", checks={"reference_op": 1}),
        ProblemEntry(problem_id=3, title="c", task="t", run_id="r3", status="unjudgeable"),
    ]
    summary = checks_summary(rows)
    assert summary == {
        "checks": {"reference_op": 2, "output_is_input": 1},
        "unjudgeable": [3],
        "waived": {"reference_op": 1},
    }
