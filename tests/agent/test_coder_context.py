"""What the coder sees besides its action: on attempt 1 the base code's per-shape timings and roofline position,
after a failed or slower attempt the cycle's best code beside the last one, and shapes within noise marked so; and
what a CPU run aimed at a GPU puts in every prompt."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ksearch.agent.config import RunConfig
from ksearch.agent.cycle_logic import CycleProgress
from ksearch.agent.state import CycleState
from ksearch.agent.world_model import Action
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, RooflinePoint, Timing
from ksearch.flows import run as runner
from ksearch.nodes.write_kernel import best_code, feedback, first_feedback
from ksearch.store import Store
from tests.helpers.scripts import fenced, init_plan, row_kernel, write_script

KEY = "softmax|gpu"


def _passed(ms: float, *, roofline: bool = True) -> Evaluation:
    timing = Timing(config="b0", median_ms=ms, mean_ms=ms, stdev_ms=0.001, samples=100, method="robust")
    point = RooflinePoint(
        config="b0",
        measured_ms=ms,
        floor_ms=0.1,
        memory_ms=0.1,
        compute_ms=0.01,
        bound="memory",
        fraction=0.1 / ms,
        dtype="bf16",
        gpu="H100 SXM5 80GB",
    )
    return Evaluation(
        verdict="passed",
        device="NVIDIA H100 80GB HBM3",
        timed=True,
        timings=[timing],
        score=1 / ms,
        latency_ms=ms,
        configs_passed=1,
        configs_total=1,
        roofline=[point] if roofline else [],
    )


def _stored(store: Store, code: str, evaluation: Evaluation) -> tuple[str, str]:
    candidate_id = store.ensure_candidate(Candidate(task="softmax", language="triton", code=code))
    return candidate_id, store.record_evaluation(candidate_id, KEY, evaluation)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "ksearch.db")
    yield s
    s.close()


def _state(**fields: object) -> CycleState:
    return CycleState(cycle_id="c1", node_id="a", action=Action(title="t"), attempt_budget=5, **fields)  # type: ignore[arg-type]


def test_attempt_one_sees_the_base_codes_timings_and_roofline(store: Store) -> None:
    base_id, _ = _stored(store, "# base\n", _passed(0.5))
    ctx = SimpleNamespace(store=store, eval_key=KEY)
    text = first_feedback(_state(base_candidate_id=base_id, base_score=2.0), ctx)  # type: ignore[arg-type]
    assert "The base code above measured: passed 1/1 configs, 0.5000 ms" in text
    assert "b0: median 0.5000 ms" in text and "floor 0.1 ms (memory-bound), 20% of roofline" in text
    assert "no measurements" in first_feedback(_state(), ctx)  # type: ignore[arg-type]


def test_after_a_failure_the_coder_sees_the_cycles_best_code_beside_its_last_attempt(store: Store) -> None:
    best_id, best_eval = _stored(store, "# the best so far\n", _passed(0.5))
    last_id, last_eval = _stored(store, "# broken\n", Evaluation(verdict="incorrect", device="cpu", log="wrong"))
    progress = CycleProgress(
        attempts=2,
        best_score=2.0,
        best_candidate_id=best_id,
        best_evaluation_id=best_eval,
        passed_any=True,
        last_passed=False,
    )
    state = _state(attempt=2, progress=progress, last_candidate_id=last_id, last_evaluation_id=last_eval)
    ctx = SimpleNamespace(store=store, eval_key=KEY)
    section = best_code(state, ctx, 3)  # type: ignore[arg-type]
    assert "# For comparison (your last attempt above failed; keep what made this one work)" in section
    assert "the best code of this cycle so far (whole; it rewrites most of your last attempt)" in section
    assert "# the best so far" in section
    assert best_code(state, ctx, 1) == ""  # type: ignore[arg-type]


def test_after_a_slower_attempt_the_best_is_shown_and_each_shape_is_compared_with_it(store: Store) -> None:
    best_id, best_eval = _stored(store, "# fast\n", _passed(0.5))
    last_id, last_eval = _stored(store, "# slow\n", _passed(0.505))
    progress = CycleProgress(
        attempts=2,
        best_score=2.0,
        best_candidate_id=best_id,
        best_evaluation_id=best_eval,
        passed_any=True,
        last_passed=True,
    )
    state = _state(attempt=2, progress=progress, last_candidate_id=last_id, last_evaluation_id=last_eval)
    ctx = SimpleNamespace(store=store, eval_key=KEY)
    assert "was slower" in best_code(state, ctx, 3) and "# fast" in best_code(state, ctx, 3)  # type: ignore[arg-type]
    text = feedback(state, ctx)  # type: ignore[arg-type]
    assert "cycle best 0.5000 ms, x0.99 (within noise)" in text and "of roofline" in text
    # the best itself as the last attempt: nothing to compare, no second copy of the code
    best_last = _state(attempt=2, progress=progress, last_candidate_id=best_id, last_evaluation_id=best_eval)
    assert best_code(best_last, ctx, 3) == ""  # type: ignore[arg-type]


def test_a_run_config_takes_a_target_gpu_on_the_cpu_only() -> None:
    assert RunConfig(run_id="r", task="softmax", model="m", device="cpu", target_gpu="H100").target_gpu == "h100"
    with pytest.raises(ValueError, match="on a GPU its own limits apply"):
        RunConfig(run_id="r", task="softmax", model="m", device="cuda", target_gpu="h100")
    with pytest.raises(ValueError, match="known targets are"):
        RunConfig(run_id="r", task="softmax", model="m", device="cpu", target_gpu="x9")


def _one_round_run(tmp_path: Path, **config: object) -> tuple[list[dict], Store]:
    script = write_script(
        tmp_path / "script.jsonl", [("plan:0:0", init_plan([("a", 0.9)])), ("write:c1:1", fenced(row_kernel(1)))]
    )
    ws = tmp_path / "ws"
    runner.start_run(
        RunConfig(run_id="r1", task="softmax", model=f"replay:{script}", device="cpu", max_rounds=1, **config),
        workspace=ws,
    )  # type: ignore[arg-type]
    store = runner.open_store(ws)
    return store.list_llm_calls("r1"), store


def test_the_prompts_of_a_cpu_run_aimed_at_an_h100_carry_its_limits(tmp_path: Path) -> None:
    calls, store = _one_round_run(tmp_path, target_gpu="h100")
    try:
        assert [c["call_key"] for c in calls] == ["plan:0:0", "write:c1:1"]
        for call in calls:
            prompt = call["prompt"]
            assert "Target GPU: H100 SXM5 80GB (sm_90)" in prompt, call["call_key"]
            for figure in ("232448 bytes", "65536 registers", "3.35 TB/s", "bf16/fp16 989.4"):
                assert figure in prompt, (call["call_key"], figure)
            assert "Reference implementation (runnable PyTorch" in prompt  # the spec carries the reference
            assert "Roofline floors of the timed shapes on the H100 SXM5 80GB" in prompt
        evaluation = store.get_evaluation(store.list_attempts("r1")[0]["evaluation_id"])
        assert evaluation.passed and evaluation.environment["target_gpu"] == "h100"
        assert {r.name for r in evaluation.resources} == {"_softmax_row"}  # checked against the H100 before it passed
    finally:
        store.close()


@pytest.mark.usefixtures("fake_executor")
def test_a_cpu_run_without_a_target_says_plainly_that_no_gpu_limits_apply(tmp_path: Path) -> None:
    calls, store = _one_round_run(tmp_path)
    store.close()
    for call in calls:
        assert "No GPU is targeted, so no GPU limits apply here" in call["prompt"]
        assert "232448" not in call["prompt"] and "Roofline floors" not in call["prompt"]


def test_the_best_code_beside_a_slower_attempt_is_a_diff_against_it(store: Store) -> None:
    """Issue 57: code is never clipped; the second copy of nearly the same code is a diff against the first."""
    body = "".join(f"    a{i} = {i}\n" for i in range(60))
    best_id, best_eval = _stored(store, f"def kernel(x):\n{body}    return x\n", _passed(0.5))
    slow = f"def kernel(x):\n{body.replace('a7 = 7', 'a7 = 70')}    return x\n"
    last_id, last_eval = _stored(store, slow, _passed(0.6))
    progress = CycleProgress(
        attempts=2, best_score=2.0, best_candidate_id=best_id, best_evaluation_id=best_eval, passed_any=True
    )
    progress = progress.model_copy(update={"last_passed": True})
    state = _state(attempt=2, progress=progress, last_candidate_id=last_id, last_evaluation_id=last_eval)
    section = best_code(state, SimpleNamespace(store=store, eval_key=KEY), 3)  # type: ignore[arg-type]
    assert "the best code of this cycle so far as a diff against your last attempt:\n```diff\n" in section
    assert "-    a7 = 70\n+    a7 = 7\n" in section and "a40 = 40" not in section
