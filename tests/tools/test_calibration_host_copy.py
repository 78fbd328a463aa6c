"""The worker's measure of a crossing to host memory (``calibration._host_copy_gbps``), run here with host tensors
on both sides: it times both directions and reports bytes across per second."""

from __future__ import annotations

import pytest

from ksearch.tools.evaluator.worker import calibration


def test_the_host_copy_rate_is_the_slower_direction_in_bytes_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(calibration, "HOST_COPY_BYTES", 1 << 20)
    clock = iter(float(t) for t in range(100))  # each timed copy takes 1 s on this clock
    monkeypatch.setattr(calibration.time, "perf_counter", lambda: next(clock))
    assert calibration._host_copy_gbps("cpu") == pytest.approx((1 << 20) / 1e9)
