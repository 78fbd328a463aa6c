"""The worker's side of the timing loops on the CPU: audits handed to a real (in-process) checker, mutation, lazy
outputs and replayed outputs caught. (Device events are replaced by a wall-clock stand-in; on a GPU the same code
runs with CUDA events.)"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import torch

from ksearch.contracts.evaluation import Verdict
from ksearch.contracts.exchange import CheckerCommand, WorkerRequest
from ksearch.tools import timing
from ksearch.tools.evaluator.checker.main import Checker
from ksearch.tools.evaluator.shared.staging import StagingWriter
from ksearch.tools.evaluator.worker.guard import CandidateFailure, Guard
from ksearch.tools.evaluator.worker.main import Worker
from ksearch.tools.evaluator.worker.timing_runner import ROTATION_SHARE, WorkerTimingRunner
from tests.tools.loopback import LoopbackChannel

SALT = 12345


class WallEvent:
    def __init__(self, enable_timing: bool = True) -> None:
        self.t = 0.0


def _record(event: WallEvent) -> None:
    event.t = time.perf_counter()


def _elapsed(start: WallEvent, end: WallEvent) -> float:
    return (end.t - start.t) * 1e3


@pytest.fixture
def checker() -> Checker:
    checker = Checker("cpu")
    checker.handle(CheckerCommand(op="begin", task="softmax", device="cpu", salt=SALT, bench_salt=SALT))
    yield checker
    checker.staging.release()


def _runner(checker: Checker, fn: Any) -> tuple[Worker, WorkerTimingRunner, LoopbackChannel]:
    request = WorkerRequest(
        task="softmax",
        device="cpu",
        entry_point="kernel",
        candidate_path="",
        result_path="",
        timing=True,
        salt=SALT,
        bench_salt=SALT,
        flush_l2=False,
        staging=checker.staging.handle,
    )
    channel = LoopbackChannel(checker)
    worker = Worker(request, channel)
    worker.guard = Guard()
    worker.staging = StagingWriter(checker.staging.handle)
    config = worker.salted(worker.task.benchmark_configs("cpu")[0], SALT)
    runner = WorkerTimingRunner(worker, fn, config, 0)
    runner._event_cls, runner._record, runner._elapsed = WallEvent, _record, _elapsed  # noqa: SLF001 - CUDA events
    return worker, runner, channel


def _short() -> timing.Robust:
    return timing.Robust(warmup_s=0.01, time_cap_s=0.05, min_samples=8)


def test_robust_blocks_and_the_audits_in_the_loop_go_to_the_checker(checker: Checker) -> None:
    _, runner, channel = _runner(checker, lambda x: torch.softmax(x, dim=-1))
    run = _short().run(runner, flush_l2=False)
    kinds = [h.kind for h in channel.handoffs]
    assert len(run.samples_ms) >= 8 and kinds.count("audit") >= 2
    assert len({h.activation_seed for h in channel.handoffs if h.kind == "audit"}) >= 2  # two re-randomisations
    for h in channel.handoffs:
        index = (h.input_seed - runner.config.seed) // timing.SEED_STRIDE
        assert h.input_seed == runner.config.seed + timing.SEED_STRIDE * index and 0 <= index < 4
    assert checker.finish(timed=False).outputs_checked == len(channel.handoffs)


def test_a_call_that_mutates_its_inputs_is_caught_at_the_next_audit(checker: Checker) -> None:
    def mutating(x: torch.Tensor) -> torch.Tensor:
        out = torch.softmax(x, dim=-1)
        x.mul_(1.0001)
        return out

    _, runner, _ = _runner(checker, mutating)
    with pytest.raises(CandidateFailure) as failure:
        _short().run(runner, flush_l2=False)
    assert failure.value.rejection is not None and failure.value.rejection.rule == "input_mutation"


def test_every_timed_call_is_checked_after_it_returns(checker: Checker) -> None:
    """A lazy tensor subclass is refused on the call that returns it, audited or not."""

    class Lazy(torch.Tensor):
        pass

    calls = []

    def lazy_after_a_while(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        out = torch.softmax(x, dim=-1)
        return out.as_subclass(Lazy) if len(calls) == 7 else out

    _, runner, _ = _runner(checker, lazy_after_a_while)
    with pytest.raises(CandidateFailure) as failure:
        _short().run(runner, flush_l2=False)
    assert failure.value.rejection is not None and failure.value.rejection.rule == "lazy_output"
    assert len(calls) == 7


@pytest.mark.parametrize("method", ["gpumode-benchmark", "robust"])
def test_an_output_replayed_from_an_earlier_call_is_caught_in_the_loop(checker: Checker, method: str) -> None:
    """A kernel that keeps its first output by the input object and returns it again passes every timed audit of
    the same inputs, and is caught by a timed call on inputs re-randomised in place. (Kept ON the input, as an
    attribute, it is refused sooner: ``tensor_attributes``.)"""

    replayed: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def replaying(x: torch.Tensor) -> torch.Tensor:
        if id(x) not in replayed:  # the input kept alive beside its output: its id stays its own
            replayed[id(x)] = (x, torch.softmax(x, dim=-1))
        return replayed[id(x)][1]

    _, runner, channel = _runner(checker, replaying)
    chosen = _short() if method == "robust" else timing.get_method(method)
    with pytest.raises(CandidateFailure) as failure:
        chosen.run(runner, flush_l2=False)
    assert failure.value.verdict == Verdict.INCORRECT
    assert channel.handoffs[-1].kind == "audit" and "re-randomised" in checker.finish(timed=False).error


def test_gpumode_benchmark_hands_off_the_first_output_then_re_randomised_and_last_outputs(checker: Checker) -> None:
    _, runner, channel = _runner(checker, lambda x: torch.softmax(x, dim=-1))
    run = timing.get_method("gpumode-benchmark").run(runner, flush_l2=False)
    kinds = [h.kind for h in channel.handoffs]
    assert kinds[0] == "bench" and kinds.count("audit") >= 2 and len(run.samples_ms) >= 3
    assert all(h.input_seed == runner.config.seed for h in channel.handoffs)  # the one data object, as upstream
    assert checker.finish(timed=False).outputs_checked == len(kinds)


def test_re_randomised_inputs_keep_their_identity_and_version_counter(checker: Checker) -> None:
    """The candidate can tell a re-randomised call from another only by reading the values: the same tensor objects
    through the same argument object, and an unchanged version counter."""
    seen: list[tuple[int, int]] = []

    def watching(x: torch.Tensor) -> torch.Tensor:
        seen.append((id(x), x._version))
        return torch.softmax(x, dim=-1)

    _, runner, channel = _runner(checker, watching)
    timing.get_method("gpumode-benchmark").run(runner, flush_l2=False)
    assert len(set(seen)) == 1 and sum(h.kind == "audit" for h in channel.handoffs) >= 2


def test_each_timed_window_reaches_the_parent_with_its_samples(checker: Checker) -> None:
    _, runner, channel = _runner(checker, lambda x: torch.softmax(x, dim=-1))
    run = timing.get_method("gpumode-benchmark").run(runner, flush_l2=False)
    messages = [json.loads(m) for m in channel.sent if '"go"' in m or '"timed"' in m]
    assert [m["op"] for m in messages] == ["go", "timed"] * (len(messages) // 2)  # each window closed before the next
    nulls = {i + 1 for i, m in enumerate(messages) if m["op"] == "go" and m.get("null") is True}
    opened = [m for i, m in enumerate(messages) if m["op"] == "go" and i + 1 not in nulls]
    timed = [m["samples"] for i, m in enumerate(messages) if m["op"] == "timed" and i not in nulls]
    assert len(opened) == len(timed) == len(run.samples_ms) and [x for w in timed for x in w] == run.samples_ms
    assert len(nulls) >= 3  # the harness's own windows around no call, never samples of the score


def test_gpumode_checks_every_timed_output_on_fresh_inputs(checker: Checker) -> None:
    calls = []

    def wrong_when_timed(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        out = torch.softmax(x, dim=-1)
        return out * 1.01 if len(calls) == 3 else out

    _, runner, channel = _runner(checker, wrong_when_timed)
    with pytest.raises(CandidateFailure):
        timing.get_method("gpumode").run(runner, flush_l2=False)
    seeds = [h.input_seed for h in channel.handoffs]
    assert seeds[0] == runner.config.seed and len(set(seeds)) == len(seeds)  # fresh inputs every repeat
    issued = {seed for _, seed in checker.current.issued} if checker.current else set()
    assert set(seeds[1:]) <= issued  # drawn by the checker when each repeat needed them
    assert "timed output" in checker.finish(timed=False).error


def test_a_timing_handoff_waits_for_its_answer_without_sleeping() -> None:
    """Upstream's benchmark process never sleeps between a shape's checked call and its timed loop; a worker that
    slept while the checker judged would start the loop on a CPU back from idle (slower launches on cloud VMs)."""
    import os
    import resource
    import subprocess

    from ksearch.tools.evaluator.worker.channel import spin_until_readable

    read_end, write_end = os.pipe()
    try:
        # Another process answers (a thread of this one would make the spinning thread wait for the GIL).
        writer = subprocess.Popen(["sh", "-c", "sleep 0.3; echo answer"], stdout=write_end)
        started = time.monotonic()
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
        spin_until_readable(read_end, limit_s=5.0)
        slept = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - before
        waited = time.monotonic() - started
        writer.wait()
        assert 0.1 < waited < 4.0
        assert slept == 0  # a voluntary context switch is a sleep
        assert os.read(read_end, 100) == b"answer\n"
        started = time.monotonic()
        spin_until_readable(read_end, limit_s=0.1)  # nothing comes: the caller's blocking read takes over
        assert time.monotonic() - started < 1.0
    finally:
        os.close(read_end)
        os.close(write_end)


def test_compare_times_both_candidates_in_alternating_runs_on_the_same_inputs(checker: Checker) -> None:
    """The compare mode (``worker_modes.run_compare``) on the CPU's wall-clock events: per benchmark config, the
    rounds alternate incumbent and challenger (A B B A ...), every run's windows are announced with its run index, and
    the challenger, doing the same work twice, reads slower."""
    from types import SimpleNamespace

    def softmax(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)

    def twice(x: torch.Tensor) -> torch.Tensor:
        softmax(x)
        return softmax(x)

    request = WorkerRequest(
        task="softmax",
        device="cpu",
        entry_point="kernel",
        candidate_path="",
        result_path="",
        mode="compare",
        rounds=4,
        time_cap_s=0.2,
        min_samples=8,
        flush_l2=False,
        salt=SALT,
        bench_salt=SALT,
    )
    channel = LoopbackChannel(checker)
    worker = Worker(request, channel)
    worker.guard = Guard()
    worker.compare(SimpleNamespace(kernel=softmax), SimpleNamespace(kernel=twice))
    configs = worker.task.benchmark_configs("cpu")
    assert worker.configs_total == worker.configs_passed == len(configs)
    assert [c.config for c in worker.comparison] == [c.name for c in configs]
    for comparison in worker.comparison:
        assert len(comparison.incumbent_ms) == len(comparison.challenger_ms) == 4
        assert all(ms > 0 for ms in comparison.incumbent_ms + comparison.challenger_ms)
    runs: dict[int, list[int]] = {}
    ends: dict[int, list[tuple[int, int]]] = {}
    for message in map(json.loads, channel.sent):
        if message.get("op") == "go":
            runs.setdefault(message["config"], []).append(message["run"])
        elif message.get("op") == "ran":  # each run ends with the harness's count of its windows
            ends.setdefault(message["config"], []).append((message["run"], message["windows"]))
            assert runs[message["config"]][-1] == message["run"]  # right after the run's last window
    for config, indices in runs.items():  # 4 rounds of two runs per config, in order
        assert sorted(set(indices)) == list(range(8)) and indices == sorted(indices)
        assert ends[config] == [(run, indices.count(run)) for run in range(8)]
    assert not channel.handoffs  # unaudited: both were checked before they were compared


def test_the_worker_does_its_own_work_while_the_checker_prepares_and_reads_the_answer_even_if_it_fails(
    checker: Checker,
) -> None:
    """``settle(meanwhile=...)``: the new values' digest is taken after the settle request is sent and before its
    answer is read (the checker prepares the audit meanwhile: no time of the loop's); a failure there still reads the
    answer, so the next request is not answered with this one's."""
    worker, _, channel = _runner(checker, lambda x: x)
    order: list[str] = []
    real_request, real_answer = channel.request, channel.answer
    channel.request = lambda message: (order.append(message["op"]), real_request(message))[1]
    channel.answer = lambda *, spin=False: (order.append("answer"), real_answer(spin=spin))[1]
    worker.settle(meanwhile=lambda: order.append("digest"))
    assert order == ["settle", "digest", "answer"]

    def failing() -> None:
        raise RuntimeError("a device error")

    with pytest.raises(RuntimeError):
        worker.settle(meanwhile=failing)
    assert order[3:] == ["settle", "answer"] and not channel.answers_due


def test_an_attribute_set_on_an_input_is_refused_at_the_next_audit(checker: Checker) -> None:
    """issue 59: the harness reads inputs by type only, and an input that gained attributes (a method the digest
    would have called) is refused with a rule of its own."""

    def tagging(x: torch.Tensor) -> torch.Tensor:
        x.detach = lambda: torch.zeros_like(x)  # type: ignore[method-assign]
        return torch.softmax(x, dim=-1)

    _, runner, _ = _runner(checker, tagging)
    with pytest.raises(CandidateFailure) as failure:
        _short().run(runner, flush_l2=False)
    assert failure.value.rejection is not None and failure.value.rejection.rule == "tensor_attributes"


def test_a_method_set_on_the_output_is_never_run_by_the_harness(checker: Checker) -> None:
    """issue 59: the staging copy, the deferred-work check and the handoff record read the output by type; a
    closure set on it never runs (and the output is refused with a rule of its own)."""
    ran: list[str] = []

    def hooked(x: torch.Tensor) -> torch.Tensor:
        out = torch.softmax(x, dim=-1)
        for name in ("detach", "numel", "element_size", "stride", "untyped_storage", "data_ptr", "clone", "to"):
            setattr(out, name, lambda *args, _n=name, **kwargs: ran.append(_n))
        return out

    _, runner, _ = _runner(checker, hooked)
    with pytest.raises(CandidateFailure) as failure:
        _short().run(runner, flush_l2=False)
    assert failure.value.rejection is not None and failure.value.rejection.rule == "tensor_attributes"
    assert ran == []


@pytest.mark.parametrize("method", ["gpumode-benchmark", "robust", "confirm", "flashinfer"])
def test_audit_inputs_are_made_by_the_checker_never_by_the_task_in_the_worker(checker: Checker, method: str) -> None:
    """issue 59: a wrapper of the task's ``make_inputs`` in the candidate's process showed the kernel each audit's
    values before the audited call. The audits' activations and the fresh sets of the leaderboard loops are made by
    the checker and copied in: the worker's generator sees only the sets the loop reuses, whose values the kernel
    gets anyway."""
    worker, runner, channel = _runner(checker, lambda x: torch.softmax(x, dim=-1))
    seen: list[int] = []
    real = worker.task.make_inputs

    def watching(config: Any, device: str) -> list[Any]:
        seen.append(config.seed)
        return real(config, device)

    worker.task.make_inputs = watching  # type: ignore[method-assign]
    chosen = _short() if method == "robust" else timing.get_method(method)
    chosen.run(runner, flush_l2=False)
    audited = {h.activation_seed for h in channel.handoffs if h.activation_seed is not None}
    fresh = {h.input_seed for h in channel.handoffs if h.kind == "bench"} - {runner._seed(i) for i in range(4)}  # noqa: SLF001
    assert audited or fresh, "the loop audited nothing"
    assert not (audited | fresh) & set(seen), (
        f"the worker's generator made the inputs of {(audited | fresh) & set(seen)}"
    )
    assert checker.current is not None and checker.current.failure is None and checker.current.audits + len(fresh)


@pytest.mark.parametrize("method", ["gpumode-benchmark", "robust", "confirm"])
def test_in_timing_every_request_to_the_checker_follows_a_device_synchronisation(
    checker: Checker, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 59: the parent credits the time a worker waits for the checker; no work of the worker's may be left on
    the device during that wait, so each request in timing is sent right after a synchronisation."""
    worker, runner, channel = _runner(checker, lambda x: torch.softmax(x, dim=-1))
    worker.phase = "timing"
    order: list[str] = []
    real_request = channel.request
    channel.request = lambda message: (order.append(str(message["op"])), real_request(message))[1]
    monkeypatch.setattr(Worker, "synchronize", lambda self: order.append("sync"))
    worker.guard = Guard()  # its references taken with the recording synchronisation in place
    chosen = _short() if method == "robust" else timing.get_method(method)
    chosen.run(runner, flush_l2=False)
    requests = [i for i, op in enumerate(order) if op != "sync"]
    assert requests and all(order[i - 1] == "sync" for i in requests), order[:40]


def test_compare_hands_both_candidates_outputs_to_the_checker_and_finds_a_replay(checker: Checker) -> None:
    """issue 59: with the checker's staging buffer, compare audits like robust timing: each block's last output of
    either candidate is handed off, blocks end on re-randomised activations, and a challenger replaying an output
    where nothing used to be checked is found."""
    from types import SimpleNamespace

    def softmax(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)

    replayed: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def replaying(x: torch.Tensor) -> torch.Tensor:
        if id(x) not in replayed:
            replayed[id(x)] = (x, torch.softmax(x, dim=-1))
        return replayed[id(x)][1]

    def compare(challenger: Any) -> tuple[Worker, LoopbackChannel]:
        request = WorkerRequest(
            task="softmax",
            device="cpu",
            entry_point="kernel",
            candidate_path="",
            result_path="",
            mode="compare",
            rounds=2,
            time_cap_s=0.2,
            min_samples=8,
            flush_l2=False,
            salt=SALT,
            bench_salt=SALT,
            staging=checker.staging.handle,
        )
        channel = LoopbackChannel(checker)
        worker = Worker(request, channel)
        worker.guard = Guard()
        worker.staging = StagingWriter(checker.staging.handle)
        worker.compare(SimpleNamespace(kernel=softmax), SimpleNamespace(kernel=challenger))
        return worker, channel

    worker, channel = compare(softmax)
    assert {h.kind for h in channel.handoffs} == {"bench", "audit"}
    assert checker.current is not None and checker.current.failure is None
    with pytest.raises(CandidateFailure) as failure:
        compare(replaying)
    assert failure.value.verdict == Verdict.INCORRECT


def test_a_dispatch_mode_left_active_is_refused(checker: Checker) -> None:
    """A torch function mode entered and not left would see every torch call the harness makes (its digests, its
    copies): the guard refuses it after the call that left it."""
    from torch.overrides import TorchFunctionMode

    class Watching(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            return func(*args, **(kwargs or {}))

    modes: list[Any] = []

    def leaving_a_mode(x: torch.Tensor) -> torch.Tensor:
        if not modes:
            modes.append(Watching())
            modes[0].__enter__()
        return torch.softmax(x, dim=-1)

    _, runner, _ = _runner(checker, leaving_a_mode)
    try:
        with pytest.raises(CandidateFailure) as failure:
            _short().run(runner, flush_l2=False)
    finally:
        modes[0].__exit__(None, None, None)
    assert failure.value.rejection is not None and failure.value.rejection.rule == "tensor_subclass"


def test_the_markers_torch_sets_on_tensors_pass_the_attribute_rule(checker: Checker) -> None:
    """``torch.compile(dynamic=True)`` marks its outputs (``_dynamo_propagated_dynamic_indices``) and
    ``torch._dynamo.mark_dynamic`` the tensor it is given: attributes that shadow no member of ``torch.Tensor`` are
    torch's own and pass; only a method or property set on a tensor is ``tensor_attributes`` (a false rejection of
    the honest corpus's torch.compile kernels otherwise)."""

    def marking(x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.mark_dynamic(x, 0)
        out = torch.softmax(x, dim=-1)
        out._dynamo_propagated_dynamic_indices = {0}  # type: ignore[attr-defined]
        return out

    _, runner, _ = _runner(checker, marking)
    _short().run(runner, flush_l2=False)
    assert checker.current is not None and checker.current.failure is None


def test_the_rotated_sets_are_those_that_fit_a_quarter_of_the_device(checker: Checker) -> None:
    """Judged by set 0's size against the GPU's memory as read before the candidate was imported (the CPU rotates
    every set: no device memory to run out of)."""
    worker, runner, _ = _runner(checker, lambda x: torch.softmax(x, dim=-1))
    assert worker.device_bytes is None and runner.sets_that_fit(4) == 4
    nbytes = sum(x.numel() * x.element_size() for x in runner.call_on(0).inputs if isinstance(x, torch.Tensor))
    for device_sets, kept in ((100, 4), (3, 3), (0.5, 1)):
        worker.device_bytes = int(device_sets * nbytes / ROTATION_SHARE)
        assert runner.sets_that_fit(4) == kept, device_sets
