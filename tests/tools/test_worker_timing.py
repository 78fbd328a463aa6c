"""The worker's side of the robust timing loop, on the CPU: the audits between blocks and the outputs kept for the
checker. (Device events are replaced by a wall-clock stand-in; on a GPU the same code runs with CUDA events.)"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch

from ksearch.tools import timing
from ksearch.tools.evaluator.worker import CandidateFailure, Worker, WorkerRequest, WorkerTimingRunner


class WallEvent:
    def __init__(self, enable_timing: bool = True) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: WallEvent) -> float:
        return (end.t - self.t) * 1e3


def _runner(tmp_path: Path, fn: Any, *, keep: bool = True) -> tuple[Worker, WorkerTimingRunner]:
    request = WorkerRequest(task="softmax", device="cpu", entry_point="kernel", candidate_path="", result_path="",
                            mode="timing", salt=12345, outputs_dir=str(tmp_path), flush_l2=False)  # fmt: skip
    worker = Worker(request)
    worker._save = torch.save  # noqa: SLF001 - what prepare_device sets in a real worker
    config = worker.salted(worker.task.benchmark_configs("cpu")[0])
    runner = WorkerTimingRunner(worker, fn, config, 0, keep=keep)
    runner._event_cls = WallEvent  # noqa: SLF001 - CUDA events on a GPU
    return worker, runner


def _short() -> timing.Robust:
    return timing.Robust(warmup_s=0.01, time_cap_s=0.05, min_samples=8)


def test_kept_outputs_are_written_after_the_loop_with_their_input_seeds(tmp_path: Path) -> None:
    worker, runner = _runner(tmp_path, lambda inputs: torch.softmax(inputs[0], dim=-1))
    run = _short().run(runner, flush_l2=False)
    assert len(run.samples_ms) >= 8 and not list(tmp_path.glob("*.pt"))  # nothing written during the loop
    runner.finish()
    files = sorted(tmp_path.glob("bench-0-*.pt"))
    assert files and len(files) == len(worker.records) <= 4  # at most one per input set
    for record in worker.records:
        index = int(record.file.removesuffix(".pt").rsplit("-", 1)[1])
        assert record.input_seed == runner.config.seed + timing.SEED_STRIDE * index
        saved = torch.load(tmp_path / record.file, weights_only=True)["output"]
        assert torch.equal(saved, torch.softmax(runner.inputs(index)[0], dim=-1))
        assert record.stride == [list(saved.stride())]


def test_without_keep_nothing_is_saved_but_every_block_is_still_audited(tmp_path: Path) -> None:
    worker, runner = _runner(tmp_path, lambda inputs: torch.softmax(inputs[0], dim=-1), keep=False)
    _short().run(runner, flush_l2=False)
    runner.finish()
    assert not worker.records and not list(tmp_path.glob("*.pt"))


def test_a_call_that_mutates_its_inputs_is_caught_at_the_next_audit(tmp_path: Path) -> None:
    def mutating(inputs: list[Any]) -> torch.Tensor:
        out = torch.softmax(inputs[0], dim=-1)
        inputs[0].mul_(1.0001)
        return out

    _, runner = _runner(tmp_path, mutating)
    with pytest.raises(CandidateFailure) as failure:
        _short().run(runner, flush_l2=False)
    assert failure.value.rejection is not None and failure.value.rejection.rule == "input_mutation"


def test_every_timed_call_is_glanced_at_without_a_sync(tmp_path: Path) -> None:
    """A lazy tensor subclass is refused on the call that returns it, audited or not."""

    class Lazy(torch.Tensor):
        pass

    calls = []

    def lazy_after_a_while(inputs: list[Any]) -> torch.Tensor:
        calls.append(1)
        out = torch.softmax(inputs[0], dim=-1)
        return out.as_subclass(Lazy) if len(calls) == 7 else out

    _, runner = _runner(tmp_path, lazy_after_a_while)
    with pytest.raises(CandidateFailure) as failure:
        _short().run(runner, flush_l2=False)
    assert failure.value.rejection is not None and failure.value.rejection.rule == "lazy_output"
    assert len(calls) == 7
