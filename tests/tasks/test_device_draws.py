"""Inputs drawn on the device they are for (``seeding.drawn_on``): a KernelBench problem's ``torch.rand(4096,
393216)`` took ~10 s on the host per draw and an evaluation makes about forty."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from ksearch.tasks.kernelbench import KernelBenchTask
from ksearch.tasks.seeding import drawn_on, draws_on_device, seeded_global_rng

RELU = Path(__file__).resolve().parent / "kernelbench" / "KernelBench" / "level1" / "19_ReLU.py"


def test_on_the_cpu_a_draw_is_the_seeded_host_draw() -> None:
    with seeded_global_rng(7):
        expected = torch.rand(3, 5)
    assert torch.equal(drawn_on("cpu", 7, lambda: torch.rand(3, 5)), expected)


@pytest.mark.parametrize(
    "draw,on_device",
    [
        (lambda: [torch.rand(4096, 393216)], True),  # shapes only: no memory is taken
        (lambda: [torch.randint(0, 10, (5,)), torch.tensor([1.0, 2.0]), 3], True),
        (lambda: [torch.from_numpy(torch.rand(64, 64).numpy())], False),
        (lambda: [torch.rand(3).sum().item()], False),
    ],
)
def test_where_a_draw_is_made_is_decided_from_the_draw_alone(draw, on_device: bool) -> None:  # noqa: ANN001
    """The worker and the checker decide alike, whatever memory either holds: a device draw's own error is raised,
    never turned into a host draw in one process only (which would reject an honest kernel for the digest)."""
    assert draws_on_device(draw) is on_device


def test_deciding_leaves_the_global_generator_as_it_was() -> None:
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    assert draws_on_device(lambda: [torch.manual_seed(99), torch.rand(3)])
    assert torch.equal(torch.rand(2), expected)


@pytest.mark.gpu
def test_a_device_draw_that_fails_is_raised_not_drawn_again_on_the_host() -> None:
    calls: list[str] = []

    def draw() -> list[torch.Tensor]:
        made = torch.rand(4)
        calls.append(made.device.type)
        if made.is_cuda:
            raise RuntimeError("CUBLAS_STATUS_ALLOC_FAILED")  # a device error that is not torch.OutOfMemoryError
        return [made]

    with pytest.raises(RuntimeError, match="ALLOC_FAILED"):
        drawn_on("cuda", 1, draw)
    assert calls == ["meta", "cuda"]


@pytest.mark.gpu
def test_a_full_size_kernelbench_input_is_drawn_on_the_gpu_the_same_in_every_process() -> None:
    task = KernelBenchTask(RELU)
    config = task.test_configs("cuda")[0]
    first, second = task.make_inputs(config, "cuda")[0], task.make_inputs(config, "cuda")[0]
    assert first.is_cuda and first.shape == (4096, 393216)
    assert torch.equal(first, second)  # the worker and the checker draw the same values from one seed
    assert 0.0 <= float(first.min()) and float(first.max()) < 1.0
    del first, second
    torch.cuda.empty_cache()


@pytest.mark.gpu
def test_a_draw_that_needs_host_tensors_falls_back_to_the_host(tmp_path: Path) -> None:
    problem = tmp_path / "level1" / "99_NumpyInputs.py"
    problem.parent.mkdir()
    problem.write_text(
        textwrap.dedent(
            """
            import torch
            import torch.nn as nn

            class Model(nn.Module):
                def forward(self, x):
                    return x * 2

            def get_inputs():
                return [torch.from_numpy(torch.rand(64, 64).numpy() * 3.0)]

            def get_init_inputs():
                return []
            """
        ),
        encoding="utf-8",
    )
    task = KernelBenchTask(problem)
    config = task.test_configs("cuda")[0]
    first, second = task.make_inputs(config, "cuda")[0], task.make_inputs(config, "cuda")[0]
    assert first.is_cuda and torch.equal(first, second)
    assert float(first.max()) > 1.0
