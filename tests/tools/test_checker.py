"""The trusted checker in-process, on outputs saved as the worker saves them; and the worker's guards."""

from __future__ import annotations

import inspect
import threading
import time
from pathlib import Path

import pytest
import torch

from ksearch.tasks.softmax import SoftmaxTask
from ksearch.tools.evaluator import worker as worker_mod
from ksearch.tools.evaluator.checker import Checker, CheckRequest, OutputRecord, input_digest, salted_seed
from ksearch.contracts.evaluation import Verdict
from ksearch.tools.evaluator.worker import CandidateFailure, Guard, Worker, WorkerRequest, WorkerResult

SALT = 12345
TASK = SoftmaxTask()
CONFIGS = TASK.test_configs("cpu")


def _save(tmp_path: Path, outputs: dict[int, torch.Tensor], *, digest_of=None, seed_shift: int = 0) -> Path:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    records = []
    for index, tensor in outputs.items():
        config = CONFIGS[index]
        seed = salted_seed(config.seed, SALT)
        inputs = TASK.make_inputs(config.model_copy(update={"seed": seed}), "cpu")
        torch.save({"output": tensor}, out / f"test-{index}.pt")
        records.append(
            OutputRecord(config_index=index, config=config.name, prepare_seed=seed, input_seed=seed + seed_shift,
                         digest=(digest_of or input_digest)(inputs), file=f"test-{index}.pt",
                         stride=[list(tensor.stride())])  # fmt: skip
        )
    result = tmp_path / "result.json"
    result.write_text(WorkerResult(verdict=Verdict.PASSED, phase="run", records=records).model_dump_json())
    return result


def _check(tmp_path: Path, result: Path):
    request = CheckRequest(task="softmax", device="cpu", salt=SALT, kind="test", worker_result_path=str(result),
                           outputs_dir=str(tmp_path / "out"))  # fmt: skip
    return Checker(request).run()


def _right(index: int) -> torch.Tensor:
    config = CONFIGS[index]
    inputs = TASK.make_inputs(config.model_copy(update={"seed": salted_seed(config.seed, SALT)}), "cpu")
    return torch.softmax(inputs[0], dim=-1)


def test_correct_outputs_pass_and_a_wrong_one_is_located(tmp_path: Path) -> None:
    outputs = {i: _right(i) for i in range(len(CONFIGS))}
    assert _check(tmp_path, _save(tmp_path, outputs)).verdict == Verdict.PASSED
    outputs[3] = outputs[3] * 1.01
    check = _check(tmp_path, _save(tmp_path, outputs))
    assert check.verdict == Verdict.INCORRECT and check.configs_passed == 3 and check.mismatch.config == CONFIGS[3].name


def test_missing_nan_strided_and_forged_outputs_fail(tmp_path: Path) -> None:
    outputs = {i: _right(i) for i in range(len(CONFIGS))}
    del outputs[5]
    assert "no output" in _check(tmp_path, _save(tmp_path, outputs)).error
    outputs[5] = _right(5)
    outputs[1] = outputs[1].clone()
    outputs[1][0, 0] = float("nan")
    assert "non-finite" in _check(tmp_path, _save(tmp_path, outputs)).error
    outputs[1] = _right(1).t().contiguous().t()  # right values, column-major strides
    assert "strides" in _check(tmp_path, _save(tmp_path, outputs)).error
    outputs[1] = _right(1)
    check = _check(tmp_path, _save(tmp_path, outputs, seed_shift=1))  # a seed the evaluation never used
    assert check.verdict == Verdict.REJECTED and check.rejection.rule == "forged_record"
    check = _check(tmp_path, _save(tmp_path, outputs, digest_of=lambda inputs: "0" * 32))
    assert check.verdict == Verdict.REJECTED and check.rejection.rule == "input_digest"
    result = _save(tmp_path, outputs)
    (tmp_path / "out" / "test-2.pt").unlink()
    (tmp_path / "out" / "test-2.pt").symlink_to(tmp_path / "out" / "test-1.pt")
    assert _check(tmp_path, result).rejection.rule == "forged_record"


def test_inputs_are_deterministic_in_the_seed_and_the_salt_changes_them() -> None:
    config = CONFIGS[1]
    a = TASK.make_inputs(config.model_copy(update={"seed": salted_seed(config.seed, 1)}), "cpu")
    b = TASK.make_inputs(config.model_copy(update={"seed": salted_seed(config.seed, 1)}), "cpu")
    c = TASK.make_inputs(config.model_copy(update={"seed": salted_seed(config.seed, 2)}), "cpu")
    assert input_digest(a) == input_digest(b) != input_digest(c)
    assert salted_seed(7, 1) != salted_seed(7, 2) and 0 <= salted_seed(7, 1) < 2**31


def test_the_worker_never_computes_the_reference(tmp_path: Path) -> None:
    source = inspect.getsource(worker_mod)
    assert ".expected(" not in source and ".reference(" not in source

    class NoReference(SoftmaxTask):
        def expected(self, config, inputs):  # type: ignore[no-untyped-def]
            raise AssertionError("the worker computed the reference")

        reference = expected  # type: ignore[assignment]

    candidate = tmp_path / "candidate.py"
    candidate.write_text("import torch\n\ndef kernel(x):\n    return torch.softmax(x, dim=-1)\n")
    (tmp_path / "out").mkdir()
    request = WorkerRequest(task="softmax", device="cpu", entry_point="kernel", candidate_path=str(candidate),
                            result_path=str(tmp_path / "r.json"), salt=SALT, outputs_dir=str(tmp_path / "out"))  # fmt: skip
    result = Worker(request, task=NoReference()).run()
    assert result.verdict == Verdict.PASSED, result.error
    assert len(result.records) == len(CONFIGS)
    (tmp_path / "result.json").write_text(result.model_dump_json())
    assert _check(tmp_path, tmp_path / "result.json").verdict == Verdict.PASSED


def test_guard_detects_replaced_timers_and_leftover_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    guard = Guard()
    guard.verify("clean")
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    with pytest.raises(CandidateFailure) as caught:
        guard.verify("patched")
    assert caught.value.rejection.rule == "timer_monkeypatch" and "time.perf_counter" in caught.value.error
    monkeypatch.undo()
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.001)
    with pytest.raises(CandidateFailure, match="torch.cuda.Event.elapsed_time"):
        guard.verify("patched")
    monkeypatch.undo()
    monkeypatch.setattr(worker_mod.Worker, "check_inputs_unchanged", lambda *a: None)
    with pytest.raises(CandidateFailure, match="check_inputs_unchanged"):
        guard.verify("patched harness")
    monkeypatch.undo()
    guard.verify("restored")
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="finisher")
    thread.start()
    try:
        with pytest.raises(CandidateFailure) as caught:
            guard.verify("thread")
        assert caught.value.rejection.rule == "thread_injection" and "finisher" in caught.value.error
    finally:
        stop.set()
        thread.join()
    guard.verify("thread finished")
