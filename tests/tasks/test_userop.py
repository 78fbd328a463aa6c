"""The user's own operator file as a task, and task discovery through the ksearch.tasks entry-point group."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Verdict
from ksearch.tasks._loading import ProblemFormatError
from ksearch.tasks.registry import canonical_task_name, list_tasks, prepare_task, resolve_task
from ksearch.tasks.userop import UserOpTask
from ksearch.tools.evaluator import EvalRequest, evaluate

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "my_op.py"
DATA = Path(__file__).resolve().parent / "data"

GOOD = """
import torch

CONFIGS = [{"n": 8}, {"n": 33, "name": "odd"}]

def make_inputs(config, seed, device):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(config["n"], generator=g).to(device)]

def reference(x):
    return x * 2
"""


def write(tmp_path: Path, text: str, name: str = "op.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_example_operator_is_a_valid_task() -> None:
    task = prepare_task(str(EXAMPLE), device="cpu")
    assert isinstance(task, UserOpTask)
    assert task.name == str(EXAMPLE) and task.entry_point == "kernel"
    assert task.title.startswith("Fused GELU(x) * y")
    assert task.atol == task.rtol == 1e-5
    assert [c.name for c in task.test_configs("cpu")] == [
        "rows=1,cols=1",
        "rows=7,cols=33",
        "rows=16,cols=300,scale=4.0",
    ]
    assert len(task.test_configs("cuda")) == 6 and len(task.benchmark_configs("cuda")) == 2
    assert len(task.benchmark_configs("cpu")) == 1
    x, y = task.make_inputs(task.test_configs("cpu")[1], "cpu")
    assert x.shape == (7, 33) and torch.allclose(task.reference(x, y), torch.nn.functional.gelu(x) * y, atol=1e-6)
    assert "def kernel(*inputs)" in task.spec("triton") and "CONFIGS" in task.spec("triton")
    assert task.flops_and_bytes(task.test_configs("cpu")[0])[1] == 12.0


def test_relative_paths_are_canonicalised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    assert canonical_task_name("examples/my_op.py") == str(EXAMPLE)


def test_get_inputs_variant_and_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '''
        """Doubles a vector."""
        import torch
        SHAPES = [{"n": 5}]
        ENTRY_POINT = "double"
        def get_inputs(config):
            return [torch.randn(config["n"])]
        def reference(x):
            return x * 2
    ''',
    )
    task = prepare_task(str(path))
    assert task.entry_point == "double" and task.title == "Doubles a vector."
    first, again = (
        task.make_inputs(task.test_configs("cpu")[0], "cpu"),
        task.make_inputs(task.test_configs("cpu")[0], "cpu"),
    )
    assert torch.equal(first[0], again[0])  # seeded by ksearch
    assert task.atol == 1e-4  # KernelBench's fp32 default
    half = torch.ones(3, dtype=torch.float16)
    assert task.check(task.test_configs("cpu")[0], half + 0.005, half) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("CONFIGS = [{'n': 1}]\ndef make_inputs(c, s, d):\n    return []\n", r"defines no function reference"),
        ("CONFIGS = [{'n': 1}]\ndef reference(x):\n    return x\n", r"neither make_inputs"),
        ("def make_inputs(c, s, d):\n    return []\ndef reference(x):\n    return x\n", r"defines no CONFIGS"),
        (
            "CONFIGS = []\ndef make_inputs(c, s, d):\n    return []\ndef reference(x):\n    return x\n",
            r"CONFIGS is empty",
        ),
        (
            "CONFIGS = [{'n': [1]}]\ndef make_inputs(c, s, d):\n    return []\ndef reference(x):\n    return x\n",
            r"values must be",
        ),
        (
            "CONFIGS = [{'n': 1}]\nENTRY_POINT = 'not valid'\ndef make_inputs(c, s, d):\n    return []\n"
            "def reference(x):\n    return x\n",
            r"ENTRY_POINT must be",
        ),
        ("x = 1\n", r"neither an operator file .* nor a KernelBench problem"),
    ],
)
def test_format_errors_name_what_is_missing(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ProblemFormatError, match=message) as info:
        resolve_task(str(path))
    assert "PROTOCOL.md" in info.value.hint


def test_validation_catches_wrong_device_and_nondeterminism(tmp_path: Path) -> None:
    prepare_task(str(write(tmp_path, GOOD)))  # the good one validates
    wrong_device = write(tmp_path, GOOD.replace(".to(device)", ""), "dev.py")
    with pytest.raises(ProblemFormatError, match=r"input 0 .* is on cpu, but device meta was asked for"):
        prepare_task(str(wrong_device), device="meta")
    noisy = write(tmp_path, GOOD.replace("return x * 2", "return x * 2 + torch.rand(1)"), "noisy.py")
    with pytest.raises(ProblemFormatError, match="reference is not deterministic"):
        prepare_task(str(noisy))
    random_inputs = write(tmp_path, GOOD.replace("generator=g", ""), "rand.py")
    with pytest.raises(ProblemFormatError, match="make_inputs is not deterministic"):
        prepare_task(str(random_inputs))
    mutating = write(tmp_path, GOOD.replace("return x * 2", "x.mul_(2)\n    return x"), "mut.py")
    with pytest.raises(ProblemFormatError, match="reference modified its inputs"):
        prepare_task(str(mutating))
    tensor_less = write(tmp_path, GOOD.replace("return x * 2", "return 2"), "scalar.py")
    with pytest.raises(ProblemFormatError, match="must return a torch.Tensor"):
        prepare_task(str(tensor_less))


def _candidate(solution: str) -> Candidate:
    return Candidate(task=str(EXAMPLE), language="triton", code=(DATA / solution).read_text(), entry_point="kernel")


@pytest.mark.slow
def test_user_operator_runs_through_evaluate() -> None:
    ok = evaluate(EvalRequest(candidate=_candidate("my_op_triton.py"), device="cpu"))
    assert ok.verdict == Verdict.PASSED and ok.configs_passed == 3, ok.log
    wrong = evaluate(EvalRequest(candidate=_candidate("my_op_triton_wrong.py"), device="cpu"))
    assert wrong.verdict == Verdict.INCORRECT and wrong.mismatch is not None, wrong.log


def _eval_registered() -> bool:
    from ksearch.cli import app

    return "eval" in {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}


@pytest.mark.slow
def test_user_operator_through_ksearch_eval() -> None:
    if not _eval_registered():
        pytest.skip("`ksearch eval` is not registered yet")
    from ksearch.cli import app

    result = CliRunner().invoke(app, ["eval", str(EXAMPLE), str(DATA / "my_op_triton.py"), "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    assert '"verdict": "passed"' in result.output


@pytest.mark.slow
def test_ksearch_eval_with_a_relative_operator_path(monkeypatch: pytest.MonkeyPatch) -> None:
    if not _eval_registered():
        pytest.skip("`ksearch eval` is not registered yet")
    from ksearch.cli import app

    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(
        app, ["eval", "examples/my_op.py", str(DATA / "my_op_triton.py"), "--device", "cpu", "--json"]
    )
    assert result.exit_code == 0 and '"verdict": "passed"' in result.output, result.output


@pytest.mark.gpu
def test_user_operator_on_gpu_is_timed() -> None:
    evaluation = evaluate(EvalRequest(candidate=_candidate("my_op_triton.py"), device="cuda"))
    assert evaluation.verdict == Verdict.PASSED and evaluation.timed and len(evaluation.timings) == 2, evaluation.log


def test_tasks_from_an_installed_distribution_are_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake installed package: a *.dist-info with entry_points.txt on sys.path, registering a task."""
    site = tmp_path / "site"
    package = site / "fake_ksearch_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        textwrap.dedent("""
        from ksearch.tasks.softmax import SoftmaxTask

        class DoubleSoftmax(SoftmaxTask):
            name = "fake-plugin-softmax"
            title = "Softmax from a fake installed plugin"
    """)
    )
    info = site / "fake_ksearch_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-ksearch-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[ksearch.tasks]\nfake-plugin-softmax = fake_ksearch_plugin:DoubleSoftmax\n")
    monkeypatch.syspath_prepend(str(site))
    infos = {t.name: t for t in list_tasks()}
    assert infos["fake-plugin-softmax"].source == "fake-ksearch-plugin"
    assert infos["fake-plugin-softmax"].title == "Softmax from a fake installed plugin"
    assert resolve_task("fake-plugin-softmax").title.startswith("Softmax from a fake")
    assert canonical_task_name("fake-plugin-softmax") == "fake-plugin-softmax"
    assert {"kernelbench:LEVEL/ID", "FILE.py"} <= set(infos)
    from ksearch.cli import app

    result = CliRunner().invoke(app, ["tasks", "--json"])
    assert result.exit_code == 0 and "fake-plugin-softmax" in result.output and "kernelbench:LEVEL/ID" in result.output
    sys.modules.pop("fake_ksearch_plugin", None)
