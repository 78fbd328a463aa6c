"""Audits judged at sampled positions: TriMul's reference at sampled rows and columns agrees with the whole reference,
and the checker catches an output replayed onto re-randomised activations with it as with the whole output."""

from __future__ import annotations

import pytest
import torch

from ksearch.contracts.evaluation import Verdict
from ksearch.contracts.exchange import CheckerCommand, Handoff
from ksearch.tasks.trimul import AUDIT_SAMPLE_ROWS, TrimulTask, _config
from ksearch.tools.evaluator.checker import main as checker_mod
from ksearch.tools.evaluator.checker.main import Checker
from ksearch.tools.evaluator.shared.seeds import input_digest, salted_seed
from ksearch.tools.evaluator.shared.staging import StagingWriter

TASK = TrimulTask()


@pytest.mark.parametrize(
    ("n", "b", "c", "nomask", "distribution"),
    [(64, 2, 32, False, "cauchy"), (48, 1, 16, True, "normal"), (16, 1, 32, False, "normal")],
)
def test_the_sampled_reference_is_the_whole_reference_at_its_positions(n, b, c, nomask, distribution) -> None:
    config = _config("probe", n, b, c, 7, nomask, distribution)
    inputs = TASK.make_inputs(config, "cpu")
    whole = TASK.expected(config, inputs)
    sample = TASK.expected_sample(config, inputs, torch.Generator().manual_seed(11))
    count = min(n, AUDIT_SAMPLE_ROWS)
    rows, cols = sample.axes[1], sample.axes[2]
    assert sample.shape == tuple(whole.shape) and sample.positions == b * count * count * c
    assert len(set(rows.tolist())) == len(set(cols.tolist())) == count  # distinct rows and columns
    assert sample.axes[0] is None and sample.axes[3] is None
    torch.testing.assert_close(sample.values, whole[:, rows][:, :, cols], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sample.gather(whole), whole[:, rows][:, :, cols], atol=0, rtol=0)
    assert TASK.check_sample(config, whole, sample) is None
    assert TASK.check_sample(config, whole.to(torch.float16), sample) is None  # upstream's rule: any close dtype


def test_positions_depend_on_the_checkers_generator() -> None:
    config = _config("probe", 96, 1, 16, 7, False, "normal")
    inputs = TASK.make_inputs(config, "cpu")
    drawn = {
        tuple(TASK.expected_sample(config, inputs, torch.Generator().manual_seed(seed)).axes[1].tolist())
        for seed in range(4)
    }
    assert len(drawn) == 4


def test_a_replayed_or_misshapen_output_fails_at_the_sampled_positions() -> None:
    config = _config("probe", 64, 1, 32, 7, False, "normal")
    inputs = TASK.make_inputs(config, "cpu")
    other = TASK.make_inputs(config.model_copy(update={"seed": 8}), "cpu")
    replayed = TASK.expected(config, [other[0], other[1], *inputs[2:]])  # the same weights, other activations
    sample = TASK.expected_sample(config, inputs, torch.Generator().manual_seed(3))
    mismatch = TASK.check_sample(config, replayed, sample)
    assert mismatch is not None and "sampled positions" in mismatch.message
    b, i, j, c = mismatch.worst_index  # the worst element's index in the whole output, as the message says
    assert i in sample.axes[1].tolist() and j in sample.axes[2].tolist() and f"at {[b, i, j, c]}" in mismatch.message
    assert abs(float(replayed[b, i, j, c]) - float(TASK.expected(config, inputs)[b, i, j, c])) > TASK.atol
    wrong_shape = TASK.check_sample(config, replayed[:, :-1], sample)
    assert wrong_shape is not None and "shape" in wrong_shape.message
    assert "expected a torch.Tensor" in TASK.check_sample(config, (replayed,), sample).message


def _audit(
    checker: Checker,
    writer: StagingWriter,
    bench_salt: int,
    output_of: str,
    config_index: int = 1,
    nan_at: tuple[int, int] | None = None,
) -> Handoff:
    """An audit of a benchmark config (1: N = 32) on activations the checker issued, as the worker makes and stages
    it: ``output_of`` "audit" stages the right output, "set" the output of the set's own activations (a replay),
    "sparse" the right output with 16 scattered elements off by 1 (a lossy path wrong at a few elements); ``nan_at``:
    a NaN at that (row, column) of the output."""
    config = TASK.benchmark_configs("cpu")[config_index]
    base = salted_seed(config.seed, bench_salt)
    seed = checker.handle(CheckerCommand(op="seed", config_index=config_index, kind="activation"))["seed"]
    inputs = TASK.make_inputs(config.model_copy(update={"seed": base}), "cpu")
    fresh = TASK.make_inputs(config.model_copy(update={"seed": seed}), "cpu")
    audited = [fresh[0], fresh[1], *inputs[2:]]
    output = TASK.expected(config, audited if output_of != "set" else inputs)
    if output_of == "sparse":
        flat = output.view(-1)
        flat[torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(5))[:16]] += 1.0
    if nan_at is not None:
        output[0, nan_at[0], nan_at[1], 0] = float("nan")
    offsets = writer.stage([output])
    return Handoff(
        kind="audit",
        config_index=config_index,
        config=config.name,
        prepare_seed=base,
        input_seed=base,
        activation_seed=seed,
        digest=input_digest(audited),
        shapes=[list(output.shape)],
        dtypes=[str(output.dtype)],
        strides=[list(output.stride())],
        offsets=offsets,
        generation=writer.handle.generation,
    )


@pytest.fixture
def counted(monkeypatch) -> list[str]:
    """The configs of every whole reference computed (the tests' own and the checker's)."""
    whole_references: list[str] = []
    original = TrimulTask.expected

    def counting(self, config, inputs):  # noqa: ANN001, ANN202
        whole_references.append(config.name)
        return original(self, config, inputs)

    monkeypatch.setattr(TrimulTask, "expected", counting)
    return whole_references


def _begin(checker: Checker, *, sampled: bool = True) -> StagingWriter:
    assert checker.handle(
        CheckerCommand(op="begin", task="trimul", device="cpu", salt=1, bench_salt=2, sampled_audits=sampled)
    )["ok"]
    writer = StagingWriter(checker.staging.handle)
    writer.open(checker.staging.ensure(1 << 24))
    return writer


def _draw_whole(monkeypatch, draw) -> None:  # noqa: ANN001
    """The checker's draw of whole audits made by ``draw()`` (its other draws, the seeds, left to ``secrets``)."""
    real = checker_mod.secrets.randbelow
    monkeypatch.setattr(
        checker_mod.secrets, "randbelow", lambda n: draw() if n == checker_mod.WHOLE_AUDIT_ODDS else real(n)
    )


def test_a_configs_first_audit_is_checked_whole_and_later_ones_at_sampled_positions(counted, monkeypatch) -> None:
    """The first audit of each config is judged on the whole output; later ones at sampled positions, unless the
    checker's draw (1 in ``WHOLE_AUDIT_ODDS``, made after the handoff) says whole; a replay is caught either way."""
    draws = iter([1, 1, 0, 1])  # after the first audit: sampled, sampled, whole, sampled
    _draw_whole(monkeypatch, lambda: next(draws))
    checker = Checker("cpu")
    try:
        writer = _begin(checker)
        for output_of, whole, passes in (
            ("audit", True, True),
            ("audit", False, True),
            ("audit", False, True),
            ("audit", True, True),
            ("set", False, False),
        ):
            counted.clear()
            reply = checker.check(_audit(checker, writer, 2, output_of))
            assert reply.ok == passes, reply.message
            assert len(counted) == (2 if whole else 1)  # the test builds one itself
        check = checker.finish(timed=False)
        assert check.verdict == Verdict.INCORRECT
        assert "re-randomised inputs" in check.error and "sampled positions" in check.error
    finally:
        checker.staging.release()


def test_with_sampling_off_every_audit_is_checked_whole(counted) -> None:
    checker = Checker("cpu")
    try:
        writer = _begin(checker, sampled=False)
        for output_of, passes in (("audit", True), ("audit", True), ("set", False)):
            counted.clear()
            assert checker.check(_audit(checker, writer, 2, output_of)).ok == passes
            assert len(counted) == 2
        check = checker.finish(timed=False)
        assert check.verdict == Verdict.INCORRECT and "sampled positions" not in check.error
    finally:
        checker.staging.release()


def test_a_timed_path_wrong_at_a_few_elements_is_caught_by_a_whole_audit(monkeypatch) -> None:
    """A red-team finding: with every audit sampled, a repeat-call path wrong at 16 of 2,097,152 elements passed
    nearly every audit (N = 256 here: a sample is a sixty-fourth of the output, so it meets one of the 16 about one
    time in five). A config's first audit, and one in ``WHOLE_AUDIT_ODDS`` after it, are checked whole."""
    configs = TASK.benchmark_configs("cpu") + [_config("cpu_b_wide", 256, 1, 32, 381, True, "normal")]
    monkeypatch.setattr(TrimulTask, "benchmark_configs", lambda self, device: configs)
    draws = iter([0])
    _draw_whole(monkeypatch, lambda: next(draws))
    checker = Checker("cpu")
    try:
        writer = _begin(checker)
        reply = checker.check(_audit(checker, writer, 2, "sparse", config_index=2))  # the first audit: whole
        assert not reply.ok and "16 of 2097152 values outside" in reply.message, reply.message
        checker.finish(timed=False)
        writer = _begin(checker)
        assert checker.check(_audit(checker, writer, 2, "audit", config_index=2)).ok  # the first, whole and right
        reply = checker.check(_audit(checker, writer, 2, "sparse", config_index=2))  # a later one drawn whole
        assert not reply.ok and "16 of 2097152 values outside" in reply.message, reply.message
    finally:
        checker.staging.release()


def test_non_finite_values_are_swept_for_in_a_whole_audit_and_at_the_positions_of_a_sampled_one(monkeypatch) -> None:
    """The whole output's sweep for NaN and inf costs up to 2.3 ms of each audit on a GPU, so a sampled audit looks at
    its positions only (where ``check`` refuses them); the whole audits sweep the whole output."""
    configs = TASK.benchmark_configs("cpu") + [_config("cpu_b_wide", 256, 1, 32, 381, True, "normal")]
    monkeypatch.setattr(TrimulTask, "benchmark_configs", lambda self, device: configs)
    monkeypatch.setattr(checker_mod.secrets, "randbits", lambda bits: 12345)  # the sample's positions, known here
    draws = iter([1, 1, 0])  # after the first audit: sampled, sampled, whole
    _draw_whole(monkeypatch, lambda: next(draws))
    config = configs[2]
    inputs = TASK.make_inputs(config, "cpu")
    axes = TASK.expected_sample(config, inputs, torch.Generator().manual_seed(12345)).axes
    rows, cols = set(axes[1].tolist()), set(axes[2].tolist())
    outside = (min(set(range(256)) - rows), min(set(range(256)) - cols))
    inside = (min(rows), min(cols))
    checker = Checker("cpu")
    try:
        writer = _begin(checker)
        assert checker.check(_audit(checker, writer, 2, "audit", config_index=2)).ok  # the config's first: whole
        assert checker.check(_audit(checker, writer, 2, "audit", config_index=2, nan_at=outside)).ok  # sampled
        reply = checker.check(_audit(checker, writer, 2, "audit", config_index=2, nan_at=inside))  # sampled
        assert not reply.ok and "non-finite" in reply.message, reply.message
        checker.finish(timed=False)
        writer = _begin(checker)
        assert checker.check(_audit(checker, writer, 2, "audit", config_index=2)).ok
        reply = checker.check(_audit(checker, writer, 2, "audit", config_index=2, nan_at=outside))  # drawn whole
        assert not reply.ok and "non-finite" in reply.message, reply.message
    finally:
        checker.staging.release()


REPLAY = (
    TASK.reference_submission_source()
    + """

_honest = custom_kernel
_LAST = {}


def custom_kernel(data):
    x = data[0]
    if id(x) not in _LAST:  # computed once per input tensor (kept alive), replayed on every later call on it
        _LAST[id(x)] = (x, _honest(data))
    return _LAST[id(x)][1].clone()
"""
)


@pytest.mark.parametrize(
    "device", [pytest.param("cpu", marks=pytest.mark.serial), pytest.param("cuda", marks=pytest.mark.gpu)]
)
def test_a_trimul_kernel_replaying_its_output_is_caught_by_an_audit(device: str, monkeypatch) -> None:
    """End to end (the CPU's timing enabled; on a GPU, TriMul's real shapes, where a sample is a small part of the
    output): a kernel that computes once per input tensor and then replays is right on the tests (one call each) and
    on the timed set's own values, and wrong on the audits' re-randomised activations (each config's first audit is
    judged whole, later ones mostly at sampled positions). The static rules, which refuse this cache by its source
    (``output_caching``), are bypassed: the audit is the layer under test."""
    import importlib

    from ksearch.contracts.candidate import Candidate
    from ksearch.tools.evaluator import EvalRequest, evaluate

    evaluate_module = importlib.import_module("ksearch.tools.evaluator.parent.evaluate")
    monkeypatch.setattr(evaluate_module.integrity, "check_source", lambda code, **kwargs: None)
    monkeypatch.setenv("KSEARCH_CPU_TIMING", "1")
    candidate = Candidate(task="trimul", language="triton", code=REPLAY, entry_point="custom_kernel")
    evaluation = evaluate(
        EvalRequest(
            candidate=candidate, device=device, timing=True, timing_method="gpumode-benchmark", run_timeout_s=240.0
        )
    )
    assert evaluation.verdict == Verdict.INCORRECT, evaluation.summary()
    message = evaluation.mismatch.message if evaluation.mismatch else evaluation.log
    assert "re-randomised inputs" in message, message


def test_a_sampled_audit_still_checks_the_whole_outputs_layout(monkeypatch) -> None:
    """For a task that wants contiguous outputs, an audit judged at sampled positions refuses other strides as a
    whole-output check does (TriMul itself accepts any layout: it is made strict here)."""
    from ksearch.tasks.base import Task

    monkeypatch.setattr(TrimulTask, "output_strides", Task.output_strides)
    _draw_whole(monkeypatch, lambda: 1)  # every audit after the first at sampled positions
    checker = Checker("cpu")
    try:
        writer = _begin(checker)
        assert checker.check(_audit(checker, writer, 2, "audit")).ok  # the first, whole
        assert checker.check(_audit(checker, writer, 2, "audit")).ok  # sampled, contiguous
        handoff = _audit(checker, writer, 2, "audit")
        shape = handoff.shapes[0]
        claimed = [1, shape[0], shape[0] * shape[1], shape[0] * shape[1] * shape[2]]  # column-major
        reply = checker.check(handoff.model_copy(update={"strides": [claimed]}))
        assert not reply.ok and "strides" in reply.message
    finally:
        checker.staging.release()
