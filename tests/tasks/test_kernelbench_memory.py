"""The memory a KernelBench evaluation's inputs and references take, in units of one input's size, measured on the CPU
from the profiler's allocation records (``tests.helpers.memory_peaks``): what a GPU's allocator must hold for the
same code.

Level 1's ReLU at full size has a 6.4 GB input, and an 80 GB GPU holds about 12 of them for the worker and the
checker together. A sparse variant drawn with whole-tensor arithmetic took 7 inputs' worth in the worker and again in
the checker (an H100, 2026-12-07: ``crashed, out of memory`` on an honest kernel); every draw and transform now works
in slices of the tensor it writes (``variants.SLICES``), so making any config's inputs holds the input and a fraction
of it. On the CPU draws compute in float64, so the slices' share here is twice a GPU's.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from ksearch.tasks import base
from ksearch.tasks.kernelbench import KernelBenchTask, distributions, judging, precision
from ksearch.tasks.kernelbench.distributions import rescale
from ksearch.tasks.kernelbench.variants import VARIANTS, redraw
from ksearch.tools.evaluator.checker.checker_records import InputClaim
from ksearch.tools.evaluator.checker.references import References
from tests.helpers.memory_peaks import COLUMNS, PROBLEM, ROWS, UNIT, peak_units

SLICE_SHARE = 0.75
"""What the slices' temporaries may add, in units (float64 on the CPU: a sparse draw's five temporaries of a
sixteenth, twice over)."""


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> KernelBenchTask:
    path = Path(tmp_path_factory.mktemp("kernelbench")) / "19_ReLU.py"
    path.write_text(textwrap.dedent(PROBLEM), encoding="utf-8")
    return KernelBenchTask(path)


def _configs(task: KernelBenchTask) -> list[base.TaskConfig]:
    return task.test_configs("cpu") + task.benchmark_configs("cpu")


def test_making_any_configs_inputs_holds_the_inputs_and_slices_beside_them(task: KernelBenchTask) -> None:
    """The input is one unit; a variant's draw replaces it; a rescaled input is copied once on the CPU
    (``get_inputs()`` could hold the tensor it changes in place; on a GPU the move to it is that copy)."""
    for config in _configs(task):
        peak, inputs = peak_units(lambda config=config: task.make_inputs(config, "cpu"), UNIT)
        assert [tuple(x.shape) for x in inputs] == [(ROWS, COLUMNS)]
        copied = 1.0 if config.distribution in ("rescaled", "perturbed") else 0.0
        assert peak <= 1.0 + copied + SLICE_SHARE, (config.name, peak)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_redraw_replaces_each_input_before_it_draws_the_next(variant: str) -> None:
    peak, redrawn = peak_units(
        lambda: redraw([torch.rand(ROWS, COLUMNS), torch.rand(ROWS, COLUMNS)], variant, 7, "cpu"), UNIT
    )
    assert peak <= 2.0 + SLICE_SHARE, peak  # each new input takes its predecessor's memory


def test_rescaling_works_in_place_slice_by_slice() -> None:
    inputs = [torch.rand(ROWS, COLUMNS)]
    before = inputs[0].clone()
    peak, rescaled = peak_units(lambda: rescale(inputs, 11), UNIT)
    assert rescaled[0] is inputs[0] and not torch.equal(rescaled[0], before)
    assert peak <= SLICE_SHARE, peak  # nothing of the input's size beside it


def test_the_checkers_reference_holds_its_inputs_its_output_and_slices(
    task: KernelBenchTask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checker's preparation of every config: inputs, digest, reference. With the float64 reference out of reach
    (a 6.4 GB input: ``precision.DEVICE_SHARE``), the inputs and the output; with it, also the float64 copies of the
    inputs and the output and the rounded output (``precision._fits`` budgets for them). The comparison chunks are
    set to the share of the input they have at full size (16 M elements of 1.6 G)."""
    monkeypatch.setattr(precision, "CHUNK", ROWS * COLUMNS // 64)
    references = References("cpu", 1 << 30)
    for wide in (False, True):
        monkeypatch.setattr(precision, "_fits", lambda model, floats, wide=wide: wide)
        for config in _configs(task):
            claim = InputClaim("test", 0, config.seed, config.seed)
            peak, _ = peak_units(lambda config=config, claim=claim: references.compute(task, config, claim, ()), UNIT)
            bound = 1.0 + 1.0 + (2 + 2 + 1 if wide else 0) + SLICE_SHARE  # input, output (their float64 copies)
            assert peak <= bound, (config.name, wide, peak)


def test_judging_an_output_holds_nothing_of_its_size(task: KernelBenchTask, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker judges one output while it holds the next config's reference: ``isfinite`` over a whole output
    took 1.75 outputs' worth (``base.all_finite``). Chunks as at full size (16 M elements of 1.6 G, the sensitivity
    check's projections 1 M)."""
    chunk = ROWS * COLUMNS // 96
    monkeypatch.setattr(distributions, "PROJECTION_CHUNK", chunk // 16)
    monkeypatch.setattr(base, "CHECK_CHUNK", chunk)
    monkeypatch.setattr(judging, "CHECK_CHUNK", chunk)
    monkeypatch.setattr(precision, "CHUNK", chunk)
    for config in _configs(task):
        inputs = task.make_inputs(config, "cpu")
        expected = task.expected(config, inputs)
        output = torch.relu(inputs[0])
        peak, mismatch = peak_units(lambda c=config, o=output, e=expected: task.check(c, o, e), UNIT)
        assert mismatch is None and peak <= 0.25, (config.name, peak)


def test_a_reference_is_cached_only_where_every_correctness_reference_fits(task: KernelBenchTask) -> None:
    """A session's evaluations ask for the same 12 references in the same order: a cache holding fewer is swept
    before it is asked again, and would only hold GPU memory beside the worker's inputs."""
    configs = task.test_configs("cpu")
    for budget, cached in ((len(configs) * UNIT, len(configs)), (len(configs) * UNIT - 1, 0)):
        references = References("cpu", budget)
        for index, config in enumerate(configs):
            references.reference(task, config, InputClaim("test", index, config.seed, config.seed))
        assert len(references.cache.entries) == cached, budget


def test_references_of_different_sizes_are_cached_where_their_sum_fits() -> None:
    """Softmax's tests range from 4 to 10,000 elements: a cache that holds all of them keeps each, though the
    largest times their count would not fit."""
    from ksearch.tasks.softmax import SoftmaxTask

    task = SoftmaxTask()
    configs = task.test_configs("cpu")
    total = sum(task.make_inputs(config, "cpu")[0].numel() * 4 for config in configs)
    for budget in (total, total - 1):
        references = References("cpu", budget)
        for _ in range(2):  # the first evaluation learns the sizes
            for index, config in enumerate(configs):
                references.reference(task, config, InputClaim("test", index, config.seed, config.seed))
        assert (len(references.cache.entries) == len(configs)) == (budget == total), budget


def test_input_sets_handed_to_the_worker_are_kept_within_half_the_cache_budget() -> None:
    """Four kept 6.4 GB sets would hold 26 GB beside the worker's rotated ones: the checker keeps what fits half its
    cache budget and makes the rest again at the handoff."""
    unit = 1 << 20  # one set: 256 K float32 values
    references = References("cpu", 5 * unit)  # kept sets may hold 2.5 units
    sets = [[torch.full((unit // 4,), float(i))] for i in range(4)]
    for index, inputs in enumerate(sets):
        references.keep_handed(InputClaim("input", 0, 0, index), inputs, f"d{index}")
    assert [key[1] for key in references.handed] == [2, 3]  # the newest two, the oldest dropped
    assert references.handed_bytes() == 2 * unit
    references.keep_handed(InputClaim("input", 0, 0, 9), [torch.zeros(3 * unit // 4)], "big")
    assert (0, 9, None) not in references.handed  # beyond the budget alone: never kept


def test_a_retry_after_running_out_of_memory_drops_the_kept_input_sets_too() -> None:
    """Each kept set can be made again from its seeds; holding them through the retry could fail it again."""
    references = References("cpu", 1 << 30)
    references.keep_handed(InputClaim("input", 0, 0, 1), [torch.zeros(16)], "d1")
    attempts: list[int] = []

    def work() -> str:
        attempts.append(len(references.handed))
        if len(attempts) == 1:
            raise torch.OutOfMemoryError("out of memory")
        return "done"

    assert references.retrying_out_of_memory(work) == "done"
    assert attempts == [1, 0] and references.kept is None
