"""The planner's view of the best known competing kernels: per shape, furthest behind first (issue 57)."""

from __future__ import annotations

from ksearch.agent.compete_view import competitor_block, competitors_view
from ksearch.agent.config import Competitor
from ksearch.contracts.evaluation import Evaluation, Timing


def _best(**ms: float) -> Evaluation:
    timings = [
        Timing(config=c, median_ms=v, mean_ms=v, stdev_ms=0.0, samples=10, headline="mean") for c, v in ms.items()
    ]
    return Evaluation(verdict="passed", device="gpu", timed=True, timings=timings, score=1.0, latency_ms=1.0)


RIVAL = Competitor(name="rival", source="r.json", where="H100", times_ms={"b0": 0.5, "b1": 2.2, "b2": 1.0})


def test_each_shape_both_have_is_a_ratio_furthest_behind_first() -> None:
    text = competitor_block(RIVAL, _best(b0=1.0, b1=2.0, b2=1.002, b3=4.0), None)
    lines = text.splitlines()
    assert lines[0] == "## rival (r.json; H100)"
    assert lines[1] == "Geometric mean over the 3 shapes both have: the run's best 1.2608 ms, it 1.0323 ms: x0.82"
    assert lines[3:] == [
        "  b0: the run's best 1.0000 ms, it 0.5000 ms: x0.50 (it is 100% faster)",
        "  b2: the run's best 1.0020 ms, it 1.0000 ms: x1.00 (level)",
        "  b1: the run's best 2.0000 ms, it 2.2000 ms: x1.10 (the run's best is 10% faster)",
    ]


def test_without_a_timed_best_the_competitors_times_stand_alone_and_its_code_follows() -> None:
    text = competitor_block(RIVAL, None, "def custom_kernel(d):\n    pass\n")
    assert "Per shape (nothing has been timed in this run yet):\n  b0: it 0.5000 ms\n  b1: it 2.2000 ms" in text
    assert text.endswith(
        "Its code (to study what it does differently):\n```python\ndef custom_kernel(d):\n    pass\n```"
    )
    untimed_best = Evaluation(verdict="passed", device="cpu")
    assert "Per shape (nothing has been timed in this run yet):" in competitor_block(RIVAL, untimed_best, None)
    near = competitor_block(RIVAL, _best(b0=0.496), None)  # 0.8 % apart: not level
    assert "  b0: the run's best 0.4960 ms, it 0.5000 ms: x1.01 (the run's best is 1% faster)" in near
    other = competitor_block(RIVAL, _best(x=1.0), None)
    assert "Per shape (no shape in common):" in other
    untimed = Competitor(name="k", source="k.py", where="evaluated here: passed on cpu")
    assert "(not timed: it was evaluated on the CPU interpreter)" in competitor_block(untimed, None, None)
    assert competitors_view([], None, {}).startswith("(none given: `ksearch run ... --compete FILE`")
    both = competitors_view([RIVAL, untimed.model_copy(update={"candidate_id": "c"})], None, {"c": "code"})
    assert both.count("## ") == 2 and both.endswith("```python\ncode\n```")
