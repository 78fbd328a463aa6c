"""The device probe (``ksearch.tools.fingerprint.probe_device``): the CPU's answer is the probe process's, read
without starting one where it can be (a ``ksearch`` command pays 1.5 s a probe process)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ksearch.tools import fingerprint


@pytest.fixture
def fresh_probes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Probes from scratch, recording each device a probe process was started for."""
    started: list[str] = []
    probe_process = fingerprint._probe_process

    def recording(device: str) -> fingerprint.DeviceInfo:
        started.append(device)
        return probe_process(device)

    monkeypatch.setattr(fingerprint, "_probe_process", recording)
    monkeypatch.setattr(fingerprint, "_GPU_PROBES_WITHOUT_GPU", [])
    fingerprint.probe_device.cache_clear()
    yield started
    fingerprint.probe_device.cache_clear()


def test_a_gpu_probe_that_found_no_gpu_answers_the_cpus_probe(fresh_probes, monkeypatch) -> None:
    monkeypatch.setattr(fingerprint, "_torch_imported", lambda: False)  # as in a process that has not imported torch
    if fingerprint.probe_device("cuda").is_gpu:
        pytest.skip("a GPU is visible: the CPU's probe is its own")
    cpu = fingerprint.probe_device("cpu")
    assert fresh_probes == ["cuda"]
    assert cpu == fingerprint._probe_process("cpu") and cpu.torch  # the probe process's answer: the same cache key


def test_where_torch_is_imported_the_cpu_is_probed_in_this_process_with_the_same_answer(fresh_probes) -> None:
    cpu = fingerprint.probe_device("cpu")
    assert fresh_probes == []
    assert cpu == fingerprint._probe_process("cpu") and cpu.torch and cpu.triton


def test_without_torch_imported_the_cpu_is_probed_in_a_probe_process(fresh_probes, monkeypatch) -> None:
    monkeypatch.setattr(fingerprint, "_torch_imported", lambda: False)
    assert fingerprint.probe_device("cpu").torch
    assert fresh_probes == ["cpu"]
