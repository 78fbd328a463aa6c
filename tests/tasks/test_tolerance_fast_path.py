"""The checker's tolerance test: a passing output is decided by a count taken with one synchronisation; a failing
one still gets the full report (where, how far off)."""

from __future__ import annotations

import torch

from ksearch.tasks import base


def test_passing_output_needs_only_the_count(monkeypatch) -> None:
    expected = torch.randn(3, 1000)
    got = expected + 0.001
    assert base.tolerance_mismatch("c", got, expected, 0.02, 0.02) is None


def test_failing_output_is_reported_with_its_worst_element(monkeypatch) -> None:
    monkeypatch.setattr(base, "CHECK_CHUNK", 1000)  # several chunks
    expected = torch.zeros(3, 1000)
    got = expected.clone()
    got[2, 17] = 5.0
    got[0, 3] = 0.5
    mismatch = base.tolerance_mismatch("c", got, expected, 0.02, 0.02)
    assert mismatch is not None
    assert mismatch.worst_index == [2, 17]
    assert "2 of 3000 values outside" in mismatch.message


def test_count_matches_elementwise_definition() -> None:
    torch.manual_seed(0)
    expected = torch.randn(5000) * 10
    got = expected + torch.randn(5000) * 0.05
    want = int(((got - expected).abs() > 0.02 + 0.02 * expected.abs()).sum())
    assert base._count_outside(got, expected, 0.02, 0.02, torch.float32) == want
