"""The softmax task and the task registry: reference, inputs, configs, the output check, scoring."""

from __future__ import annotations

import math
from importlib.metadata import EntryPoint

import pytest
import torch

from ksearch.contracts.evaluation import Timing
from ksearch.errors import TaskNotFoundError
from ksearch.tasks import registry
from ksearch.tasks.base import Task, TaskConfig
from ksearch.tasks.registry import list_tasks, resolve_task
from ksearch.tasks.softmax import SoftmaxTask


@pytest.fixture
def task() -> SoftmaxTask:
    return SoftmaxTask()


def _config(m: int, n: int, seed: int = 0, distribution: str = "normal") -> TaskConfig:
    return TaskConfig(name=f"t_{m}x{n}", params={"M": m, "N": n}, seed=seed, distribution=distribution)


def test_reference_matches_torch_softmax(task: SoftmaxTask) -> None:
    for config in task.test_configs("cpu"):
        (x,) = task.make_inputs(config, "cpu")
        expected = torch.softmax(x.double(), dim=-1).float()
        torch.testing.assert_close(task.reference(x), expected, atol=1e-7, rtol=1e-6)
        assert task.reference(x).dtype == torch.float32


def test_inputs_are_deterministic_per_seed_and_differ_across_seeds(task: SoftmaxTask) -> None:
    torch.manual_seed(0)
    before = torch.get_rng_state()
    a1, b1 = task.make_inputs(_config(5, 7, seed=1), "cpu")[0], task.make_inputs(_config(5, 7, seed=2), "cpu")[0]
    torch.manual_seed(123)  # the global RNG must not matter
    a2 = task.make_inputs(_config(5, 7, seed=1), "cpu")[0]
    assert torch.equal(a1, a2)
    assert not torch.equal(a1, b1)
    torch.manual_seed(0)
    assert torch.equal(torch.get_rng_state(), before)  # and it is never advanced
    assert a1.dtype == torch.float32 and a1.shape == (5, 7)


def test_large_distribution_is_scaled(task: SoftmaxTask) -> None:
    normal = task.make_inputs(_config(4, 64, seed=3), "cpu")[0]
    large = task.make_inputs(_config(4, 64, seed=3, distribution="large"), "cpu")[0]
    torch.testing.assert_close(large, normal * 100)
    with pytest.raises(ValueError, match="distribution"):
        task.make_inputs(_config(4, 64, distribution="cauchy"), "cpu")


def test_configs_cover_the_hard_cases(task: SoftmaxTask) -> None:
    for device in ("cpu", "cuda"):
        tests = task.test_configs(device)
        ns = {int(c.params["N"]) for c in tests}
        assert 1 in ns and any(n & (n - 1) for n in ns), "N=1 and a non-power-of-2 N"
        assert any(c.distribution == "large" for c in tests)
        assert len({c.seed for c in tests}) >= 3
        names = [c.name for c in tests + task.benchmark_configs(device)]
        assert len(names) == len(set(names))
    bench = {(c.params["M"], c.params["N"]) for c in task.benchmark_configs("cuda")}
    assert {(4096, 4096), (8192, 1024), (1024, 16384), (32768, 512)} <= bench
    assert len(task.test_configs("cuda")) > len(task.benchmark_configs("cuda"))
    # the interpreter runs roughly one program per row: keep the CPU configs tiny
    assert sum(int(c.params["M"]) for c in task.test_configs("cpu")) <= 100
    assert task.benchmark_configs("cuda:1") == task.benchmark_configs("cuda")


def test_check_accepts_the_reference_and_locates_the_worst_error(task: SoftmaxTask) -> None:
    config = _config(6, 33, seed=4)
    (x,) = task.make_inputs(config, "cpu")
    expected = task.reference(x)
    assert task.check(config, expected.clone(), expected) is None
    assert task.check(config, torch.softmax(x, dim=-1), expected) is None  # plain fp32 is within tolerance
    wrong = expected.clone()
    wrong[2, 5] += 0.25
    wrong[4, 1] += 1e-3
    mismatch = task.check(config, wrong, expected)
    assert mismatch is not None and mismatch.config == config.name
    assert mismatch.worst_index == [2, 5]
    assert mismatch.max_abs_error == pytest.approx(0.25, rel=1e-5)
    assert mismatch.max_rel_error is not None and mismatch.max_rel_error > 0
    assert "2 of 198" in mismatch.message


@pytest.mark.parametrize(
    ("make_output", "needle"),
    [
        (lambda e: e.numpy(), "expected a torch.Tensor"),
        (lambda e: torch.nn.Parameter(e), "expected a torch.Tensor"),  # subclasses are not plain tensors
        (lambda e: e[:, :-1], "shape"),
        (lambda e: e.double(), "dtype"),
        (lambda e: torch.where(e > 0.1, float("nan"), e), "non-finite"),
        (lambda e: e + float("inf"), "non-finite"),
    ],
)
def test_check_rejects_wrong_kinds_of_output(task: SoftmaxTask, make_output, needle: str) -> None:
    config = _config(3, 9, seed=5)
    expected = task.reference(*task.make_inputs(config, "cpu"))
    mismatch = task.check(config, make_output(expected), expected)
    assert mismatch is not None and needle in mismatch.message


def test_score_is_inverse_geometric_mean_of_medians(task: SoftmaxTask) -> None:
    timings = [Timing(config=f"c{i}", median_ms=m, mean_ms=m, stdev_ms=0.0, samples=10) for i, m in enumerate([1, 4])]
    latency, score = task.score(timings)
    assert latency == pytest.approx(2.0) and score == pytest.approx(0.5)
    with pytest.raises(ValueError):
        task.score([])
    zero = [Timing(config="z", median_ms=0.0, mean_ms=0.0, stdev_ms=0.0, samples=10)]
    assert math.isfinite(task.score(zero)[1])


def test_spec_and_reference_source_are_prompt_ready(task: SoftmaxTask) -> None:
    spec = task.spec("triton")
    assert "def kernel(x: torch.Tensor) -> torch.Tensor" in spec
    assert "1e-05" in spec and "4096x4096" in spec and "$" not in spec
    assert "def softmax_reference" in task.reference_source()
    assert task.starter_code("triton") is None
    with pytest.raises(ValueError):
        task.spec("cuda")
    flops, nbytes = task.flops_and_bytes(_config(10, 10))
    assert flops > 0 and nbytes == 800


def test_registry_resolves_builtin_and_lists_known_tasks() -> None:
    assert isinstance(resolve_task("softmax"), SoftmaxTask)
    with pytest.raises(TaskNotFoundError, match="known tasks: softmax") as info:
        resolve_task("no-such-task")
    assert "no-such-task" in str(info.value) and info.value.hint
    assert [(t.name, t.source) for t in list_tasks()][0] == ("softmax", "built-in")


class _PluginTask(SoftmaxTask):
    name = "plugin-softmax"
    title = "A softmax registered through an entry point"


def test_registry_finds_entry_point_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    plugins = [
        EntryPoint(name="plugin-softmax", value=f"{__name__}:_PluginTask", group=registry.ENTRY_POINT_GROUP),
        EntryPoint(name="broken", value="no_such_module_xyz:Task", group=registry.ENTRY_POINT_GROUP),
    ]
    monkeypatch.setattr(registry, "entry_points", lambda group: plugins if group == registry.ENTRY_POINT_GROUP else [])
    task = resolve_task("plugin-softmax")
    assert isinstance(task, Task) and task.name == "plugin-softmax"
    with pytest.raises(TaskNotFoundError, match="could not be loaded"):
        resolve_task("broken")
    with pytest.raises(TaskNotFoundError, match="broken, plugin-softmax, softmax"):
        resolve_task("missing")
    infos = {t.name: t for t in list_tasks()}
    assert infos["plugin-softmax"].title == _PluginTask.title
    assert infos["broken"].title.startswith("(cannot load")
