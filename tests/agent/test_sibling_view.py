"""What a cycle's coder sees of the cycles beside it: every attempt they have finished, its result against its own
base and its change (issue 57: round 4 of examples/trimul-record repeated round 2's losing change)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from ksearch.agent.sibling_view import sibling_results
from ksearch.agent.state import CycleState, SiblingCycle
from ksearch.agent.world_model import Action
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Timing
from ksearch.store import Store

CODE = "import triton\n\n\n@triton.jit\ndef _row(x):\n    pass\n\n\n@triton.jit\ndef _col(x):\n    pass\n"


def _passed(ms: float) -> Evaluation:
    timing = Timing(config="b0_n256", median_ms=ms, mean_ms=ms, stdev_ms=0.0, samples=9, headline="mean")
    return Evaluation(verdict="passed", device="gpu", timed=True, timings=[timing], score=1 / ms, latency_ms=ms)


def test_a_cycle_sees_each_finished_attempt_beside_it_in_order(tmp_path: Path) -> None:
    store = Store(tmp_path / "ksearch.db")
    store.create_run({"id": "r", "task": "trimul", "model": "m"})
    ids = []
    for attempt, (code, ev) in enumerate(
        [(CODE, _passed(1.0)), (CODE.replace("pass", "return x", 1), _passed(1.3))], start=1
    ):
        cid = store.ensure_candidate(Candidate(task="trimul", language="triton", code=code))
        eid = store.record_evaluation(cid, "k", ev)
        ids.append(cid)
        store.record_attempt(
            {
                "run_id": "r",
                "cycle_id": "c1",
                "attempt": attempt,
                "round_index": attempt,
                "node_id": "a",
                "prompt_kind": "improve" if attempt > 1 else "action_from_spec",
                "candidate_id": cid,
                "evaluation_id": eid,
                "verdict": "passed",
                "score": None,
                "error": None,
            }
        )
    store.record_attempt(
        {
            "run_id": "r",
            "cycle_id": "c1",
            "attempt": 3,
            "round_index": 3,
            "node_id": "a",
            "prompt_kind": "improve",
            "candidate_id": None,
            "evaluation_id": None,
            "verdict": "no_code",
            "score": None,
            "error": "the reply contained no usable code",
        }
    )
    ctx = SimpleNamespace(store=store, run_id="r", eval_key="k")
    sibling = SiblingCycle(cycle_id="c1", node_id="a", title="do a")
    state = CycleState(cycle_id="c2", node_id="b", action=Action(title="do b"), siblings=[sibling])
    text = sibling_results(state, ctx)  # type: ignore[arg-type]
    lines = text.splitlines()
    assert lines[0] == "Cycle c1 on node a: do a"
    assert lines[1] == "- attempt 1 (action_from_spec): passed 0/0 configs, 1.0000 ms on gpu"
    assert lines[2] == "  per shape (ms): b0 1.0000"
    assert lines[3] == "  written from the spec (11 lines; Triton kernels: _row, _col)"
    assert lines[4] == "- attempt 2 (improve): passed 0/0 configs, 1.3000 ms on gpu"
    assert "  its change:\n```diff\n--- the code it edited\n+++ attempt 2 of c1\n" in text
    assert "-    pass\n+    return x\n" in text
    assert lines[-1] == "- attempt 3: no evaluation (the reply contained no usable code)"
    # against its base, when it has one
    base = store.ensure_candidate(Candidate(task="trimul", language="triton", code=CODE + "\n# base\n"))
    store.record_evaluation(base, "k", _passed(1.1))
    with_base = state.model_copy(update={"siblings": [sibling.model_copy(update={"base_candidate_id": base})]})
    text = sibling_results(with_base, ctx)  # type: ignore[arg-type]
    assert "- attempt 1 (action_from_spec): passed 0/0 configs, 1.0000 ms on gpu, x1.10 vs its base (faster)" in text
    assert "-# base" in text and "written from the spec" not in text
    alone = CycleState(cycle_id="c2", node_id="b", action=Action(title="do b"))
    assert sibling_results(alone, ctx) == "(no other cycle runs beside this one)"  # type: ignore[arg-type]
    waiting = state.model_copy(update={"siblings": [SiblingCycle(cycle_id="c9", node_id="z", title="z")]})
    assert sibling_results(waiting, ctx) == "(none of the cycles beside this one has finished an attempt yet)"  # type: ignore[arg-type]
    store.close()


def _sibling_with(store: Store, codes: list[str], base: str | None) -> str:
    """The view of one sibling cycle whose attempts wrote ``codes`` in order, from ``base`` (None: from the spec)."""
    store.create_run({"id": "s", "task": "trimul", "model": "m"})
    for attempt, code in enumerate(codes, start=1):
        cid = store.ensure_candidate(Candidate(task="trimul", language="triton", code=code))
        eid = store.record_evaluation(cid, "k", Evaluation(verdict="incorrect", device="gpu", log="wrong"))
        store.record_attempt(
            {
                "run_id": "s",
                "cycle_id": "c1",
                "attempt": attempt,
                "round_index": attempt,
                "node_id": "a",
                "prompt_kind": "debug",
                "candidate_id": cid,
                "evaluation_id": eid,
                "verdict": "incorrect",
                "score": None,
                "error": None,
            }
        )
    base_id = store.ensure_candidate(Candidate(task="trimul", language="triton", code=base)) if base else None
    sibling = SiblingCycle(cycle_id="c1", node_id="a", title="a", base_candidate_id=base_id)
    state = CycleState(cycle_id="c2", node_id="b", action=Action(title="b"), siblings=[sibling])
    return sibling_results(state, SimpleNamespace(store=store, run_id="s", eval_key="k"))  # type: ignore[arg-type]


def test_a_sibling_without_kernels_the_same_code_twice_and_a_long_change(tmp_path: Path) -> None:
    store = Store(tmp_path / "ksearch.db")
    text = _sibling_with(store, ["def kernel(x):\n    return x\n"] * 2, None)
    first = "- attempt 1 (debug): incorrect on gpu: wrong\n  written from the spec (2 lines; Triton kernels: none)"
    assert first in text
    assert text.endswith("- attempt 2 (debug): incorrect on gpu: wrong\n  the same code it edited")
    assert "vs its base" not in text  # a failed attempt has no time to compare
    store.close()


def test_a_siblings_change_is_quoted_up_to_its_bound(tmp_path: Path) -> None:
    from ksearch.agent.code_view import unified_diff
    from ksearch.agent.sibling_view import DIFF_CHARS

    base = "x = 1\n"

    def diff_of(width: int) -> str:
        return unified_diff(base, base + "y" * width + "\n", "the code it edited", "attempt 1 of c1")

    width = next(w for w in range(5000) if len(diff_of(w)) == DIFF_CHARS + 1)
    store = Store(tmp_path / "ksearch.db")
    text = _sibling_with(store, [base + "y" * width + "\n"], base)
    assert DIFF_CHARS == 4000 and "[1 characters cut]" in text  # one over the bound: clipped
    store.close()
    store = Store(tmp_path / "other.db")
    exact = _sibling_with(store, [base + "y" * (width - 1) + "\n"], base)
    assert "characters cut" not in exact and len(diff_of(width - 1)) == DIFF_CHARS
    store.close()
