"""``Task.check`` and ``tolerance_mismatch`` at the tolerance's edge, with atol != rtol (every built-in task has them
equal, which would hide a swap), and the rest of the Task base's decisions: the output's form, the score, what the
definition digest covers, strides and activation positions.

Values are powers of two, exact in float32: with atol = 0.25 and rtol = 0.0625 the limit at |expected| = 8 is
0.25 + 0.0625 * 8 = 0.75 exactly."""

from __future__ import annotations

import math

import pytest
import torch

from ksearch.contracts.evaluation import Timing
from ksearch.tasks import base
from ksearch.tasks.base import MIN_LATENCY_MS, InputRole, TaskConfig, tolerance_mismatch
from ksearch.tasks.softmax import SoftmaxTask

ATOL, RTOL = 0.25, 0.0625
CONFIG = TaskConfig(name="cfg", params={"n": 2}, seed=0)


class Loose(SoftmaxTask):
    atol = ATOL
    rtol = RTOL


def _check(got: list[float], expected: list[float]):
    return Loose().check(CONFIG, torch.tensor(got), torch.tensor(expected))


def test_an_output_exactly_at_the_limit_passes_and_one_step_beyond_fails() -> None:
    assert _check([8.75], [8.0]) is None  # |diff| 0.75 == atol + rtol * 8
    assert _check([8.0 - 0.75], [8.0]) is None
    beyond = float(torch.nextafter(torch.tensor(8.75), torch.tensor(9.0)))
    assert _check([beyond], [8.0]) is not None
    assert _check([-8.75], [-8.0]) is None  # the limit scales with |expected|
    assert _check([-8.78125], [-8.0]) is not None


def test_atol_and_rtol_are_not_interchangeable() -> None:
    # swapped, the limit at 8 would be 0.0625 + 0.25 * 8 = 2.0625: a diff of 1 must fail
    assert _check([9.0], [8.0]) is not None
    # at expected 0 only atol counts: 0.25 passes, 0.3 fails (swapped: 0.0625 would fail 0.25)
    assert _check([0.25], [0.0]) is None and _check([0.3125], [0.0]) is not None


def test_the_limit_comes_from_the_expected_value_not_the_output() -> None:
    # from the output, the limit at 8.78125 would be 0.25 + 0.0625 * 8.78125 = 0.7988...: 0.78125 would pass
    assert _check([8.78125], [8.0]) is not None
    # and an output far below a large expected value would get a smaller limit: 0.25 + 0.0625 * 64 = 4.25 here
    assert _check([60.0], [64.0]) is None


def test_the_report_counts_only_what_is_beyond_the_limit_and_points_at_the_worst() -> None:
    mismatch = _check([8.75, 9.0, 8.0, 12.0], [8.0, 8.0, 8.0, 8.0])
    assert mismatch is not None and mismatch.config == "cfg"
    assert mismatch.message.startswith("cfg: 2 of 4 values outside atol=0.25 rtol=0.0625; max abs error 4")
    assert mismatch.worst_index == [3] and "worst at [3]: got 12, expected 8" in mismatch.message
    assert mismatch.max_abs_error == 4.0 and mismatch.max_rel_error == 0.5


def test_relative_errors_are_reported_only_where_the_expected_value_exceeds_atol() -> None:
    mismatch = tolerance_mismatch("c", torch.tensor([1.0, 0.5]), torch.tensor([0.0, 0.25]), ATOL, RTOL)
    assert mismatch is not None and mismatch.max_rel_error is None and "max rel error" not in mismatch.message
    assert mismatch.worst_index == [0] and mismatch.max_abs_error == 1.0
    with_rel = tolerance_mismatch("c", torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.5]), ATOL, RTOL)
    assert with_rel.max_rel_error == 3.0 and "max rel error 3" in with_rel.message


def test_the_worst_element_is_the_largest_excess_over_its_own_limit_across_chunks(monkeypatch) -> None:
    monkeypatch.setattr(base, "CHECK_CHUNK", 4)
    expected = torch.tensor([64.0] * 5 + [0.0] * 5)
    got = expected.clone()
    got[1] = 67.0  # diff 3, limit 4.25: inside
    got[6] = 1.0  # diff 1, limit 0.25: excess 0.75
    got[9] = 2.0  # diff 2, limit 0.25: excess 1.75 (the worst, in the last, partial chunk)
    mismatch = tolerance_mismatch("c", got, expected, ATOL, RTOL)
    assert mismatch is not None and mismatch.worst_index == [9] and "2 of 10 values" in mismatch.message
    assert mismatch.max_abs_error == 3.0  # the largest difference, inside its limit or not
    assert mismatch.max_rel_error == 3.0 / 64.0  # the largest over all chunks (the later ones hold smaller)
    assert base._count_outside(got, expected, ATOL, RTOL, torch.float32) == 2


def test_of_equal_excesses_in_two_chunks_the_first_is_the_worst(monkeypatch) -> None:
    monkeypatch.setattr(base, "CHECK_CHUNK", 4)
    got = torch.zeros(8)
    got[2] = got[6] = 1.0
    mismatch = tolerance_mismatch("c", got, torch.zeros(8), ATOL, RTOL)
    assert mismatch.worst_index == [2] and mismatch.max_abs_error == 1.0


def test_errors_below_one_are_reported_as_they_are() -> None:
    mismatch = tolerance_mismatch("c", torch.tensor([0.5, 0.0]), torch.tensor([0.0, 0.0]), ATOL, RTOL)
    assert mismatch.max_abs_error == 0.5 and mismatch.max_rel_error is None


def test_a_two_dimensional_worst_index_is_unravelled() -> None:
    expected = torch.zeros(3, 4)
    got = expected.clone()
    got[2, 1] = 1.0
    assert tolerance_mismatch("c", got, expected, ATOL, RTOL).worst_index == [2, 1]


@pytest.mark.parametrize("which", ["got", "expected", "both"])
def test_float64_on_either_side_is_compared_in_float64(which: str) -> None:
    exact = torch.tensor([1.0], dtype=torch.float64)
    off = exact + 1e-12  # the difference is lost in float32
    got = off if which in ("got", "both") else exact.float()
    expected = off if which == "expected" else (exact if which == "both" else exact.float())
    assert tolerance_mismatch("c", got, expected, 0.0, 0.0) is not None


def test_an_empty_output_of_the_right_form_passes() -> None:
    assert Loose().check(CONFIG, torch.empty(0), torch.empty(0)) is None


# ---- the output's form ----------------------------------------------------------------------------------------------


def test_the_form_is_checked_before_the_values() -> None:
    task = Loose()
    expected = torch.zeros(2, 3)
    assert "expected a torch.Tensor, got list" in task.check(CONFIG, [[0.0] * 3] * 2, expected).message

    class Sub(torch.Tensor):
        pass

    assert "expected a torch.Tensor, got" in task.check(CONFIG, torch.zeros(2, 3).as_subclass(Sub), expected).message
    assert task.check(CONFIG, torch.zeros(3, 2), expected).message == "cfg: shape (3, 2), expected (2, 3)"
    assert task.check(CONFIG, torch.zeros(2, 3, dtype=torch.float64), expected).message == (
        "cfg: dtype torch.float64, expected torch.float32"
    )
    assert "device meta, expected cpu" in task.check(CONFIG, torch.zeros(2, 3, device="meta"), expected).message


def test_non_finite_outputs_are_counted_and_the_first_is_named() -> None:
    got = torch.zeros(2, 3)
    got[0, 2] = float("nan")
    got[1, 0] = float("inf")
    mismatch = Loose().check(CONFIG, got, torch.zeros(2, 3))
    assert mismatch.worst_index == [0, 2]
    assert mismatch.message == "cfg: 2 non-finite output values (nan/inf), first at [0, 2]: nan"
    assert Loose().form_mismatch("cfg", torch.zeros(2, 3), torch.zeros(2, 3)) is None


# ---- the score ------------------------------------------------------------------------------------------------------


def _timing(median: float, mean: float | None = None, headline: str = "median") -> Timing:
    return Timing(
        config="c",
        median_ms=median,
        mean_ms=mean if mean is not None else median,
        stdev_ms=0.0,
        samples=3,
        headline=headline,
    )


def test_the_score_is_one_over_the_geometric_mean_of_the_headline_statistic() -> None:
    latency, score = Loose().score([_timing(1.0), _timing(4.0)])
    assert latency == pytest.approx(2.0) and score == pytest.approx(0.5)
    latency, _ = Loose().score([_timing(1.0, mean=9.0, headline="mean"), _timing(1.0)])
    assert latency == pytest.approx(3.0)  # sqrt(9 * 1): the mean where the method's upstream reports the mean
    with pytest.raises(ValueError, match="no timings"):
        Loose().score([])


def test_a_zero_time_is_floored_so_it_cannot_zero_the_aggregate() -> None:
    assert MIN_LATENCY_MS == 1e-6
    latency, score = Loose().score([_timing(0.0), _timing(1.0)])
    assert latency == pytest.approx(math.sqrt(1e-6)) and score == pytest.approx(1 / math.sqrt(1e-6))
    assert Loose().score([_timing(0.0)])[0] == pytest.approx(1e-6)


# ---- definition digest, strides, activation positions ---------------------------------------------------------------


def test_the_definition_digest_covers_each_tolerance_in_its_place_the_entry_point_and_support_modules() -> None:
    class Swapped(SoftmaxTask):
        atol = RTOL
        rtol = ATOL

    class Other(Loose):
        entry_point = "run"

    class Supported(Loose):
        def support_modules(self) -> dict[str, str]:
            return {"task": "X = 1\n"}

    class Referenced(Loose):
        def reference_source(self) -> str:
            return "def reference(x):\n    return x\n"

    digests = [t().definition_digest() for t in (Loose, Swapped, Other, Supported, Referenced)]
    assert len(set(digests)) == 5 and Loose().definition_digest() == digests[0]


def test_the_module_source_is_part_of_the_digest(monkeypatch) -> None:
    before = Loose().definition_digest()
    monkeypatch.setattr(base, "_source_of", lambda cls: "edited")
    assert Loose().definition_digest() != before


def test_contiguous_strides_and_tuple_outputs() -> None:
    task = Loose()
    assert task.output_strides(CONFIG, torch.zeros(2, 3, 4)) == (12, 4, 1)
    assert task.output_strides(CONFIG, torch.zeros(2, 0, 3)) == (3, 3, 1)  # an empty dimension counts as one
    assert task.output_strides(CONFIG, (torch.zeros(5), torch.zeros(2, 2))) == [(1,), (2, 1)]
    assert task.output_strides(CONFIG, torch.zeros(())) == ()


def test_activation_inputs_are_the_activation_positions_of_the_roles() -> None:
    class Roles(Loose):
        def input_roles(self, config):
            return (InputRole.PARAMETER, InputRole.ACTIVATION, InputRole.STRUCTURE, InputRole.ACTIVATION)

    assert Roles().activation_inputs(CONFIG) == (1, 3)
    assert Loose().activation_inputs(CONFIG) is None


def test_the_definition_digest_is_stable_across_versions(monkeypatch) -> None:
    """Runs store their task's digest and refuse to resume when it changes: a new way of computing it (another key
    order, another encoding) would refuse every run an earlier version created. Pinned on a fixed definition."""

    class Fixed(Loose):
        def reference_source(self) -> str:
            return "def reference(x):\n    return x\n"

    monkeypatch.setattr(base, "_source_of", lambda cls: "module text")
    assert Fixed().definition_digest() == "44c4c9956612fdf4d69da74774d41fab921ae8d482e7a2c4b90721975169731e"
