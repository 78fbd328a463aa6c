"""The trimul task (GPU MODE TriMul): reference, inputs, masks, configs, interface, and whole evaluations."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Verdict
from ksearch.tasks.base import TaskConfig
from ksearch.tasks.registry import list_tasks, resolve_task
from ksearch.tasks.trimul import TrimulTask, as_data, fp32_exact
from ksearch.tasks.trimul.reference import WEIGHT_KEYS
from ksearch.tools.evaluator import EvalRequest, evaluate

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
TRITON_EXAMPLE = ROOT / "examples" / "trimul_triton.py"
SUBMISSION_EXAMPLE = ROOT / "examples" / "trimul_submission.py"
CUDA_EXAMPLE = ROOT / "examples" / "trimul_cuda.py"


@pytest.fixture
def task() -> TrimulTask:
    return TrimulTask()


def _config(
    n: int, b: int, c: int, *, seed: int = 0, nomask: bool = False, distribution: str = "normal", h: int = 128
) -> TaskConfig:
    return TaskConfig(
        name=f"x_n{n}_b{b}_c{c}_{seed}",
        params={"seqlen": n, "bs": b, "dim": c, "hiddendim": h, "nomask": nomask},
        seed=seed,
        distribution=distribution,
    )


def independent_trimul(x, mask, w):
    """The formula written out with einsum in float64, as differently from the reference as possible."""
    x, mask = x.double(), mask.double()
    w = {k: v.double() for k, v in w.items()}

    def ln(t, g, b):
        mu = t.mean(-1, keepdim=True)
        var = ((t - mu) ** 2).mean(-1, keepdim=True)
        return (t - mu) / torch.sqrt(var + 1e-5) * g + b

    def sig(t):
        return 1.0 / (1.0 + torch.exp(-t))

    xh = ln(x, w["norm.weight"], w["norm.bias"])
    proj = {
        k: torch.einsum("bijc,hc->bijh", xh, w[f"{k}.weight"])
        for k in ("left_proj", "right_proj", "left_gate", "right_gate", "out_gate")
    }
    m = mask[..., None]
    left = proj["left_proj"] * m * sig(proj["left_gate"])
    right = proj["right_proj"] * m * sig(proj["right_gate"])
    out = torch.einsum("bikh,bjkh->bijh", left, right)
    out = ln(out, w["to_out_norm.weight"], w["to_out_norm.bias"]) * sig(proj["out_gate"])
    return torch.einsum("bijh,ch->bijc", out, w["to_out.weight"]).float()


def _weights(inputs):
    return dict(zip(WEIGHT_KEYS, inputs[2:], strict=True))


# -- the reference ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "config",
    [
        _config(8, 2, 16, seed=1, nomask=False),
        _config(8, 2, 16, seed=1, nomask=True),
        _config(12, 1, 24, seed=2, nomask=False, distribution="cauchy"),
        _config(16, 1, 32, seed=3, nomask=True, distribution="cauchy"),
        _config(10, 2, 8, seed=4, nomask=False, h=16),
    ],
    ids=lambda c: c.name,
)
def test_reference_matches_an_independent_implementation(task: TrimulTask, config: TaskConfig) -> None:
    inputs = task.make_inputs(config, "cpu")
    got = task.expected(config, inputs)
    want = independent_trimul(inputs[0], inputs[1], _weights(inputs))
    b, n, c = config.params["bs"], config.params["seqlen"], config.params["dim"]
    assert got.dtype == torch.float32 and got.shape == (b, n, n, c)
    torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)
    assert task.check(config, want, got) is None


def test_reference_disables_tf32_and_restores_the_callers_settings(task: TrimulTask, monkeypatch) -> None:
    seen = []
    from ksearch.tasks.trimul import reference as ref

    original = ref.trimul_reference

    def spy(*args):
        seen.append((torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))
        return original(*args)

    monkeypatch.setattr(ref, "trimul_reference", spy)
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        config = _config(8, 1, 16)
        task.expected(config, task.make_inputs(config, "cpu"))
        assert seen == [(False, False)]
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (True, True)
        with fp32_exact():
            assert not torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


# -- inputs ------------------------------------------------------------------------------------------------------------
def test_inputs_are_deterministic_per_seed_and_differ_across_seeds(task: TrimulTask) -> None:
    for distribution in ("normal", "cauchy"):
        torch.manual_seed(0)
        rng = torch.get_rng_state()
        a = task.make_inputs(_config(8, 2, 16, seed=5, distribution=distribution), "cpu")
        torch.manual_seed(999)  # the global RNG must not matter
        a2 = task.make_inputs(_config(8, 2, 16, seed=5, distribution=distribution), "cpu")
        b = task.make_inputs(_config(8, 2, 16, seed=6, distribution=distribution), "cpu")
        torch.manual_seed(0)
        assert torch.equal(torch.get_rng_state(), rng)  # and it is never advanced
        assert len(a) == 2 + len(WEIGHT_KEYS) == 12
        assert all(torch.equal(p, q) for p, q in zip(a, a2, strict=True))
        assert not torch.equal(a[0], b[0]) and not torch.equal(a[1], b[1]) and not torch.equal(a[2], b[2])
        assert all(t.dtype == torch.float32 for t in a)


def test_input_shapes_scales_and_distributions(task: TrimulTask) -> None:
    normal = task.make_inputs(_config(16, 2, 32, seed=7), "cpu")
    x, mask, w = normal[0], normal[1], _weights(normal)
    assert x.shape == (2, 16, 16, 32) and mask.shape == (2, 16, 16)
    for key in ("left_proj.weight", "right_proj.weight", "left_gate.weight", "right_gate.weight", "out_gate.weight"):
        assert w[key].shape == (128, 32)
        assert 0.6 < float(w[key].std() * math.sqrt(128)) < 1.4  # randn / sqrt(H)
    assert w["to_out.weight"].shape == (32, 128) and 0.8 < float(w["to_out.weight"].std() * math.sqrt(32)) < 1.2
    assert w["norm.weight"].shape == (32,) and w["to_out_norm.bias"].shape == (128,)
    assert not torch.allclose(w["norm.weight"], torch.ones(32))  # LayerNorm params are randn, not ones/zeros
    assert 0.9 < float(x.std()) < 1.1
    cauchy = task.make_inputs(_config(32, 1, 32, seed=7, distribution="cauchy"), "cpu")[0]
    assert float(cauchy.abs().max()) > 1000  # heavy tails: 32k samples of Cauchy(0, 2)
    assert 1.5 < float(cauchy.abs().median()) < 2.5  # the median of |Cauchy(0, s)| is s
    with pytest.raises(ValueError, match="distribution"):
        task.make_inputs(_config(8, 1, 16, distribution="uniform"), "cpu")


def test_masks_are_real_and_applied(task: TrimulTask) -> None:
    masked = _config(16, 2, 32, seed=8, nomask=False)
    unmasked = _config(16, 2, 32, seed=8, nomask=True)
    mi, ui = task.make_inputs(masked, "cpu"), task.make_inputs(unmasked, "cpu")
    assert torch.equal(ui[1], torch.ones(2, 16, 16))
    assert set(mi[1].unique().tolist()) == {0.0, 1.0} and 0.3 < float(mi[1].mean()) < 0.7
    assert mi[1].dtype == torch.float32
    # the same x and weights with the mask swapped for ones: a different output
    with_ones = [mi[0], torch.ones_like(mi[1]), *mi[2:]]
    assert not torch.allclose(task.expected(masked, mi), task.expected(masked, with_ones), atol=0.1)
    # a row (b, i) masked out entirely: left[b, i] == 0, so out[b, i] == 0 and only the LayerNorm bias survives
    zero = mi[1].clone()
    zero[0, 3, :] = 0
    y = task.expected(masked, [mi[0], zero, *mi[2:]])
    ref_row = independent_trimul(mi[0], zero, _weights(mi))[0, 3]
    torch.testing.assert_close(y[0, 3], ref_row, atol=2e-4, rtol=2e-4)


# -- configs, interface, check, spec -----------------------------------------------------------------------------
def test_configs_match_gpu_mode(task: TrimulTask) -> None:
    tests, bench = task.test_configs("cuda"), task.benchmark_configs("cuda")
    assert len(tests) == 18 and len(bench) == 7
    assert task.test_configs("cuda:1") == tests
    rows = [
        (c.params["seqlen"], c.params["bs"], c.params["dim"], c.seed, c.params["nomask"], c.distribution) for c in bench
    ]
    assert rows == [  # every benchmark mask all ones, as upstream's harness runs them ...
        (256, 2, 128, 9371, True, "normal"),
        (768, 1, 128, 381, True, "cauchy"),
        (256, 2, 384, 2301, True, "normal"),
        (512, 1, 128, 12819, True, "normal"),
        (1024, 1, 128, 381, True, "cauchy"),
        (768, 1, 384, 481, True, "normal"),
        (1024, 1, 384, 23291, True, "normal"),
    ]
    # ... with task.yml's flags kept
    assert [c.params["yml_nomask"] for c in bench] == [True, True, False, True, True, False, True]
    assert sum(c.distribution == "cauchy" for c in tests) == 7
    assert sum(not c.params["nomask"] for c in tests) == 7
    assert (1024, 1, 768, 491, False, "cauchy") in [
        (c.params["seqlen"], c.params["bs"], c.params["dim"], c.seed, c.params["nomask"], c.distribution) for c in tests
    ]
    assert all(c.params["hiddendim"] == 128 for c in tests + bench)
    names = [c.name for c in tests + bench + task.test_configs("cpu") + task.benchmark_configs("cpu")]
    assert len(names) == len(set(names))
    cpu = task.test_configs("cpu")
    assert any(not c.params["nomask"] for c in cpu) and any(c.params["nomask"] for c in cpu)
    assert {c.distribution for c in cpu} == {"normal", "cauchy"}
    assert all(c.params["seqlen"] <= 32 and c.params["dim"] <= 32 for c in cpu + task.benchmark_configs("cpu"))


def test_registered_and_prepares_gpu_mode_data(task: TrimulTask) -> None:
    assert isinstance(resolve_task("trimul"), TrimulTask)
    assert "trimul" in [i.name for i in list_tasks()]
    config = _config(8, 1, 16, seed=9)
    inputs = task.make_inputs(config, "cpu")
    seen = {}

    class Module:
        @staticmethod
        def custom_kernel(data):
            seen["data"] = data
            return torch.zeros(1)

    fn = task.prepare(Module, config, "cpu")
    args = task.call_args(inputs, config)
    fn(*args)
    assert seen["data"] is args[0]  # the harness's data object itself, as upstream passes it
    x, mask, weights, cfg = seen["data"]
    assert x is inputs[0] and mask is inputs[1]
    assert list(weights) == list(WEIGHT_KEYS) and weights["to_out.weight"] is inputs[-1]
    assert cfg == {"dim": 16, "hidden_dim": 128}
    assert as_data(inputs, config)[2] is not as_data(inputs, config)[2]  # a new dict per call


def test_check_uses_the_upstream_rule(task: TrimulTask) -> None:
    config = _config(8, 1, 16, seed=10)
    expected = task.expected(config, task.make_inputs(config, "cpu"))
    assert task.check(config, expected + 0.019, expected) is None  # within atol alone
    big = expected.abs().argmax()
    bumped = expected.clone().view(-1)
    bumped[big] += 0.02 + 0.019 * expected.view(-1)[big].abs()
    assert task.check(config, bumped.view_as(expected), expected) is None  # within atol + rtol*|ref|
    bumped[big] += 0.01 * expected.view(-1)[big].abs() + 0.01
    mismatch = task.check(config, bumped.view_as(expected), expected)
    assert mismatch is not None and "1 of" in mismatch.message
    nan = expected.clone()
    nan[0, 0, 0, 0] = float("nan")
    assert "non-finite" in task.check(config, nan, expected).message
    assert task.check(config, expected[..., :-1], expected) is not None
    # upstream compares values after type promotion: any floating dtype within tolerance passes, as any layout does
    assert task.check(config, expected.double(), expected) is None
    assert task.check(config, expected.half(), expected) is None
    assert task.check(config, (expected + 1).half(), expected) is not None
    channel_major = expected.permute(0, 3, 1, 2).contiguous().permute(0, 2, 3, 1)
    assert not channel_major.is_contiguous() and task.output_strides(config, expected) is None
    assert task.check(config, channel_major, expected) is None
    assert task.check(config, expected.int(), expected) is not None  # not a floating result
    # float8 has no type promotion in torch (upstream's subtraction raises): a clear mismatch, not a checker crash
    assert "dtype torch.float8_e4m3fn" in task.check(config, expected.to(torch.float8_e4m3fn), expected).message


def test_spec_covers_math_interface_shapes_and_precision(task: TrimulTask) -> None:
    for language in ("triton", "cuda"):
        text = task.spec(language)
        for needle in (
            "custom_kernel(data",
            "x, mask, weights, config",
            "LayerNorm",
            "sum_k left[b, i, k, h]",
            "0.02",
            "TF32",
            "bf16",
            "N=1024, C=384",
            "Target section",
            '"stream"',
            "mask",
        ):
            assert needle in text, (language, needle)
    assert "load_inline" in task.spec("cuda") and "load_inline" not in task.spec("triton")
    assert "@triton.jit" in task.spec("triton")
    with pytest.raises(ValueError, match="language"):
        task.spec("cute")
    assert "def trimul_reference" in task.reference_source()
    assert task.entry_point == "custom_kernel" and task.atol == task.rtol == 2e-2


def test_flops_and_bytes(task: TrimulTask) -> None:
    big = task.benchmark_configs("cuda")[-1]  # N=1024, B=1, C=384
    flops, moved = task.flops_and_bytes(big)
    contraction, projections = 2 * 128 * 1024**3, 12 * 1024**2 * 384 * 128
    assert flops == contraction + projections
    assert 2 * 4 * 1024**2 * 384 < moved < 2.1 * 4 * 1024**2 * 384


# -- whole evaluations on the CPU (Triton interpreter) --------------------------------------------------------------
def _evaluate(code: str, device: str = "cpu", language: str = "triton", **extra):
    return evaluate(
        EvalRequest(
            candidate=Candidate(task="trimul", language=language, code=code, entry_point="custom_kernel"),
            device=device,
            **extra,
        )
    )


@pytest.mark.slow
def test_triton_example_passes_under_the_interpreter() -> None:
    evaluation = _evaluate(TRITON_EXAMPLE.read_text())
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert evaluation.configs_passed == evaluation.configs_total == 4
    assert evaluation.duration_s < 60


@pytest.mark.slow
def test_submission_example_and_packaged_reference_pass(task: TrimulTask) -> None:
    for code in (SUBMISSION_EXAMPLE.read_text(), task.reference_submission_source()):
        evaluation = _evaluate(code)
        assert evaluation.verdict == Verdict.PASSED, evaluation.log


@pytest.mark.slow
def test_a_kernel_that_ignores_the_mask_fails_and_one_that_mutates_weights_is_rejected() -> None:
    ignores = _evaluate((DATA / "trimul_ignores_mask.py").read_text())
    assert ignores.verdict == Verdict.INCORRECT
    assert ignores.mismatch is not None and "_mask" in ignores.mismatch.config
    mutates = _evaluate((DATA / "trimul_mutates_weights.py").read_text())
    assert mutates.verdict == Verdict.REJECTED and "input" in mutates.log


@pytest.mark.slow
def test_cli_eval_runs_a_submission_file_unchanged() -> None:
    from typer.testing import CliRunner

    from ksearch.cli import app

    if "eval" not in {c.name or c.callback.__name__ for c in app.registered_commands}:
        pytest.skip("the `ksearch eval` command is not registered yet")
    result = CliRunner().invoke(app, ["eval", "trimul", str(SUBMISSION_EXAMPLE), "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    start = result.output.index("{")
    assert json.loads(result.output[start:])["verdict"] == "passed"


# -- on a GPU ----------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("path", [TRITON_EXAMPLE, SUBMISSION_EXAMPLE, CUDA_EXAMPLE], ids=["triton", "pytorch", "cuda"])
def test_examples_pass_all_18_tests_and_are_timed_on_the_gpu(path: Path) -> None:
    language = "cuda" if path == CUDA_EXAMPLE else "triton"
    evaluation = _evaluate(path.read_text(), device="cuda", language=language, run_timeout_s=600)
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert evaluation.configs_passed == 18 and evaluation.timed and len(evaluation.timings) == 7
    assert evaluation.latency_ms is not None and evaluation.latency_ms > 0
    print(f"{path.name}: geomean {evaluation.latency_ms:.3f} ms on {evaluation.device}")
    for t in evaluation.timings:
        print(f"  {t.config}: median {t.median_ms:.3f} ms (n={t.samples})")


@pytest.mark.gpu
def test_trimul_fits_a_40_gb_gpu_in_low_memory_mode() -> None:
    """With all but 40 GiB of the GPU held by another process (an A100 40GB, or a GPU shared with another job), the
    checker finds little free memory and runs the evaluation in low-memory mode: GPU MODE's PyTorch submission, the
    heaviest of the examples (its float32 intermediates on the 1024x1024x768 tests), passes its 18 tests."""
    free, _ = torch.cuda.mem_get_info()
    if free < 41 * 2**30:
        pytest.skip("needs a GPU with more than 41 GiB free")
    ballast = torch.empty(free - 40 * 2**30, dtype=torch.uint8, device="cuda")
    try:
        evaluation = _evaluate(SUBMISSION_EXAMPLE.read_text(), device="cuda", timing=False, run_timeout_s=600)
    finally:
        del ballast
        torch.cuda.empty_cache()
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert evaluation.configs_passed == 18 and evaluation.environment["memory_mode"] == "low"
    worker, checker = (int(evaluation.environment[f"{p}_peak_gpu_mib"]) for p in ("worker", "checker"))
    print(f"low-memory mode: peak worker {worker} MiB, checker {checker} MiB")


@pytest.mark.gpu
def test_gpu_inputs_are_deterministic_and_the_reference_is_fp32(task: TrimulTask) -> None:
    config = task.benchmark_configs("cuda")[2]  # masked
    a, b = task.make_inputs(config, "cuda"), task.make_inputs(config, "cuda")
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))
    small = _config(32, 1, 128, seed=1092)
    inputs = task.make_inputs(small, "cuda")
    want = independent_trimul(*[t.cpu() for t in inputs[:2]], {k: v.cpu() for k, v in _weights(inputs).items()})
    torch.testing.assert_close(task.expected(small, inputs).cpu(), want, atol=1e-3, rtol=1e-3)


def test_example_submissions_are_leaderboard_safe(task: TrimulTask) -> None:
    """GPU MODE rejects any submission whose text contains 'stream' (even in 'upstream')."""
    examples = (TRITON_EXAMPLE, SUBMISSION_EXAMPLE, CUDA_EXAMPLE)
    for text in (*(p.read_text() for p in examples), task.reference_submission_source()):
        assert "stream" not in text.lower()
        assert "def custom_kernel(data)" in text


def test_cuda_example_passes_the_static_checks() -> None:
    """The load_inline example raises no integrity rule (its CUDA source is scanned too) and is a cuda candidate."""
    from ksearch.tools import integrity

    code = CUDA_EXAMPLE.read_text()
    assert "load_inline" in code and integrity.check_source(code, task_name="trimul") is None
    assert "cuda" in TrimulTask.languages
