"""The coder's feedback section, case by case: which code is shown, when the cycle's best is set beside it (as a
diff), what the last attempt is compared with, and which lines say what (issue 57: every speed in ms)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ksearch.agent.cycle_logic import CycleProgress
from ksearch.agent.state import CycleState
from ksearch.agent.world_model import Action
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Timing
from ksearch.nodes.write_kernel import best_code, comparison, feedback, starting_code
from ksearch.store import Store
from ksearch.tasks.softmax import SoftmaxTask

KEY = "k"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "ksearch.db")
    yield s
    s.close()


def _passed(ms: float) -> Evaluation:
    timing = Timing(config="b0", median_ms=ms, mean_ms=ms, stdev_ms=0.0, samples=50)
    return Evaluation(verdict="passed", device="gpu", timed=True, timings=[timing], score=1 / ms, latency_ms=ms)


def _code(store: Store, text: str, evaluation: Evaluation | None = None) -> tuple[str, str | None]:
    cid = store.ensure_candidate(Candidate(task="softmax", language="triton", code=text))
    return cid, store.record_evaluation(cid, KEY, evaluation) if evaluation is not None else None


def _ctx(store: Store) -> SimpleNamespace:
    return SimpleNamespace(store=store, eval_key=KEY, task=SoftmaxTask())


def _state(**fields: object) -> CycleState:
    return CycleState(cycle_id="c1", node_id="a", action=Action(title="t"), attempt_budget=5, **fields)  # type: ignore[arg-type]


LINES = "".join(f"    a{i} = {i}\n" for i in range(40))


def test_the_code_shown_is_the_last_attempts_after_the_first_else_the_base(store: Store) -> None:
    base, _ = _code(store, "# base\n")
    last, _ = _code(store, "# last\n")
    ctx = _ctx(store)
    assert "# base" in starting_code(_state(base_candidate_id=base, last_candidate_id=last), ctx, 1)  # type: ignore[arg-type]
    assert "# last" in starting_code(_state(base_candidate_id=base, last_candidate_id=last), ctx, 2)  # type: ignore[arg-type]
    assert "# base" in starting_code(_state(base_candidate_id=base), ctx, 2)  # type: ignore[arg-type]  # none written yet
    assert starting_code(_state(), ctx, 1) == "(none: start from the spec)"  # type: ignore[arg-type]


def test_the_best_beside_the_last_only_after_a_failure_or_a_slower_pass(store: Store) -> None:
    best, best_ev = _code(store, f"def k():\n{LINES}", _passed(1.0))
    slow, slow_ev = _code(store, f"def k():\n{LINES.replace('a3 = 3', 'a3 = 30')}", _passed(1.2))
    ctx = _ctx(store)
    progress = CycleProgress(best_score=1.0, best_candidate_id=best, best_evaluation_id=best_ev, passed_any=True)
    after = {"last_candidate_id": slow, "last_evaluation_id": slow_ev}
    slower = _state(progress=progress.model_copy(update={"last_passed": True}), **after)
    assert "(your last attempt above was slower;" in best_code(slower, ctx, 2)  # type: ignore[arg-type]
    assert "-    a3 = 30\n+    a3 = 3\n" in best_code(slower, ctx, 2)  # type: ignore[arg-type]
    unknown = _state(progress=progress, **after)  # after a resume the last outcome may be unknown: no claim
    assert best_code(unknown, ctx, 2) == ""  # type: ignore[arg-type]
    untimed = _state(progress=progress.model_copy(update={"last_passed": True, "best_score": None}), **after)
    assert best_code(untimed, ctx, 2) == ""  # type: ignore[arg-type]  # correct but untimed: nothing was slower
    on_best = slower.model_copy(update={"last_evaluation_id": best_ev})
    assert best_code(on_best, ctx, 2) == ""  # type: ignore[arg-type]
    no_code = _state(progress=progress, last_candidate_id=slow)  # the last attempt wrote no code: a failure
    assert "(your last attempt above failed;" in best_code(no_code, ctx, 2)  # type: ignore[arg-type]
    nothing = _state(progress=CycleProgress(last_passed=False), last_candidate_id=slow, last_evaluation_id=slow_ev)
    assert best_code(nothing, ctx, 2) == ""  # type: ignore[arg-type]  # nothing passed and no base: nothing to show
    # the first attempt wrote no code: the base is both the code shown and the comparison, so it is not repeated
    unwritten = _state(progress=CycleProgress(last_passed=False), base_candidate_id=best)
    assert best_code(unwritten, ctx, 2) == ""  # type: ignore[arg-type]


def test_the_last_attempt_is_compared_with_the_cycles_best_else_the_base(store: Store) -> None:
    base, base_ev = _code(store, "# base\n", _passed(1.0))
    best, best_ev = _code(store, "# best\n", _passed(0.5))
    last, last_ev = _code(store, "# last\n", _passed(0.6))
    ctx = _ctx(store)
    progress = CycleProgress(best_score=2.0, best_candidate_id=best, best_evaluation_id=best_ev, passed_any=True)
    state = _state(base_candidate_id=base, progress=progress, last_candidate_id=last, last_evaluation_id=last_ev)
    reference, label = comparison(state, ctx)  # type: ignore[arg-type]
    assert label == "cycle best" and reference is not None and reference.latency_ms == 0.5
    text = feedback(state, ctx)  # type: ignore[arg-type]
    assert "Verdict of your last attempt: passed 0/0 configs, 0.6000 ms on gpu, x0.83 vs cycle best (slower)" in text
    assert "\nBest of this cycle so far: 0.5000 ms\n" in text
    assert text.endswith("The base this cycle started from (the parent's solution): 1.0000 ms")
    on_best = state.model_copy(update={"last_evaluation_id": best_ev, "last_candidate_id": best})
    assert comparison(on_best, ctx)[1] == "base"  # type: ignore[arg-type]
    text = feedback(on_best, ctx)  # type: ignore[arg-type]
    assert "x2.00 vs base (faster)" in text and "Best of this cycle so far" not in text
    alone = _state(last_candidate_id=last, last_evaluation_id=last_ev)
    assert comparison(alone, ctx) == (None, "base")  # type: ignore[arg-type]
    assert feedback(alone, ctx).splitlines()[0] == "Verdict of your last attempt: passed 0/0 configs, 0.6000 ms on gpu"  # type: ignore[arg-type]


def test_logs_errors_and_an_empty_feedback(store: Store) -> None:
    ctx = _ctx(store)
    failed, failed_ev = _code(store, "# f\n", Evaluation(verdict="incorrect", device="gpu", log="wrong values"))
    quiet, quiet_ev = _code(store, "# q\n", Evaluation(verdict="compile_error", device="gpu", log=""))
    noisy, noisy_ev = _code(store, "# n\n", Evaluation(verdict="passed", device="gpu", log="note: a warning"))
    assert "Log:\nwrong values" in feedback(_state(last_evaluation_id=failed_ev), ctx)  # type: ignore[arg-type]
    assert "Log:" not in feedback(_state(last_evaluation_id=quiet_ev), ctx)  # type: ignore[arg-type]
    assert "Log:" not in feedback(_state(last_evaluation_id=noisy_ev), ctx)  # type: ignore[arg-type]
    long = "e" * 4100
    assert feedback(_state(last_error=long), ctx) == "e" * 2666 + "\n... [100 characters cut] ...\n" + "e" * 1334  # type: ignore[arg-type]
    assert feedback(_state(), ctx) == "(none)"  # type: ignore[arg-type]
    broken_base, _ = _code(store, "# b\n", Evaluation(verdict="incorrect", device="gpu"))
    assert feedback(_state(base_candidate_id=broken_base), ctx) == "(none)"  # type: ignore[arg-type]
    assert failed and quiet and noisy
