"""KernelBench problems as tasks: finding them, their format, seeded correctness through evaluate(), baselines."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Timing, Verdict
from ksearch.errors import UserError
from ksearch.flows.baselines import Baseline, measure_baseline, speedup
from ksearch.tasks._loading import ProblemFormatError
from ksearch.tasks.kernelbench import KernelBenchTask, trial_seeds
from ksearch.tasks.kernelbench.baseline import baseline_candidate
from ksearch.tasks.kernelbench.problem_files import KernelBenchError
from ksearch.tasks.registry import canonical_task_name, resolve_task
from ksearch.tools.evaluator import EvalRequest, evaluate

DATA = Path(__file__).resolve().parent / "data" / "kernelbench"
ROOT = DATA  # a fake checkout: DATA/KernelBench/level<N>/<id>_<Name>.py
SOLUTIONS = DATA / "solutions"
PROBLEMS = ["1/1", "1/2", "2/1", "2/2"]


def task_of(spec: str) -> KernelBenchTask:
    task = resolve_task(f"kernelbench:{spec}", kernelbench_root=ROOT)
    assert isinstance(task, KernelBenchTask)
    return task


def evaluate_file(spec: str, solution: str, device: str = "cpu") -> Evaluation:
    name = canonical_task_name(f"kernelbench:{spec}", kernelbench_root=ROOT)
    code = (SOLUTIONS / solution).read_text()
    return evaluate(
        EvalRequest(candidate=Candidate(task=name, language="triton", code=code, entry_point="ModelNew"), device=device)
    )


@pytest.mark.parametrize("spec", PROBLEMS)
def test_problems_load_and_reference_is_deterministic(spec: str) -> None:
    task = task_of(spec)
    assert task.name.startswith("kernelbench:/") and task.name.endswith(".py")
    assert task.entry_point == "ModelNew" and "class Model" in task.reference_source()
    configs = task.test_configs("cpu")
    assert len(configs) == 12 and [c.seed for c in configs[:5]] == trial_seeds()  # then the input distributions
    state = torch.random.get_rng_state()
    inputs = task.make_inputs(configs[0], "cpu")
    out1 = task.expected(configs[0], [x.clone() for x in inputs])
    out2 = task.expected(configs[0], [x.clone() for x in task.make_inputs(configs[0], "cpu")])
    assert torch.equal(torch.random.get_rng_state(), state), "the caller's RNG must be left alone"
    assert isinstance(out1, torch.Tensor) and torch.equal(out1, out2)
    other = task.expected(configs[1], task.make_inputs(configs[1], "cpu"))
    assert not torch.equal(out1, other) or out1.shape != other.shape  # another trial, other values
    assert "ModelNew" in task.spec("triton") and "1e-4" in task.spec("triton")


def test_trial_seeds_follow_kernelbench() -> None:
    torch.manual_seed(42)
    expected = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(5)]
    assert trial_seeds() == expected


def test_model_and_modelnew_get_the_same_weights() -> None:
    task = task_of("2/2")
    config = task.test_configs("cpu")[2]
    solution = __import__("importlib").import_module("importlib.util")
    spec = solution.spec_from_file_location("kb_sol_2_2", SOLUTIONS / "level2_2_ok.py")
    module = solution.module_from_spec(spec)
    spec.loader.exec_module(module)
    new = task.build(module.ModelNew, config, "cpu")
    ref = task.build(task.problem.Model, config, "cpu")
    for (n1, p1), (n2, p2) in zip(ref.named_parameters(), new.named_parameters(), strict=True):
        assert n1 == n2 and torch.equal(p1, p2)


def test_errors_say_what_to_do(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KERNELBENCH_ROOT", raising=False)
    with pytest.raises(KernelBenchError, match="none is set") as info:
        resolve_task("kernelbench:1/1")
    assert "--kernelbench-root" in info.value.hint and "KERNELBENCH_ROOT" in info.value.hint
    monkeypatch.setenv("KERNELBENCH_ROOT", str(ROOT))
    assert task_of("1/1").title == "KernelBench level1/1_LeakyReLU"
    assert resolve_task("kernelbench:level2/2").title.endswith("2_Linear_ReLU_LayerNorm")
    with pytest.raises(KernelBenchError, match=r"level 1 has no problem 7 \(problems there: 1-2\)"):
        resolve_task("kernelbench:1/7")
    with pytest.raises(KernelBenchError, match=r"level 3 not found .*levels there: 1, 2"):
        resolve_task("kernelbench:3/1")
    with pytest.raises(KernelBenchError, match="not a KernelBench checkout"):
        resolve_task("kernelbench:1/1", kernelbench_root=tmp_path)
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n\nclass Model(torch.nn.Module):\n    pass\n\ndef get_inputs():\n    return []\n")
    with pytest.raises(ProblemFormatError, match=r"lacks function get_init_inputs\(\)"):
        resolve_task(f"kernelbench:{bad}")
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise ValueError('oops')\n")
    with pytest.raises(ProblemFormatError, match="oops"):
        resolve_task(f"kernelbench:{broken}")
    assert isinstance(ProblemFormatError("x"), UserError)


def test_plain_path_in_kernelbench_format_is_a_kernelbench_task() -> None:
    path = ROOT / "KernelBench" / "level1" / "1_LeakyReLU.py"
    assert canonical_task_name(str(path)) == f"kernelbench:{path}"
    assert isinstance(resolve_task(str(path)), KernelBenchTask)


def test_tolerance_is_per_dtype() -> None:
    task = task_of("1/1")
    config = task.test_configs("cpu")[0]
    ref = torch.ones(4)
    assert task.check(config, ref + 5e-5, ref) is None
    assert task.check(config, ref + 5e-4, ref) is not None  # fp32: 1e-4
    half = torch.ones(4, dtype=torch.float16)
    assert task.check(config, half + 0.005, half) is None  # fp16: 1e-2
    pair = (torch.ones(2), torch.zeros(2))
    assert task.check(config, (torch.ones(2), torch.zeros(2)), pair) is None
    mismatch = task.check(config, (torch.ones(2), torch.ones(2)), pair)
    assert mismatch is not None and mismatch.message.startswith("output 1:")


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "solution"), [("1/1", "level1_1_ok.py"), ("2/2", "level2_2_ok.py")])
def test_correct_triton_solution_passes_under_the_interpreter(spec: str, solution: str) -> None:
    evaluation = evaluate_file(spec, solution)
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert evaluation.configs_passed == evaluation.configs_total == 12


@pytest.mark.slow
def test_wrong_triton_solution_is_incorrect() -> None:
    evaluation = evaluate_file("2/1", "level2_1_wrong.py")
    assert evaluation.verdict == Verdict.INCORRECT, evaluation.log
    assert evaluation.mismatch is not None and evaluation.mismatch.config == "trial0"


@pytest.mark.slow
def test_eager_baseline_is_the_reference_packaged_as_a_candidate() -> None:
    task = task_of("2/1")
    candidate = baseline_candidate(task, "eager")
    assert candidate.entry_point == "ModelNew" and candidate.task == task.name
    evaluation = evaluate(EvalRequest(candidate=candidate, device="cpu", harness_baseline=True))
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    as_candidate = evaluate(EvalRequest(candidate=candidate, device="cpu"))  # from an LLM, the same code is refused
    assert as_candidate.rejection is not None and as_candidate.rejection.rule == "reference_op"
    assert "torch.compile" in baseline_candidate(task, "compile").code


def test_baseline_is_measured_once_and_cached(tmp_path: Path) -> None:
    task = task_of("1/1")
    calls: list[EvalRequest] = []

    def fake_evaluate(request: EvalRequest) -> Evaluation:
        calls.append(request)
        timing = Timing(config="benchmark", median_ms=2.0, mean_ms=2.0, stdev_ms=0.0, samples=10)
        return Evaluation(
            verdict=Verdict.PASSED, device="FakeGPU", timed=True, timings=[timing], latency_ms=2.0, score=0.5
        )

    first = measure_baseline(task, device="cuda", workspace=tmp_path, evaluate_fn=fake_evaluate, eval_key="k")
    again = measure_baseline(task, device="cuda", workspace=tmp_path, evaluate_fn=fake_evaluate, eval_key="k")
    assert len(calls) == 1 and calls[0].timing and calls[0].candidate.entry_point == "ModelNew"
    assert calls[0].harness_baseline  # torch.compile's threads must not trip the thread rule for our own baseline
    assert first == again and first.latency_ms == 2.0
    assert len(list((tmp_path / "baselines").glob("*.json"))) == 1
    compiled = measure_baseline(
        task, device="cuda", mode="compile", workspace=tmp_path, evaluate_fn=fake_evaluate, eval_key="k"
    )
    assert len(calls) == 2 and compiled.mode == "compile"
    assert measure_baseline(task, device="cpu", workspace=tmp_path).latency_ms is None
    candidate = Evaluation(
        verdict=Verdict.PASSED,
        device="FakeGPU",
        timed=True,
        latency_ms=0.5,
        score=2.0,
        timings=[Timing(config="benchmark", median_ms=0.5, mean_ms=0.5, stdev_ms=0.0, samples=10)],
    )
    assert speedup(first, candidate) == pytest.approx(4.0)
    assert speedup(first, Evaluation(verdict=Verdict.INCORRECT, device="FakeGPU")) is None
    assert speedup(Baseline(task="t", mode="eager", device="cpu", key=""), candidate) is None


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("spec", "solution"),
    [("1/1", "level1_1_ok.py"), ("1/2", "level1_2_ok.py"), ("2/1", "level2_1_ok.py"), ("2/2", "level2_2_ok.py")],
)
def test_gpu_solutions_pass_and_have_a_speedup(spec: str, solution: str, tmp_path: Path) -> None:
    evaluation = evaluate_file(spec, solution, device="cuda")
    assert evaluation.verdict == Verdict.PASSED and evaluation.timed, evaluation.log
    base = measure_baseline(task_of(spec), device="cuda", workspace=tmp_path)
    assert base.latency_ms is not None and base.latency_ms > 0, base.log
    assert speedup(base, evaluation) is not None


@pytest.mark.gpu
def test_gpu_wrong_solution_is_incorrect() -> None:
    assert evaluate_file("1/1", "level1_1_wrong.py", device="cuda").verdict == Verdict.INCORRECT
