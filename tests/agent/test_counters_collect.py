"""Which solutions get hardware counters in a search, and how their cost is bounded: each ended cycle's best and
the nodes the planner names, each evaluation once, skipped (and saying so) past the run's share of GPU time, never
on the CPU or in a process that only writes prompts; the planner sees what it asked for and how to ask."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from ksearch.agent.counters_collect import CounterTarget, collect, counter_targets, planner_counters_view
from ksearch.agent.edit_ops import EditScript, parse_edit_script
from ksearch.agent.state import CycleResult, SearchState
from ksearch.agent.world_model import ROOT_ID, SolutionRef, WorldModel, attach_seed
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.counters import CounterReport, CounterStatus, KernelCounters, ShapeCounters
from ksearch.contracts.evaluation import Evaluation, Timing
from ksearch.store import Store
from ksearch.store.counters import find_counters

RUN = "run-1"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "ksearch.db")
    yield s
    s.close()


def _evaluation(duration_s: float = 100.0) -> Evaluation:
    timings = [
        Timing(config=name, median_ms=ms, mean_ms=ms, stdev_ms=0.001, samples=20)
        for name, ms in (("b0", 0.3), ("b5", 4.0), ("b6", 3.0))
    ]
    return Evaluation(
        verdict="passed",
        device="NVIDIA H100",
        timed=True,
        timings=timings,
        score=1.0,
        latency_ms=1.0,
        duration_s=duration_s,
    )


def _stored(store: Store, code: str, evaluation: Evaluation) -> tuple[str, str]:
    candidate = store.ensure_candidate(Candidate(task="trimul", language="triton", code=code))
    eid = store.record_evaluation(candidate, "key", evaluation)
    store.record_attempt(
        {
            "run_id": RUN,
            "cycle_id": f"c-{code}",
            "attempt": 1,
            "round_index": 1,
            "node_id": "n",
            "prompt_kind": "x",
            "candidate_id": candidate,
            "evaluation_id": eid,
            "verdict": "passed",
            "score": 1.0,
            "error": None,
        }
    )
    return candidate, eid


class Collector:
    """Stands in for the executor's ncu collector (tested on its own and on the GPU): records what it was asked."""

    def __init__(self, wall_s: float = 10.0) -> None:
        self.asked: list[tuple[str, list[str]]] = []
        self.wall_s = wall_s

    def __call__(self, request: SimpleNamespace, shapes: list[str]) -> CounterReport:
        self.asked.append((request.code, shapes))
        shape = ShapeCounters(config=shapes[0], kernels=[KernelCounters(config=shapes[0], name="k", compute_pct=50.0)])
        return CounterReport(status=CounterStatus.COLLECTED, wall_s=self.wall_s, shapes=[shape], tool="ncu 2025.3")


def _ctx(
    store: Store, collector: Callable[..., CounterReport] | None, *, device: str = "cuda", prompts_only: bool = False
):
    @contextlib.contextmanager
    def lease() -> Iterator[str]:
        yield "cuda:0"

    return SimpleNamespace(
        config=SimpleNamespace(counters=True, counter_shapes=2, device=device),
        counters=collector,
        prompts_only=prompts_only,
        store=store,
        run_id=RUN,
        device_lease=lease,
        eval_request=lambda candidate, device: SimpleNamespace(code=candidate.code, device=device),
    )


def test_targets_are_each_cycles_best_then_the_nodes_asked_for_each_once() -> None:
    seed = SolutionRef(candidate_id="cs", evaluation_id="es", verdict="passed")
    state = SearchState(
        world_model=attach_seed(WorldModel(), seed),
        evidence=[
            CycleResult(
                cycle_id="c1",
                node_id="a",
                rounds=2,
                passed=True,
                stop_reason="x",
                best_candidate_id="c1b",
                best_evaluation_id="e1",
            ),
            CycleResult(cycle_id="c2", node_id="b", rounds=2, passed=False, stop_reason="x"),
        ],
        counter_requests=[ROOT_ID, "missing"],
    )
    assert counter_targets(state) == [
        CounterTarget("e1", "c1b", "cycle c1's best"),
        CounterTarget("es", "cs", f"asked for node {ROOT_ID}"),
    ]


def test_collected_once_on_the_longest_shapes_and_stored(store: Store) -> None:
    candidate, eid = _stored(store, "k1", _evaluation())
    collector = Collector()
    ctx = _ctx(store, collector)
    report = collect(ctx, CounterTarget(eid, candidate, "cycle c1's best"))  # type: ignore[arg-type]
    assert report is not None and report.status == CounterStatus.COLLECTED
    assert collector.asked == [("k1", ["b5", "b6"])]
    assert store.get_evaluation(eid).counters == report
    collect(ctx, CounterTarget(eid, candidate, "asked again"))  # type: ignore[arg-type]
    assert len(collector.asked) == 1  # a resumed node, or a second request, pays nothing again


def test_past_the_share_of_gpu_time_a_collection_is_skipped_and_says_so(store: Store) -> None:
    collector = Collector(wall_s=40.0)  # 40 s of counters against 200 s of evaluations: over 15 %
    ctx = _ctx(store, collector)
    first, e1 = _stored(store, "k1", _evaluation())
    collect(ctx, CounterTarget(e1, first, "c1"))  # type: ignore[arg-type]
    second, e2 = _stored(store, "k2", _evaluation())
    skipped = collect(ctx, CounterTarget(e2, second, "c2"))  # type: ignore[arg-type]
    assert skipped is not None and skipped.status == CounterStatus.SKIPPED
    assert "40 s against 200 s" in skipped.detail and len(collector.asked) == 1
    for k in range(3, 8):  # more evaluations: the share falls under 15 % again, and the skipped one is retried
        _stored(store, f"k{k}", _evaluation())
    retried = collect(ctx, CounterTarget(e2, second, "asked for node b"))  # type: ignore[arg-type]
    assert retried is not None and retried.status == CounterStatus.COLLECTED and len(collector.asked) == 2


def test_nothing_is_collected_on_the_cpu_untimed_or_in_a_prompts_only_process(store: Store) -> None:
    candidate, eid = _stored(store, "k1", _evaluation())
    collector = Collector()
    target = CounterTarget(eid, candidate, "c1")
    assert collect(_ctx(store, collector, device="cpu"), target) is None  # type: ignore[arg-type]
    assert collect(_ctx(store, collector, prompts_only=True), target) is None  # type: ignore[arg-type]
    assert collect(_ctx(store, None), target) is None  # type: ignore[arg-type]
    untimed_candidate, untimed = _stored(store, "k2", Evaluation(verdict="passed", device="cpu"))
    assert collect(_ctx(store, collector), CounterTarget(untimed, untimed_candidate, "c2")) is None  # type: ignore[arg-type]
    assert collector.asked == [] and find_counters(store, eid) is None


def test_a_collector_that_raises_is_a_failed_report_and_the_run_goes_on(store: Store) -> None:
    """Counters are diagnostics: an executor whose collector raises (a lost worker, a full disk) leaves the
    evaluation as it was, stores the failure with its reason (not paid for again) and raises nothing."""

    def broken(request: SimpleNamespace, shapes: list[str]) -> CounterReport:
        raise OSError("No space left on device")

    candidate, eid = _stored(store, "k1", _evaluation())
    before = store.get_evaluation(eid)
    report = collect(_ctx(store, broken), CounterTarget(eid, candidate, "c1"))  # type: ignore[arg-type]
    assert report is not None and report.status == CounterStatus.FAILED
    assert report.detail == "the executor's counters collector failed: OSError: No space left on device"
    after = store.get_evaluation(eid)
    assert after.counters == report
    assert after.model_dump(exclude={"counters"}) == before.model_dump(exclude={"counters"})


def test_the_planner_sees_what_it_asked_for_and_how_to_ask(store: Store) -> None:
    candidate, eid = _stored(store, "k1", _evaluation())
    ctx = _ctx(store, Collector())
    seed = SolutionRef(candidate_id=candidate, evaluation_id=eid, verdict="passed")
    state = SearchState(world_model=attach_seed(WorldModel(), seed), counter_requests=[ROOT_ID, "ghost"])
    collect(ctx, counter_targets(state)[0])  # type: ignore[arg-type]
    view = planner_counters_view(state, ctx)  # type: ignore[arg-type]
    assert f"## Counters asked for node {ROOT_ID} (passed" in view and "Hardware counters (ncu" in view
    assert "## Counters asked for node ghost: it has no solution to profile" in view
    assert view.endswith("they are collected before your next plan.")
    assert planner_counters_view(state, _ctx(store, None)) == ""  # type: ignore[arg-type]


def test_the_script_asks_for_at_most_two_nodes() -> None:
    script = parse_edit_script({"ops": [], "counters_for": ["n1", "n2"]})
    assert isinstance(script, EditScript) and script.counters_for == ["n1", "n2"]
    errors = parse_edit_script({"ops": [], "counters_for": ["n1", "n2", "n3"]})
    assert isinstance(errors, list) and "counters_for" in errors[0]
