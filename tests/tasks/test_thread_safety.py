"""Task code the agent runs on several threads at once (parallel cycles): seeded draws and lazy CPU reductions."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

import ksearch.tasks.kernelbench as kernelbench
from ksearch.tasks.kernelbench import KernelBenchTask
from ksearch.tasks.seeding import seeded_global_rng

CORPUS = Path(__file__).resolve().parent / "kernelbench" / "KernelBench"


def test_a_seeded_block_is_not_reseeded_by_another_thread() -> None:
    """Inside one thread's seeded block another thread tries to seed and draw; the first block's draw is still the
    one its seed gives (without the lock the other thread's seed would take over the shared generator)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        expected = torch.rand(4)
    entered, drawn_here = threading.Event(), threading.Event()

    def other() -> None:
        with seeded_global_rng(2):
            entered.set()
            drawn_here.wait(5)  # stays inside its block until the first thread has drawn

    with seeded_global_rng(1):
        thread = threading.Thread(target=other)
        thread.start()
        entered.wait(0.3)  # it cannot enter while this block holds the generator
        drawn = torch.rand(4)
        drawn_here.set()
    thread.join(5)
    assert entered.is_set() and torch.equal(drawn, expected)


def test_the_cpu_reduction_is_computed_once_when_threads_ask_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed run's parallel cycles all ask the task for its spec at once; the reduction (which toggles
    process-wide state while it runs) is computed by one of them and shared."""
    task = KernelBenchTask(CORPUS / "level1" / "19_ReLU.py")
    real, calls = kernelbench.reduce_for_cpu, []

    def slow_reduce(source: str, path: Path):  # noqa: ANN202
        calls.append(threading.current_thread().name)
        time.sleep(0.2)  # long enough for every thread to arrive while the first computes
        return real(source, path)

    monkeypatch.setattr(kernelbench, "reduce_for_cpu", slow_reduce)
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(task.cpu_reduction())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(calls) == 1 and len(results) == 4 and all(r is results[0] for r in results)
