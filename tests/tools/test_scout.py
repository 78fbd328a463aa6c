"""The compile scout: launches turned into compiles, a dry pass that survives garbage, and the session's handling
(started beside the worker, stopped before timing, its cache shared with that worker only)."""

from __future__ import annotations

import importlib
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import triton
from triton.runtime import autotuner
from triton.runtime.jit import JITFunction

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Verdict
from ksearch.contracts.exchange import WorkerRequest
from ksearch.tasks.softmax import SoftmaxTask
from ksearch.tools.evaluator import EvalRequest, evaluate
from ksearch.tools.evaluator.parent import session as session_mod
from ksearch.tools.evaluator.parent.session import EvaluatorSession
from ksearch.tools.evaluator.worker.main import Worker
from ksearch.tools.evaluator.worker.scout import dry_pass, scouting

evaluate_mod = importlib.import_module("ksearch.tools.evaluator.parent.evaluate")  # the package exports the function
DATA = Path(__file__).resolve().parents[1] / "tasks" / "data"
OK = (DATA / "softmax_triton_ok.py").read_text()


def test_scouting_turns_every_launch_into_a_compile_and_restores_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def recorder(self: Any, *args: Any, **kwargs: Any) -> str:
        calls.append(kwargs)
        return "kernel"

    monkeypatch.setattr(JITFunction, "run", recorder)
    original_bench, original_init = autotuner.Autotuner._bench, autotuner.Autotuner.__init__
    fn = SimpleNamespace(run=lambda *args, **kwargs: calls.append({"autotuned": kwargs}))
    with scouting(2):
        assert JITFunction.run(object(), 1, grid=(1,), warmup=False) == "kernel"
        timings = autotuner.Autotuner._bench(SimpleNamespace(fn=fn), 1, config=triton.Config({"BLOCK": 64}), grid=(1,))
        tuned = triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=[], cache_results=True)(_jit_kernel())
        assert tuned.cache_results is False  # a choice made on skipped launches never reaches the shared cache
    assert calls[0]["warmup"] is True
    assert calls[1]["autotuned"]["BLOCK"] == 64 and timings == [0.0, 0.0, 0.0]
    assert JITFunction.run is recorder
    assert autotuner.Autotuner._bench is original_bench and autotuner.Autotuner.__init__ is original_init


def test_scouting_runs_torch_compiled_code_eagerly_and_uses_every_core(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from ksearch.tools.evaluator.worker import scout as scout_mod

    original = torch.compile

    def fn(x: Any) -> Any:
        return x

    with scouting(1):
        assert torch.compile(fn) is fn and torch.compile(mode="max-autotune")(fn) is fn
    assert torch.compile is original
    monkeypatch.setattr(scout_mod.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert scout_mod.compile_threads() == 16
    monkeypatch.setattr(scout_mod.os, "sched_getaffinity", lambda pid: set(range(128)))
    assert scout_mod.compile_threads() == scout_mod.SCOUT_THREADS


def _jit_kernel() -> Any:
    import triton.language as tl

    @triton.jit
    def kernel(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)

    return kernel


def test_the_dry_pass_goes_on_past_calls_that_raise() -> None:
    class Task:
        def make_inputs(self, config: str, device: str) -> list[str]:
            return [config]

        def prepare(self, module: Any, config: str, device: str) -> Any:
            if config == "bad":
                raise ValueError("garbage in")
            return lambda x: x

        def call_args(self, inputs: list[str], config: str) -> tuple[str, ...]:
            return tuple(inputs)

    assert dry_pass(Task(), None, ["a", "bad", "c"], "cpu") == (2, 1)


def test_a_scout_worker_compiles_into_the_shared_cache_and_reports(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(autotuner.Autotuner, "__init__", autotuner.Autotuner.__init__)  # restored after the worker
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "private"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "private-inductor"))
    (tmp_path / "candidate.py").write_text(OK)
    shared = tmp_path / "shared"
    request = WorkerRequest(
        task="softmax",
        device="cpu",
        entry_point="kernel",
        candidate_path=str(tmp_path / "candidate.py"),
        result_path=str(tmp_path / "result.json"),
        mode="scout",
        triton_cache_dir=str(shared),
    )
    result = Worker(request).run()
    assert result.verdict == Verdict.PASSED, result.error
    assert result.configs_passed == result.configs_total == len(SoftmaxTask().test_configs("cpu"))
    assert set(result.stage_seconds) == {"import", "calls", "compile"}
    assert os.environ["TRITON_CACHE_DIR"] == str(shared)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(shared / "inductor")  # torch.compile's graphs shared alike


@pytest.fixture
def scouts_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scouts on the CPU too (on a GPU they are the default for Triton code), with time to finish before settle."""
    monkeypatch.setattr(evaluate_mod, "wants_scout", lambda request: True)
    monkeypatch.setattr(session_mod, "SCOUT_GRACE_S", 120.0)


@pytest.mark.usefixtures("scouts_everywhere")
def test_a_session_runs_a_scout_beside_each_worker_and_keeps_one_ready() -> None:
    candidate = Candidate(task="softmax", language="triton", code=OK)
    with EvaluatorSession("cpu") as session:
        first = evaluate(EvalRequest(candidate=candidate), session=session)
        assert first.verdict == Verdict.PASSED, first.log
        assert session.idle_scout is not None  # started after the first scout, ahead of the next evaluation
        ready = session.idle_scout
        assert ready.wait_ready(time.monotonic() + 120)
        second = evaluate(EvalRequest(candidate=candidate), session=session)
        assert second.verdict == Verdict.PASSED, second.log
        assert "scout=" in second.environment["stage_seconds"]  # it finished, within its grace, before settle
        assert ready.exited() and session.idle_scout is not ready
        assert not list(session.root.glob("*-triton"))  # each evaluation's shared cache goes with it


def test_scouts_are_for_triton_code_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    triton_code = Candidate(task="softmax", language="triton", code=OK)
    torch_code = Candidate(task="softmax", language="cuda", code="import torch\ndef kernel(x):\n    return x\n")
    assert evaluate_mod.wants_scout(EvalRequest(candidate=triton_code, device="cuda"))
    assert not evaluate_mod.wants_scout(EvalRequest(candidate=torch_code, device="cuda"))
    assert not evaluate_mod.wants_scout(EvalRequest(candidate=triton_code, device="cpu"))
    building = Candidate(
        task="softmax", language="triton", code=OK + "\nfrom torch.utils.cpp_extension import load_inline\n"
    )
    assert not evaluate_mod.wants_scout(EvalRequest(candidate=building, device="cuda"))
    compiling = Candidate(task="softmax", language="triton", code=OK + "\nkernel = torch.compile(kernel)\n")
    assert evaluate_mod.wants_scout(EvalRequest(candidate=compiling, device="cuda"))  # its Triton kernels still pay


@pytest.mark.gpu
def test_a_triton_kernel_on_cuda_is_scouted_and_passes() -> None:
    candidate = Candidate(task="softmax", language="triton", code=OK)
    with EvaluatorSession("cuda") as session:
        evaluation = evaluate(EvalRequest(candidate=candidate, device="cuda"), session=session)
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    assert "scout=" in evaluation.environment["stage_seconds"], evaluation.environment["stage_seconds"]


def test_the_worker_waits_for_the_scouts_calls_and_not_longer(tmp_path: Path) -> None:
    """``wait_phase``: true once the scout announces ``compile`` (its calls done, its GPU memory given back), false
    at the deadline when it is still calling."""
    import subprocess
    import threading

    from ksearch.tools.evaluator.parent.processes import LineReader, WorkerProcess

    read, write = os.pipe()
    scout = WorkerProcess.__new__(WorkerProcess)
    scout.messages, scout.phase, scout.ready_at = LineReader(read), "start", None
    scout.process = subprocess.Popen(["sleep", "30"])
    try:
        os.write(write, b'{"op": "ready"}\n{"op": "phase", "phase": "run"}\n')
        started = time.monotonic()
        assert not scout.wait_phase("compile", time.monotonic() + 0.3)
        assert scout.phase == "run" and time.monotonic() - started < 5
        assert scout.ready_at is not None  # the ready message read on the way is noted
        threading.Timer(0.2, lambda: os.write(write, b'{"op": "phase", "phase": "compile"}\n')).start()
        assert scout.wait_phase("compile", time.monotonic() + 10)
    finally:
        scout.process.kill()
        scout.process.wait()
        os.close(write)
        os.close(read)
