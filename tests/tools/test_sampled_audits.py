"""Audits judged at sampled positions: TriMul's reference at sampled rows and columns agrees with the whole reference,
and the checker catches an output replayed onto re-randomised activations with it as with the whole output."""

from __future__ import annotations

import pytest
import torch

from ksearch.contracts.evaluation import Verdict
from ksearch.contracts.exchange import CheckerCommand, Handoff
from ksearch.tasks.trimul import AUDIT_SAMPLE_ROWS, TrimulTask, _config
from ksearch.tools.evaluator.checker import Checker
from ksearch.tools.evaluator.seeds import input_digest, salted_seed
from ksearch.tools.evaluator.staging import StagingWriter

TASK = TrimulTask()


@pytest.mark.parametrize(("n", "b", "c", "nomask", "distribution"),
                         [(64, 2, 32, False, "cauchy"), (48, 1, 16, True, "normal"), (16, 1, 32, False, "normal")])  # fmt: skip
def test_the_sampled_reference_is_the_whole_reference_at_its_positions(n, b, c, nomask, distribution) -> None:
    config = _config("probe", n, b, c, 7, nomask, distribution)
    inputs = TASK.make_inputs(config, "cpu")
    whole = TASK.expected(config, inputs)
    sample = TASK.expected_sample(config, inputs, torch.Generator().manual_seed(11))
    count = min(n, AUDIT_SAMPLE_ROWS)
    rows, cols = sample.index[1].reshape(-1), sample.index[2].reshape(-1)
    assert sample.shape == tuple(whole.shape) and sample.positions == b * count * count * c
    assert len(set(rows.tolist())) == len(set(cols.tolist())) == count  # distinct rows and columns
    torch.testing.assert_close(sample.values, whole[sample.index], atol=1e-5, rtol=1e-5)
    assert TASK.check_sample(config, whole, sample) is None
    assert TASK.check_sample(config, whole.to(torch.float16), sample) is None  # upstream's rule: any close dtype


def test_positions_depend_on_the_checkers_generator() -> None:
    config = _config("probe", 96, 1, 16, 7, False, "normal")
    inputs = TASK.make_inputs(config, "cpu")
    drawn = {tuple(TASK.expected_sample(config, inputs, torch.Generator().manual_seed(seed)).index[1].reshape(-1).tolist())
             for seed in range(4)}  # fmt: skip
    assert len(drawn) == 4


def test_a_replayed_or_misshapen_output_fails_at_the_sampled_positions() -> None:
    config = _config("probe", 64, 1, 32, 7, False, "normal")
    inputs = TASK.make_inputs(config, "cpu")
    other = TASK.make_inputs(config.model_copy(update={"seed": 8}), "cpu")
    replayed = TASK.expected(config, [other[0], other[1], *inputs[2:]])  # the same weights, other activations
    sample = TASK.expected_sample(config, inputs, torch.Generator().manual_seed(3))
    mismatch = TASK.check_sample(config, replayed, sample)
    assert mismatch is not None and "sampled positions" in mismatch.message and mismatch.worst_index == []
    wrong_shape = TASK.check_sample(config, replayed[:, :-1], sample)
    assert wrong_shape is not None and "shape" in wrong_shape.message
    assert "expected a torch.Tensor" in TASK.check_sample(config, (replayed,), sample).message


def _audit(checker: Checker, writer: StagingWriter, bench_salt: int, output_of: str) -> Handoff:
    """An audit of benchmark config 1 (N = 32) on activations the checker issued, as the worker makes and stages it:
    ``output_of`` "audit" stages the right output, "set" the output of the set's own activations (a replay)."""
    config = TASK.benchmark_configs("cpu")[1]
    base = salted_seed(config.seed, bench_salt)
    seed = checker.handle(CheckerCommand(op="seed", config_index=1, kind="activation"))["seed"]
    inputs = TASK.make_inputs(config.model_copy(update={"seed": base}), "cpu")
    fresh = TASK.make_inputs(config.model_copy(update={"seed": seed}), "cpu")
    audited = [fresh[0], fresh[1], *inputs[2:]]
    output = TASK.expected(config, audited if output_of == "audit" else inputs)
    offsets = writer.stage([output])
    return Handoff(kind="audit", config_index=1, config=config.name, prepare_seed=base, input_seed=base,
                   activation_seed=seed, digest=input_digest(audited), shapes=[list(output.shape)],
                   dtypes=[str(output.dtype)], strides=[list(output.stride())], offsets=offsets,
                   generation=writer.handle.generation)  # fmt: skip


@pytest.mark.parametrize("sampled", [True, False])
def test_the_checker_judges_audits_at_sampled_positions_and_still_catches_a_replay(sampled: bool, monkeypatch) -> None:
    whole_references = []
    original = TrimulTask.expected

    def counted(self, config, inputs):
        whole_references.append(config.name)
        return original(self, config, inputs)

    monkeypatch.setattr(TrimulTask, "expected", counted)
    checker = Checker("cpu")
    try:
        for output_of, passes in (("audit", True), ("set", False)):
            answer = checker.handle(CheckerCommand(op="begin", task="trimul", device="cpu", salt=1, bench_salt=2,
                                                   sampled_audits=sampled))  # fmt: skip
            writer = StagingWriter(checker.staging.handle)
            writer.open(checker.staging.ensure(1 << 20))
            assert answer["ok"]
            whole_references.clear()
            reply = checker.check(_audit(checker, writer, 2, output_of))
            assert reply.ok == passes, reply.message
            # The whole reference is computed for an audit only when sampling is off (the test builds its own three).
            assert len(whole_references) == (1 if sampled else 2)
            check = checker.finish(timed=False)
            if not passes:
                assert check.verdict == Verdict.INCORRECT
                assert "re-randomised inputs" in check.error
                assert ("sampled positions" in check.error) == sampled
    finally:
        checker.staging.release()


REPLAY = '''
import torch
import torch.nn.functional as F

_LAST = {}


def _trimul(x, mask, w):
    c, h = x.shape[-1], w["left_proj.weight"].shape[0]
    xn = F.layer_norm(x, (c,), w["norm.weight"], w["norm.bias"], 1e-5)
    m = mask.unsqueeze(-1)
    left = F.linear(xn, w["left_proj.weight"]) * m * torch.sigmoid(F.linear(xn, w["left_gate.weight"]))
    right = F.linear(xn, w["right_proj.weight"]) * m * torch.sigmoid(F.linear(xn, w["right_gate.weight"]))
    out = torch.einsum("bikh,bjkh->bijh", left, right)
    out = F.layer_norm(out, (h,), w["to_out_norm.weight"], w["to_out_norm.bias"], 1e-5)
    out = out * torch.sigmoid(F.linear(xn, w["out_gate.weight"]))
    return F.linear(out, w["to_out.weight"])


def custom_kernel(data):
    x, mask, weights, config = data
    if id(x) not in _LAST:  # computed once per input tensor (kept alive), replayed on every later call on it
        _LAST[id(x)] = (x, _trimul(x, mask, weights))
    return _LAST[id(x)][1].clone()
'''


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_trimul_kernel_replaying_its_output_is_caught_by_a_sampled_audit(device: str, monkeypatch) -> None:
    """End to end (the CPU's timing enabled; on a GPU, TriMul's real shapes, where the sample is a small part of the
    output): a kernel that computes once per input tensor and then replays is right on the tests (one call each) and
    on the timed set's own values, and wrong on the audits' re-randomised activations, judged at sampled positions.
    The static rules, which refuse this cache by its source (``output_caching``), are bypassed: the audit is the layer
    under test."""
    import importlib

    from ksearch.contracts.candidate import Candidate
    from ksearch.tools.evaluator import EvalRequest, evaluate

    evaluate_module = importlib.import_module("ksearch.tools.evaluator.evaluate")
    monkeypatch.setattr(evaluate_module.integrity, "check_source", lambda code, **kwargs: None)
    monkeypatch.setenv("KSEARCH_CPU_TIMING", "1")
    candidate = Candidate(task="trimul", language="triton", code=REPLAY, entry_point="custom_kernel")
    evaluation = evaluate(EvalRequest(candidate=candidate, device=device, timing=True, timing_method="gpumode-benchmark",
                                      run_timeout_s=240.0))  # fmt: skip
    assert evaluation.verdict == Verdict.INCORRECT, evaluation.summary()
    message = evaluation.mismatch.message if evaluation.mismatch else evaluation.log
    assert "re-randomised inputs" in message and "sampled positions" in message, message


def test_a_sampled_audit_still_checks_the_whole_outputs_layout(monkeypatch) -> None:
    """For a task that wants contiguous outputs, an audit judged at sampled positions refuses other strides as a
    whole-output check does (TriMul itself accepts any layout: it is made strict here)."""
    from ksearch.tasks.base import Task

    monkeypatch.setattr(TrimulTask, "output_strides", Task.output_strides)
    checker = Checker("cpu")
    try:
        checker.handle(CheckerCommand(op="begin", task="trimul", device="cpu", salt=1, bench_salt=2))
        writer = StagingWriter(checker.staging.handle)
        writer.open(checker.staging.ensure(1 << 20))
        handoff = _audit(checker, writer, 2, "audit")
        assert checker.check(handoff).ok
        checker.finish(timed=False)
        checker.handle(CheckerCommand(op="begin", task="trimul", device="cpu", salt=1, bench_salt=2))
        writer = StagingWriter(checker.staging.handle)
        writer.open(checker.staging.ensure(1 << 20))
        handoff = _audit(checker, writer, 2, "audit")
        shape = handoff.shapes[0]
        claimed = [1, shape[0], shape[0] * shape[1], shape[0] * shape[1] * shape[2]]  # column-major
        reply = checker.check(handoff.model_copy(update={"strides": [claimed]}))
        assert not reply.ok and "strides" in reply.message
    finally:
        checker.staging.release()
