"""The trusted checker in-process, judging outputs staged as a worker stages them; and the worker's guards."""

from __future__ import annotations

import inspect
import threading
import time
from pathlib import Path

import pytest
import torch

from ksearch.contracts.evaluation import Verdict
from ksearch.contracts.exchange import CheckerCommand, Handoff, WorkerRequest
from ksearch.tasks.softmax import SoftmaxTask
from ksearch.tools.evaluator.checker import main as checker_mod
from ksearch.tools.evaluator.checker.main import Checker
from ksearch.tools.evaluator.shared.seeds import input_digest, salted_seed
from ksearch.tools.evaluator.shared.staging import StagingWriter
from ksearch.tools.evaluator.worker import main as worker_mod
from ksearch.tools.evaluator.worker.guard import CandidateFailure, Guard
from ksearch.tools.evaluator.worker.main import Worker
from tests.tools.loopback import LoopbackChannel

SALT = 12345
TASK = SoftmaxTask()
CONFIGS = TASK.test_configs("cpu")


@pytest.fixture
def checker() -> Checker:
    checker = Checker("cpu")
    yield checker
    checker.staging.release()


def _begin(checker: Checker, salt: int = SALT, *, low_memory: bool = False) -> StagingWriter:
    answer = checker.handle(
        CheckerCommand(op="begin", task="softmax", device="cpu", salt=salt, bench_salt=salt + 1, low_memory=low_memory)
    )
    assert answer.get("ok", True), answer
    assert answer["low_memory"] == checker.low_memory
    writer = StagingWriter(checker.staging.handle)
    return writer


def _inputs(index: int, salt: int = SALT) -> list[torch.Tensor]:
    config = CONFIGS[index]
    return TASK.make_inputs(config.model_copy(update={"seed": salted_seed(config.seed, salt)}), "cpu")


def _right(index: int) -> torch.Tensor:
    return torch.softmax(_inputs(index)[0], dim=-1)


def _handoff(checker: Checker, writer: StagingWriter, index: int, output: torch.Tensor, **change: object) -> Handoff:
    """Stage ``output`` for test config ``index``: the worker's record of it (with ``change`` applied)."""
    if not writer.fits(output.numel() * 4 + 256):
        writer.open(checker.staging.ensure(output.numel() * 4 + 256))
    offsets = writer.stage([output])
    seed = salted_seed(CONFIGS[index].seed, SALT)
    fields = dict(
        kind="test",
        config_index=index,
        config=CONFIGS[index].name,
        prepare_seed=seed,
        input_seed=seed,
        digest=input_digest(_inputs(index)),
        shapes=[list(output.shape)],
        dtypes=[str(output.dtype)],
        strides=[list(output.stride())],
        offsets=offsets,
        generation=writer.handle.generation,
    )
    fields.update(change)
    return Handoff(**fields)


def _hand(checker: Checker, writer: StagingWriter, index: int, output: torch.Tensor, **change: object) -> bool:
    """Stage ``output`` for test config ``index`` and ask the checker; True when it was judged correct."""
    received = checker.check(_handoff(checker, writer, index, output, **change)).ok
    checker.judge_pending()  # as the serve loop does once the answer is out
    return received and checker.settle().ok


def test_correct_outputs_pass_and_a_wrong_one_is_located(checker: Checker) -> None:
    writer = _begin(checker)
    assert all(_hand(checker, writer, i, _right(i)) for i in range(len(CONFIGS)))
    assert checker.finish(timed=False).verdict == Verdict.PASSED
    writer = _begin(checker)
    for i in range(3):
        assert _hand(checker, writer, i, _right(i))
    assert not _hand(checker, writer, 3, _right(3) * 1.01)
    check = checker.finish(timed=False)
    assert check.verdict == Verdict.INCORRECT and check.failed_check and check.configs_passed == 3
    assert check.mismatch.config == CONFIGS[3].name


def test_a_correctness_output_is_judged_after_the_answer_on_the_checkers_own_copy(checker: Checker) -> None:
    """The answer to a correctness handoff comes before the judgement (the worker runs its next config meanwhile), so
    the checker copies the output out of the shared buffer first: what the worker writes there afterwards (a candidate
    rewriting a staged output it has already handed off) changes nothing, and a failure reaches the next answer."""
    writer = _begin(checker)
    wrong = _right(0) * 1.01
    handoff = _handoff(checker, writer, 0, wrong)
    assert checker.check(handoff).ok  # received, not yet judged
    writer.view(handoff.offsets[0], wrong).copy_(_right(0))  # the right answer written into the buffer after the answer
    checker.judge_pending()
    settled = checker.settle()
    assert not settled.ok and CONFIGS[0].name in settled.message
    assert not _hand(checker, writer, 1, _right(1))  # every later answer carries the failure
    check = checker.finish(timed=False)
    assert check.verdict == Verdict.INCORRECT and check.failed_check and check.mismatch.config == CONFIGS[0].name


def test_a_pending_judgement_is_made_before_the_next_command(checker: Checker) -> None:
    writer = _begin(checker)
    for i in range(len(CONFIGS)):
        handoff = _handoff(checker, writer, i, _right(i))
        assert checker.handle(CheckerCommand(op="handoff", handoff=handoff))["ok"]  # no judge_pending in between
    assert checker.handle(CheckerCommand(op="finish"))["verdict"] == Verdict.PASSED.value


def test_an_out_of_memory_reference_is_retried_with_the_cache_dropped(checker: Checker, monkeypatch) -> None:
    """The GPU is shared with the candidate (and maybe other sessions): a reference that runs out of memory is
    computed again after the checker gives back what it holds, instead of crashing the evaluation."""
    writer = _begin(checker)
    assert _hand(checker, writer, 0, _right(0)) and checker.cache.entries
    compute, failures = checker.references.compute, []

    def once_out_of_memory(*args: object) -> object:
        if not failures:
            failures.append(1)
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return compute(*args)

    monkeypatch.setattr(checker.references, "compute", once_out_of_memory)
    assert _hand(checker, writer, 1, _right(1)) and failures == [1]
    assert len(checker.cache.entries) == 1  # config 0's reference was dropped, config 1's kept
    assert checker.finish(timed=False).verdict == Verdict.INCORRECT  # the other configs were never handed off


def test_an_out_of_memory_that_persists_is_the_harnesss_failure_not_the_candidates(
    checker: Checker, monkeypatch
) -> None:
    """Another process holding the GPU can leave the checker without memory even after it drops its cache: that says
    nothing about the candidate, so the result names a harness error (the evaluator retries) instead of a crash or a
    failed check; any other exception in the checker stays a crash."""
    writer = _begin(checker)

    def out_of_memory(*args: object) -> object:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(checker.references, "compute", out_of_memory)
    assert not _hand(checker, writer, 0, _right(0))
    check = checker.finish(timed=False)
    assert check.verdict == Verdict.CRASHED and not check.failed_check
    assert "out of device memory" in check.harness_error and CONFIGS[0].name in check.harness_error

    def broken(*args: object) -> object:
        raise ValueError("a bug")

    monkeypatch.setattr(checker.references, "compute", broken)
    writer = _begin(checker)
    assert not _hand(checker, writer, 0, _right(0))
    check = checker.finish(timed=False)
    assert check.verdict == Verdict.CRASHED and check.harness_error == "" and "ValueError" in check.error


def test_references_are_computed_once_per_session_salt(checker: Checker) -> None:
    for _ in range(3):
        writer = _begin(checker)
        assert all(_hand(checker, writer, i, _right(i)) for i in range(len(CONFIGS)))
        assert checker.finish(timed=False).verdict == Verdict.PASSED
    assert checker.cache.hits == 2 * len(CONFIGS)


def test_low_memory_mode_judges_before_answering_and_keeps_nothing(checker: Checker) -> None:
    """Asked for (or on a GPU with little free memory), an evaluation's outputs are judged in the staging buffer before
    the answer and no reference is kept: the checker never holds a config's tensors while the worker runs the next."""
    writer = _begin(checker)
    assert all(_hand(checker, writer, i, _right(i)) for i in range(len(CONFIGS))) and checker.cache.entries
    assert checker.finish(timed=False).environment["memory_mode"] == "normal"
    writer = _begin(checker, low_memory=True)
    assert checker.low_memory and not checker.cache.entries  # the last evaluation's references are given back
    wrong = _right(0) * 1.01
    answer = checker.check(_handoff(checker, writer, 0, wrong))
    assert not answer.ok and CONFIGS[0].name in answer.message  # judged before the answer: no pending judgement
    assert checker.pending is None and not checker.cache.entries
    check = checker.finish(timed=False)
    assert check.verdict == Verdict.INCORRECT and check.environment["memory_mode"] == "low"
    writer = _begin(checker, low_memory=True)
    assert all(_hand(checker, writer, i, _right(i)) for i in range(len(CONFIGS)))
    assert checker.finish(timed=False).verdict == Verdict.PASSED and not checker.cache.entries


def test_little_free_device_memory_enters_low_memory_mode(checker: Checker, monkeypatch) -> None:
    monkeypatch.setattr(checker, "_available_bytes", lambda: checker_mod.LOW_MEMORY_BELOW - 1)
    writer = _begin(checker)
    assert checker.low_memory
    assert all(_hand(checker, writer, i, _right(i)) for i in range(len(CONFIGS))) and not checker.cache.entries
    monkeypatch.setattr(checker, "_available_bytes", lambda: checker_mod.LOW_MEMORY_BELOW)
    _begin(checker)
    assert not checker.low_memory


def test_missing_nan_strided_and_forged_outputs_fail(checker: Checker) -> None:
    writer = _begin(checker)
    for i in range(len(CONFIGS)):
        if i != 5:
            assert _hand(checker, writer, i, _right(i))
    check = checker.finish(timed=False)
    assert check.verdict == Verdict.INCORRECT and "no output" in check.error and not check.failed_check

    cases = [
        (
            {},
            lambda out: out.masked_fill(
                torch.zeros_like(out, dtype=torch.bool).index_fill_(0, torch.tensor([0]), True), float("nan")
            ),
            "non-finite",
        ),
        ({"strides": None}, lambda out: out, "strides"),
        ({"input_seed": None}, lambda out: out, "forged_record"),
        ({"digest": "0" * 32}, lambda out: out, "input_digest"),
        ({"offsets": [1 << 40]}, lambda out: out, "forged_record"),
        ({"generation": 99}, lambda out: out, "forged_record"),
        ({"config": "not_a_config"}, lambda out: out, "forged_record"),
    ]
    for change, alter, expect in cases:
        writer = _begin(checker)
        output = alter(_right(1))
        seed = salted_seed(CONFIGS[1].seed, SALT)
        if "strides" in change:
            change = {"strides": [[1, output.shape[0]]]}  # claimed column-major
        if "input_seed" in change:
            change = {"input_seed": seed + 1}  # a seed the evaluation never used
        assert not _hand(checker, writer, 1, output, **change)
        check = checker.finish(timed=False)
        text = (check.rejection.rule if check.rejection else "") + check.error
        assert expect in text, (change, text)


def test_timed_outputs_use_the_evaluations_own_salt(checker: Checker) -> None:
    writer = _begin(checker)
    bench = TASK.benchmark_configs("cpu")[0]
    seed = salted_seed(bench.seed, SALT + 1)  # the bench salt given at begin
    inputs = TASK.make_inputs(bench.model_copy(update={"seed": seed + 13}), "cpu")
    output = torch.softmax(inputs[0], dim=-1)
    offsets = writer.stage([output])
    handoff = Handoff(
        kind="bench",
        config_index=0,
        config=bench.name,
        prepare_seed=seed,
        input_seed=seed + 13,
        digest=input_digest(inputs),
        shapes=[list(output.shape)],
        dtypes=[str(output.dtype)],
        strides=[list(output.stride())],
        offsets=offsets,
        generation=writer.handle.generation,
    )
    assert checker.check(handoff).ok
    wrong_salt = handoff.model_copy(update={"prepare_seed": salted_seed(bench.seed, SALT)})
    assert not checker.check(wrong_salt).ok


def test_inputs_are_deterministic_in_the_seed_and_the_salt_changes_them() -> None:
    config = CONFIGS[1]
    a = TASK.make_inputs(config.model_copy(update={"seed": salted_seed(config.seed, 1)}), "cpu")
    b = TASK.make_inputs(config.model_copy(update={"seed": salted_seed(config.seed, 1)}), "cpu")
    c = TASK.make_inputs(config.model_copy(update={"seed": salted_seed(config.seed, 2)}), "cpu")
    assert input_digest(a) == input_digest(b) != input_digest(c)
    assert salted_seed(7, 1) != salted_seed(7, 2) and 0 <= salted_seed(7, 1) < 2**31


def test_the_worker_never_computes_the_reference(tmp_path: Path, checker: Checker) -> None:
    source = inspect.getsource(worker_mod)
    assert ".expected(" not in source and ".reference(" not in source

    class NoReference(SoftmaxTask):
        def expected(self, config, inputs):  # type: ignore[no-untyped-def]
            raise AssertionError("the worker computed the reference")

        reference = expected  # type: ignore[assignment]

    candidate = tmp_path / "candidate.py"
    candidate.write_text("import torch\n\ndef kernel(x):\n    return torch.softmax(x, dim=-1)\n")
    _begin(checker)
    request = WorkerRequest(
        task="softmax",
        device="cpu",
        entry_point="kernel",
        candidate_path=str(candidate),
        result_path=str(tmp_path / "r.json"),
        salt=SALT,
        staging=checker.staging.handle,
    )
    channel = LoopbackChannel(checker)
    result = Worker(request, channel, task=NoReference()).run()
    assert result.verdict == Verdict.PASSED, result.error
    assert len(channel.handoffs) == len(CONFIGS) and channel.phases == ["load", "run"]
    assert checker.finish(timed=False).verdict == Verdict.PASSED


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


def test_a_new_thread_that_reuses_an_ended_threads_id_is_still_new() -> None:
    """Thread ids are reused once a thread ends: a thread counts as the library's or as already running only as the
    same thread object, never by its id."""

    class Seen(Guard):  # the guard is slotted and its class watched: a subclass stands in for what it sees running
        running: dict | None = None

        def _running(self) -> dict:
            return Seen.running if Seen.running is not None else super()._running()

    guard = Seen()
    library = threading.Thread(target=lambda: None, name="library")
    guard.threads.owned.add(library)
    ident = next(iter(guard.baseline_threads))
    candidate = threading.Thread(target=lambda: None, name="candidate")
    Seen.running = {**guard.baseline_threads, ident: candidate}
    with pytest.raises(CandidateFailure) as caught:
        guard.verify("a reused id")
    assert caught.value.rejection.rule == "thread_injection"
    Seen.running[ident] = library  # the library's own thread object is allowed wherever its id came from
    guard.verify("the library's thread")


def test_the_checker_judges_fresh_inputs_only_on_seeds_it_issued() -> None:
    """Fresh inputs and re-randomised activations of timed calls come from seeds the checker draws when the worker
    needs them: an output on any other seed of those ranges (one the candidate could have computed in advance) is a
    forged record."""
    from ksearch.contracts.exchange import CheckerCommand, Handoff
    from ksearch.tools.evaluator.shared.seeds import AUDIT_BASE, FRESH_SET_BASE, input_set_seed, salted_seed

    checker = Checker("cpu")
    checker.handle(CheckerCommand(op="begin", task="softmax", device="cpu", salt=1, bench_salt=2))
    issued = checker.handle(CheckerCommand(op="seed", config_index=0, kind="input"))
    activation = checker.handle(CheckerCommand(op="seed", config_index=0, kind="activation"))
    config = checker.current.task.benchmark_configs("cpu")[0]
    base = salted_seed(config.seed, 2)
    assert issued["ok"] and (issued["seed"] - base) // 13 >= FRESH_SET_BASE
    assert (activation["seed"] - base) // 13 >= AUDIT_BASE
    guessed = input_set_seed(base, FRESH_SET_BASE + 7)

    def handoff(seed: int, activation_seed: int | None = None) -> dict:
        record = Handoff(
            kind="audit" if activation_seed else "bench",
            config_index=0,
            config=config.name,
            prepare_seed=base,
            input_seed=seed,
            activation_seed=activation_seed,
            digest="x",
            shapes=[[1]],
            dtypes=["torch.float32"],
            offsets=[0],
        )
        return checker.handle(CheckerCommand(op="handoff", handoff=record))

    refused = handoff(guessed if guessed != issued["seed"] else guessed + 13)
    assert not refused["ok"] and "did not use" in refused["message"]
    checker.staging.release()


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads a process's environment from /proc")
def test_the_checkers_openmp_threads_sleep_when_its_work_ends() -> None:
    """Spinning OpenMP threads of the checker took the worker's CPU for the timed call right after each audit (a 22 us
    kernel's call read 3.4 ms there on a 2-core machine). Read once the checker is ready: ``Popen`` returns when the
    exec closes its error pipe, before the kernel has set the new image's environment, and /proc reads it empty
    until then (CI of 7e388e4 read ``[b'']``)."""
    from ksearch.tools.evaluator import EvaluatorSession

    with EvaluatorSession("cpu", prestart=False) as session:
        assert session.checker is not None
        session.checker.wait_ready(60)
        environ = Path(f"/proc/{session.checker.process.pid}/environ").read_bytes().split(b"\0")
    assert b"OMP_WAIT_POLICY=PASSIVE" in environ


def test_the_checker_gives_its_free_memory_back_once_correctness_is_judged(checker: Checker, monkeypatch) -> None:
    """Before the worker times (it settles first), the checker's allocator gives back what the correctness phase
    left (copies of outputs, references: four inputs' worth of a 6.4 GB KernelBench problem), once per evaluation,
    so the worker's rotated input sets fit beside it."""
    given_back: list[bool] = []
    monkeypatch.setattr(checker.references, "release_memory", lambda *, collect=True: given_back.append(collect))
    writer = _begin(checker)
    settle = CheckerCommand(op="settle")
    for index in range(len(CONFIGS)):
        assert _hand(checker, writer, index, _right(index))
        assert checker.handle(settle)["ok"]
        assert given_back == ([False] if index == len(CONFIGS) - 1 else []), index
    assert checker.handle(settle)["ok"] and given_back == [False]  # once: timing's settles keep what they use
