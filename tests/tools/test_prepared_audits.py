"""An audit's expectation prepared when its activation seed is issued (``Checker.prepare_audit``): computed from the
seeds alone after the seed's answer, used only by a handoff of the same evaluation claiming the same seeds, and
judged exactly as one computed at the handoff (a replay is caught, a wrong claim is judged from scratch)."""

from __future__ import annotations

import io
import json

import pytest
import torch

from ksearch.contracts.evaluation import Verdict
from ksearch.contracts.exchange import CheckerCommand, Handoff
from ksearch.tasks.trimul import TrimulTask
from ksearch.tools.evaluator.checker import main as checker_mod
from ksearch.tools.evaluator.checker.main import Checker
from ksearch.tools.evaluator.shared.seeds import input_digest, input_set_seed, salted_seed
from ksearch.tools.evaluator.shared.staging import StagingWriter

TASK = TrimulTask()
BENCH_SALT = 2
CONFIG_INDEX = 1


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The configs of every reference the checker computes, whole or sampled."""
    computed: list[str] = []
    whole, sampled = TrimulTask.expected, TrimulTask.expected_sample

    def counting_whole(self, config, inputs):
        computed.append(config.name)
        return whole(self, config, inputs)

    def counting_sample(self, config, inputs, generator):
        computed.append(config.name)
        return sampled(self, config, inputs, generator)

    monkeypatch.setattr(TrimulTask, "expected", counting_whole)
    monkeypatch.setattr(TrimulTask, "expected_sample", counting_sample)
    return computed


@pytest.fixture
def checker():
    made = Checker("cpu")
    yield made
    made.staging.release()


def _begin(checker: Checker, **options: bool) -> StagingWriter:
    reply = checker.handle(
        CheckerCommand(op="begin", task="trimul", device="cpu", salt=1, bench_salt=BENCH_SALT, **options)
    )
    assert reply["ok"]
    writer = StagingWriter(checker.staging.handle)
    writer.open(checker.staging.ensure(1 << 24))
    return writer


def _base() -> int:
    return salted_seed(TASK.benchmark_configs("cpu")[CONFIG_INDEX].seed, BENCH_SALT)


def _seed(checker: Checker, input_seed: int | None) -> dict:
    return checker.handle(
        CheckerCommand(op="seed", config_index=CONFIG_INDEX, kind="activation", input_seed=input_seed)
    )


def _handoff(writer: StagingWriter, activation_seed: int, *, replay: bool = False) -> Handoff:
    """The audit the worker makes on the set of seed ``_base()`` with ``activation_seed``'s activations: the right
    output, or (``replay``) the output of the set's own activations."""
    config = TASK.benchmark_configs("cpu")[CONFIG_INDEX]
    base = _base()
    with torch.no_grad():
        inputs = TASK.make_inputs(config.model_copy(update={"seed": base}), "cpu")
        fresh = TASK.make_inputs(config.model_copy(update={"seed": activation_seed}), "cpu")
        audited = [fresh[0], fresh[1], *inputs[2:]]
        output = TrimulTask.reference(TASK, *(inputs if replay else audited))  # not counted: the worker's side
    offsets = writer.stage([output])
    return Handoff(
        kind="audit",
        config_index=CONFIG_INDEX,
        config=config.name,
        prepare_seed=base,
        input_seed=base,
        activation_seed=activation_seed,
        digest=input_digest(audited),
        shapes=[list(output.shape)],
        dtypes=[str(output.dtype)],
        strides=[list(output.stride())],
        offsets=offsets,
        generation=writer.handle.generation,
    )


def _never_drawn_whole(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The checker's draws of whole audits (each recorded here) never say whole; its other draws left to ``secrets``."""
    real, draws = checker_mod.secrets.randbelow, []

    def draw(n: int) -> int:
        if n == checker_mod.WHOLE_AUDIT_ODDS:
            draws.append(n)
            return 1
        return real(n)

    monkeypatch.setattr(checker_mod.secrets, "randbelow", draw)
    return draws


def test_a_prepared_audit_is_judged_without_computing_its_reference_again(
    checker: Checker, counted: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _never_drawn_whole(monkeypatch)
    writer = _begin(checker)
    for replay, passes in ((False, True), (False, True), (True, False)):
        reply = _seed(checker, _base())
        assert reply["ok"] and reply["preparing"]
        counted.clear()
        checker.prepare_audit()
        assert len(counted) == 1 and checker.prepared is not None  # whole for the config's first audit, then sampled
        assert checker.check(_handoff(writer, reply["seed"], replay=replay)).ok == passes
        assert len(counted) == 1 and checker.prepared is None  # nothing computed at the handoff
    result = checker.finish(timed=False)
    assert result.verdict == Verdict.INCORRECT and "re-randomised inputs" in result.error
    assert result.environment["audits_prepared"] == "3 of 3"


def test_an_audit_claiming_other_seeds_is_judged_from_scratch(
    checker: Checker, counted: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prepared for one activation seed, handed off with another the checker issued: the preparation is dropped and
    the handoff judged on its own claim (a replay caught; the config's first whole audit is the one judged, not the
    dropped one)."""
    real = checker_mod.secrets.randbelow  # later audits sampled, never drawn whole
    monkeypatch.setattr(checker_mod.secrets, "randbelow", lambda n: 1 if n == checker_mod.WHOLE_AUDIT_ODDS else real(n))
    writer = _begin(checker)
    first = _seed(checker, _base())
    checker.prepare_audit()
    second = _seed(checker, None)  # no input set named: nothing to prepare
    assert not second["preparing"] and checker.prepared is not None
    checker.prepare_audit()
    assert checker.prepared is not None  # the first's preparation is kept until a handoff or another preparation
    counted.clear()
    assert checker.check(_handoff(writer, second["seed"])).ok
    assert counted == [TASK.benchmark_configs("cpu")[CONFIG_INDEX].name] and checker.prepared is None
    assert checker.current is not None and checker.current.whole_audits == {CONFIG_INDEX}
    assert not checker.check(_handoff(writer, first["seed"], replay=True)).ok  # judged from scratch, still caught
    assert checker.finish(timed=False).environment["audits_prepared"] == "0 of 2"


def test_the_draw_of_a_whole_audit_is_made_after_the_output_is_staged_never_while_preparing(
    checker: Checker, counted: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A red-team finding (2026-11-30): a whole reference costs ~40x a sample, and the worker waits for the
    preparation before the audited call, so a draw made while preparing told the kernel which audits are whole (it
    could then be lossy on all the others). Preparation is whole only for a config's first audit, which is no
    secret; a later audit is prepared sampled, and the draw at the handoff may still ask for the whole output."""
    draws = _never_drawn_whole(monkeypatch)
    writer = _begin(checker)
    for audit in range(3):
        seed = _seed(checker, _base())["seed"]
        checker.prepare_audit()
        assert len(draws) == max(0, audit - 1)  # no draw while preparing, the config's first (whole) audit included
        assert checker.check(_handoff(writer, seed)).ok
        assert len(draws) == audit  # one per later audit, at its handoff
    real = checker_mod.secrets.randbelow
    monkeypatch.setattr(checker_mod.secrets, "randbelow", lambda n: 0 if n == checker_mod.WHOLE_AUDIT_ODDS else real(n))
    seed = _seed(checker, _base())["seed"]
    counted.clear()
    checker.prepare_audit()
    assert checker.prepared is not None and not checker.prepared.whole
    reply = checker.check(_handoff(writer, seed, replay=True))
    assert not reply.ok and "sampled positions" not in reply.message  # drawn whole at the handoff: judged whole
    assert len(counted) == 2  # the prepared sample, then the whole reference
    assert checker.finish(timed=False).environment["audits_prepared"] == "3 of 4"


def test_a_worker_asking_for_seeds_without_end_is_refused(checker: Checker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once draws keep meeting issued seeds (here every draw), the checker stops drawing and the evaluation fails as
    a forged record, instead of looping for ever (a red team reached that by issuing all 40,000)."""
    _begin(checker)
    first = _seed(checker, None)
    assert first["ok"]
    monkeypatch.setattr(checker_mod.secrets, "randbelow", lambda n: 0)
    assert checker.current is not None
    checker.current.issued.add((CONFIG_INDEX, input_set_seed(_base(), checker_mod.AUDIT_BASE)))
    again = _seed(checker, None)
    assert not again["ok"] and "nearly all" in again["message"]
    result = checker.finish(timed=False)
    assert result.verdict == Verdict.REJECTED and result.rejection is not None
    assert result.rejection.rule == "forged_record"


@pytest.mark.parametrize("input_seed", ["unknown set", "fresh set never issued"])
def test_nothing_is_prepared_for_a_set_the_evaluation_cannot_have(
    checker: Checker, counted: list[str], input_seed: str
) -> None:
    _begin(checker)
    seed = 12345 if input_seed == "unknown set" else input_set_seed(_base(), checker_mod.FRESH_SET_BASE + 3)
    assert _seed(checker, seed)["preparing"]
    counted.clear()
    checker.prepare_audit()
    assert checker.prepared is None and counted == []


@pytest.mark.parametrize("options", [{"prepared_audits": False}, {"low_memory": True}])
def test_no_preparation_when_switched_off_or_in_low_memory(
    checker: Checker, counted: list[str], options: dict[str, bool]
) -> None:
    writer = _begin(checker, **options)
    reply = _seed(checker, _base())
    assert reply["ok"] and not reply["preparing"]
    checker.prepare_audit()
    assert checker.prepared is None
    counted.clear()
    assert checker.check(_handoff(writer, reply["seed"])).ok
    assert len(counted) == 1  # computed at the handoff


def test_a_preparation_that_fails_leaves_the_handoff_to_judge(
    checker: Checker, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = _begin(checker)
    reply = _seed(checker, _base())  # the audit's inputs are made when its seed is issued (handed to the worker)
    real, real_sample = TrimulTask.expected, TrimulTask.expected_sample
    monkeypatch.setattr(TrimulTask, "expected", lambda self, config, inputs: 1 / 0)
    monkeypatch.setattr(TrimulTask, "expected_sample", lambda self, config, inputs, generator: 1 / 0)
    checker.prepare_audit()
    assert checker.prepared is None and checker.current is not None and checker.current.failure is None
    monkeypatch.setattr(TrimulTask, "expected", real)
    monkeypatch.setattr(TrimulTask, "expected_sample", real_sample)
    assert checker.check(_handoff(writer, reply["seed"])).ok


def test_the_checker_prepares_after_it_has_answered_the_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve`` writes the seed's answer first (the worker makes its inputs meanwhile) and prepares after it."""
    seen: list[int] = []
    answers = io.StringIO()
    monkeypatch.setattr(Checker, "prepare_audit", lambda self: seen.append(len(answers.getvalue().splitlines())))
    begin = CheckerCommand(op="begin", task="trimul", device="cpu", salt=1, bench_salt=BENCH_SALT)
    seed = CheckerCommand(op="seed", config_index=CONFIG_INDEX, kind="activation", input_seed=_base())
    commands = [begin.model_dump_json(), seed.model_dump_json(), CheckerCommand(op="shutdown").model_dump_json()]
    checker_mod.serve("cpu", iter(commands), answers)
    lines = answers.getvalue().splitlines()
    assert json.loads(lines[2])["preparing"] is True
    assert seen == [2, 3]  # after the answer to begin (ready + begin), after the seed's


@pytest.mark.serial
def test_an_honest_trimul_kernel_has_its_audits_prepared(monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end on the CPU's timing: the worker names the set it re-randomises, waits for the preparation, and
    audits use it. Judged from scratch: the check of each loop's last repeat when that repeat was not itself
    re-randomised (on activations an earlier audit had), and an audit drawn whole at its handoff (1 in 8)."""
    from ksearch.tools.evaluator import EvalRequest, evaluate

    monkeypatch.setenv("KSEARCH_CPU_TIMING", "1")
    evaluation = evaluate(
        EvalRequest(
            candidate=TASK.reference_candidate(),
            device="cpu",
            timing=True,
            timing_method="gpumode-benchmark",
            run_timeout_s=240.0,
        )
    )
    assert evaluation.verdict == Verdict.PASSED, evaluation.log
    used, _, total = evaluation.environment["audits_prepared"].partition(" of ")
    configs = len(TASK.benchmark_configs("cpu"))
    assert int(total) >= 2 * configs and 0 < int(used) <= int(total)


@pytest.mark.parametrize(
    "message",
    [
        {"op": "seed", "config_index": 0, "kind": "activation", "input_seed": [1]},
        {"op": "seed", "config_index": 0, "kind": "activation", "input_seed": float("inf")},
        {"op": "seed", "config_index": [0], "kind": "activation"},
    ],
)
def test_a_seed_request_with_numbers_that_are_not_numbers_is_answered_as_malformed(message: dict) -> None:
    """The parent answers it without asking the checker (a red team's list and infinity raised out of ``evaluate``)."""
    from ksearch.tools.evaluator.parent.session import EvaluatorSession

    session = EvaluatorSession.__new__(EvaluatorSession)  # nothing of it is reached before the checker is asked
    answer = session._relay(message, "evaluation", 1.0, None)  # type: ignore[arg-type]
    assert answer is not None and answer["ok"] is False and "malformed message" in answer["message"]


def test_audits_of_one_set_make_its_other_inputs_once_and_a_reference_cannot_spoil_them(
    checker: Checker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each audit makes its own activations; the set's other inputs (TriMul's weights) are made at its first audit and
    kept, and every audit gets a copy: a reference that writes into a weight spoils only its own."""
    _never_drawn_whole(monkeypatch)
    made: list[int] = []
    real_make, real_expected = TrimulTask.make_inputs, TrimulTask.expected

    def counting_make(self, config, device):
        made.append(config.seed)
        return real_make(self, config, device)

    def scribbling_expected(self, config, inputs):
        out = real_expected(self, config, inputs)
        inputs[2].add_(1.0)  # a reference written carelessly: it changes a weight after using it
        return out

    monkeypatch.setattr(TrimulTask, "make_inputs", counting_make)
    monkeypatch.setattr(TrimulTask, "expected", scribbling_expected)
    writer = _begin(checker, sampled_audits=False)  # every audit whole: the careless reference runs each time
    for audit in range(3):
        made.clear()
        reply = _seed(checker, _base())  # the inputs are made here, when the seed is issued, and handed over
        checker.prepare_audit()
        assert checker.prepared is not None
        assert made == ([reply["seed"], _base()] if audit == 0 else [reply["seed"]])
        assert checker.check(_handoff(writer, reply["seed"])).ok  # the expectation of the base's own weights
    assert checker.references.kept is not None and checker.references.kept[0][2] == _base()
    checker.finish(timed=False)
    assert checker.references.kept is None  # nothing of an evaluation's inputs stays on the device after it
