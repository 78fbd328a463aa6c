"""``KSEARCH_PROFILE=DIR``: the evaluator's worker and checker write cProfile statistics there (a developer's aid for
finding where the time to a verdict goes); the GPU warm-up of a pre-started worker compiles a kernel of its own."""

from __future__ import annotations

import pstats
from pathlib import Path

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.tools.evaluator import EvalRequest, EvaluatorSession, evaluate

DATA = Path(__file__).resolve().parents[1] / "tasks" / "data"


def test_profile_dir_receives_worker_and_checker_statistics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSEARCH_PROFILE", str(tmp_path / "prof"))
    code = (DATA / "softmax_triton_ok.py").read_text()
    evaluation = evaluate(EvalRequest(candidate=Candidate(task="softmax", language="triton", code=code), device="cpu"))
    assert evaluation.passed, evaluation.log
    workers = list((tmp_path / "prof").glob("worker-*.pstats"))
    checkers = list((tmp_path / "prof").glob("checker-*-1.pstats"))
    assert len(workers) == 1 and len(checkers) == 1
    functions = {name for _, _, name in pstats.Stats(str(workers[0])).stats}  # type: ignore[attr-defined]
    assert "check_correctness" in functions


def test_each_sandboxed_worker_writes_a_file_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every worker has the same PID in its own namespace: two evaluations leave two worker files, not one."""
    monkeypatch.setenv("KSEARCH_PROFILE", str(tmp_path / "prof"))
    code = (DATA / "softmax_triton_ok.py").read_text()
    request = EvalRequest(candidate=Candidate(task="softmax", language="triton", code=code), device="cpu")
    with EvaluatorSession("cpu") as session:
        assert all(evaluate(request, session=session).passed for _ in range(2))
    assert len(list((tmp_path / "prof").glob("worker-*.pstats"))) == 2


@pytest.mark.gpu
def test_triton_warm_up_compiles_and_runs_on_the_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from ksearch.tools.evaluator.worker.warmup import warm_up_triton

    warm_up_triton("cuda")  # raises if Triton's backend cannot compile or launch


def test_memory_history_is_recorded_only_on_a_gpu_with_profiling_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from ksearch.tools.evaluator.shared import profiling

    monkeypatch.setenv("KSEARCH_MEMORY_HISTORY", "1")
    monkeypatch.delenv("KSEARCH_PROFILE", raising=False)
    assert not profiling.records_memory()  # the switch alone does nothing
    monkeypatch.setenv("KSEARCH_PROFILE", str(tmp_path / "prof"))
    assert profiling.records_memory() == torch.cuda.is_available()


@pytest.mark.gpu
def test_a_gpu_process_writes_its_allocator_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read back by ``bench/memory_timeline.py``: the block this test allocates is alive at the peak."""
    import torch

    from ksearch.tools.evaluator.shared import profiling
    from tests.helpers.bench_scripts import load_bench

    monkeypatch.setenv("KSEARCH_PROFILE", str(tmp_path / "prof"))
    monkeypatch.setenv("KSEARCH_MEMORY_HISTORY", "1")
    profile = profiling.Accumulating("test")
    with profile.around():
        block = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    profile.dump()
    del block
    (history,) = (tmp_path / "prof").glob("test-*-1.memory.pickle")
    assert load_bench("memory_timeline").main([str(history)]) == 0
    torch.cuda.memory._record_memory_history(enabled=None)
