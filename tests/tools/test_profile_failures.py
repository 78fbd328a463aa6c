"""A profile the worker could not take after its timing says why, in the evaluation's environment (it was silent: a
``torch.compile`` candidate's in-worker profile came back empty on an H200 with nothing to say so)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ksearch.contracts.evaluation import Evaluation, Timing, Verdict
from ksearch.contracts.exchange import WorkerResult
from ksearch.tasks.softmax import SoftmaxTask
from ksearch.tools.evaluator.parent.evidence import profile_problem, with_evidence
from ksearch.tools.evaluator.profiler.kernel_profile import PROFILE_NOTE, NoProfiledCall, profile_shapes
from ksearch.tools.evaluator.worker.main import Worker

TASK = SoftmaxTask()


def _worker(stages: dict) -> SimpleNamespace:
    return SimpleNamespace(
        device="cpu",
        task=TASK,
        request=SimpleNamespace(bench_salt=3),
        stages=stages,
        salted=lambda config, salt: config,
    )


def test_every_call_failing_raises_with_the_first_reason() -> None:
    def failing(x):  # noqa: ANN001, ANN202
        raise ValueError("no kernel for this shape")

    with pytest.raises(NoProfiledCall, match=r"no call could be profiled \(\d+ failed\); .*ValueError: no kernel"):
        profile_shapes(_worker({}), SimpleNamespace(kernel=failing))


def test_calls_that_work_are_profiled_and_failures_beside_them_are_left_out() -> None:
    import torch

    configs = TASK.benchmark_configs("cpu")
    first = tuple(TASK.make_inputs(configs[0], "cpu")[0].shape)

    def half(x):  # noqa: ANN001, ANN202
        if tuple(x.shape) != first:
            raise ValueError("only the first shape")
        return torch.softmax(x, dim=-1)

    stages: dict = {}
    profiles = profile_shapes(_worker(stages), SimpleNamespace(kernel=half))
    assert [p.config for p in profiles] == [configs[0].name] and "profile_calls" in stages


def test_the_workers_note_becomes_the_evaluations_profile_problem(monkeypatch) -> None:
    worker = Worker.__new__(Worker)
    worker.notes = []

    def broken(self, module):  # noqa: ANN001, ANN202
        raise NoProfiledCall("no call could be profiled (7 failed); b0: RuntimeError: boom")

    monkeypatch.setattr("ksearch.tools.evaluator.worker.main.profile_shapes", lambda w, m: broken(w, m))
    assert worker.profile_after_timing(object()) == []
    assert worker.notes == [
        f"{PROFILE_NOTE}NoProfiledCall: no call could be profiled (7 failed); b0: RuntimeError: boom"
    ]

    result = WorkerResult(verdict=Verdict.PASSED, phase="done", notes=worker.notes)
    assert profile_problem(result).startswith("NoProfiledCall: no call could be profiled")
    timing = Timing(config=TASK.benchmark_configs("cpu")[0].name, median_ms=1.0, mean_ms=1.0, stdev_ms=0.0, samples=3)
    evaluation = Evaluation(
        verdict=Verdict.PASSED, device="NVIDIA H200", timed=True, score=1.0, latency_ms=1.0, timings=[timing]
    )
    evidenced = with_evidence(evaluation, TASK, device="cuda", target_gpu=None, worker=result, probe=None)
    assert evidenced.environment["profile"].startswith("NoProfiledCall: no call could be profiled")
    assert profile_problem(WorkerResult(verdict=Verdict.PASSED, phase="done", notes=["other note"])) == ""
