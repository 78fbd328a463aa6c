"""The worker asks a task which inputs may be re-randomised before each config's timing loop, never first between two
timed windows (2026-11-27 on an H200: KernelBench's probe of its input generator imported PyTorch's reference
implementations there, 2.9 s that the ledger read as hidden work, and the honest smoke kernels were rejected)."""

from __future__ import annotations

from pathlib import Path

from ksearch.tasks.registry import resolve_task
from ksearch.tools.evaluator.worker.main import prime_activation_probe

ROOT = Path(__file__).resolve().parents[1] / "tasks" / "data" / "kernelbench" / "KernelBench"


def test_the_probe_is_answered_and_cached_before_timing() -> None:
    task = resolve_task("kernelbench:1/1", kernelbench_root=ROOT)
    config = task.benchmark_configs("cpu")[0]
    assert "_probed_activation_inputs" not in task.__dict__
    prime_activation_probe(task, config)
    cached = task.__dict__["_probed_activation_inputs"]
    assert list(cached) == [config.model_dump_json()]
    assert cached[config.model_dump_json()] == task.activation_inputs(config)  # the loop's later asks hit the cache


def test_a_task_whose_probe_fails_leaves_it_to_the_loop() -> None:
    class Broken:
        calls = 0

        def activation_inputs(self, config: object) -> tuple[int, ...]:
            Broken.calls += 1
            raise RuntimeError("inputs whose shape depends on the seed")

    prime_activation_probe(Broken(), object())
    assert Broken.calls == 1


def test_the_worker_primes_each_config_before_its_runner_is_made() -> None:
    import inspect

    from ksearch.tools.evaluator.worker.main import Worker

    source = inspect.getsource(Worker.measure)
    assert source.index("prime_activation_probe(self.task, salted)") < source.index("WorkerTimingRunner(")
