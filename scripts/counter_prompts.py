"""Render the TriMul prompts the model reads, carrying a kernel's hardware counters (issue 57's done-when).

From an evaluation with counters (``bench/counters_cost.py`` writes one to ``$OUT/counters_cost.json``; or, on a GPU,
``--kernel FILE`` evaluates one with ``--counters`` here), in a scratch workspace: the kernel as a run's seed and as
the best of an ended cycle, then the real prompt builders: the first plan (``plan_init``: the seed's counters), a
later plan (``plan_update``: the cycle's evidence and the counters the planner asked for) and the coder's first
attempt of the next cycle (``write_kernel``, through the node itself with a model that only records its prompt).
Needs no GPU once the evaluation exists.

Writes ``plan_init.txt``, ``plan_update.txt`` and ``write_kernel.txt`` to ``--out`` (default ``$OUT`` or a temporary
folder), prints each prompt's counters block, and exits 1 when a prompt lacks one.

Usage: ``python scripts/counter_prompts.py --evaluation $OUT/counters_cost.json`` or
``python scripts/counter_prompts.py --kernel examples/trimul_triton_fast.py`` (GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MARK = "Hardware counters ("


class RecordingModel:
    """Stands in for the coder's model: keeps the prompt, answers with the kernel it was given."""

    def __init__(self, code: str) -> None:
        self.code = code
        self.prompts: list[str] = []

    def complete(self, role: str, call_key: str, prompt: str, **_: object) -> SimpleNamespace:
        self.prompts.append(prompt)
        return SimpleNamespace(reply=f"```python\n{self.code}\n```")


def evaluation_with_counters(args: argparse.Namespace):
    from ksearch.contracts.evaluation import Evaluation

    if args.evaluation is not None:
        record = json.loads(args.evaluation.read_text())
        kernel = REPO / record["kernel"] if "kernel" in record else args.kernel
        return Evaluation.model_validate(record["best"]), kernel.read_text()
    from ksearch.flows.evaluate import evaluate_file

    return evaluate_file("trimul", args.kernel, device="cuda", counters=True), args.kernel.read_text()


def render(evaluation, code: str, workspace: Path) -> dict[str, str]:
    from ksearch.agent.config import RunConfig
    from ksearch.agent.context import SearchContext
    from ksearch.agent.state import BestRef, CycleResult, CycleState, SearchState
    from ksearch.agent.world_model import ROOT_ID, Action, Node, SolutionRef, WorldModel, attach_seed, attach_solution
    from ksearch.contracts.candidate import Candidate
    from ksearch.nodes.plan import planner_prompt
    from ksearch.nodes.write_kernel import write_kernel
    from ksearch.store import Store
    from ksearch.store.counters import record_counters
    from ksearch.tasks.registry import resolve_task
    from ksearch.tools.gpu_specs import spec_for_device

    task = resolve_task("trimul")
    store = Store(workspace / "ksearch.db")
    key = "counter-prompts"
    config = RunConfig(run_id="counter-prompts", task="trimul", model="replay:none", device="cuda", skills=False)
    candidate_id = store.ensure_candidate(
        Candidate(task="trimul", language="triton", code=code, entry_point=task.entry_point)
    )
    evaluation_id = store.record_evaluation(candidate_id, key, evaluation.model_copy(update={"counters": None}))
    if evaluation.counters is not None:
        record_counters(store, evaluation_id, config.run_id, evaluation.counters)
    gpu = spec_for_device(evaluation.device)
    model = RecordingModel(code)

    def never(*_: object) -> None:
        raise AssertionError("the counters are stored: nothing is collected again")

    ctx = SearchContext(
        config=config,
        store=store,
        task=task,
        llm=model,  # type: ignore[arg-type]
        evaluate=never,  # type: ignore[arg-type]
        eval_key=key,
        device_description=f"{evaluation.device}" + (f" ({gpu.name})" if gpu else ""),
        counters=never,  # type: ignore[arg-type]
    )
    ref = SolutionRef(
        candidate_id=candidate_id,
        evaluation_id=evaluation_id,
        verdict=evaluation.verdict.value,
        score=evaluation.score,
        latency_ms=evaluation.latency_ms,
    )
    best = BestRef(
        candidate_id=candidate_id,
        evaluation_id=evaluation_id,
        node_id=ROOT_ID,
        score=evaluation.score,
        latency_ms=evaluation.latency_ms,
    )
    seeded = attach_seed(WorldModel(), ref)
    prompts = {"plan_init": planner_prompt(SearchState(world_model=seeded, best=best), ctx)}

    action = Action(title="Fuse the output gate into the contraction's epilogue", difficulty=3, score=0.7)
    nodes = {**seeded.nodes, "n1": Node(id="n1", parent_id=ROOT_ID, action=action)}
    wm = attach_solution(seeded.model_copy(update={"nodes": nodes}), "n1", ref)
    result = CycleResult(
        cycle_id="c1",
        node_id="n1",
        rounds=1,
        passed=True,
        stop_reason="stagnation",
        base_score=evaluation.score,
        base_candidate_id=candidate_id,
        best_candidate_id=candidate_id,
        best_evaluation_id=evaluation_id,
        best_score=evaluation.score,
        promotion="kept the incumbent: within noise",
    )
    state = SearchState(world_model=wm, evidence=[result], best=best, counter_requests=[ROOT_ID], step=1)
    prompts["plan_update"] = planner_prompt(state, ctx)

    cycle = CycleState(
        cycle_id="c2",
        node_id="n2",
        action=Action(title="Raise occupancy of the projection kernel", difficulty=2, score=0.6),
        base_candidate_id=candidate_id,
        base_score=evaluation.score,
        attempt_budget=3,
    )
    write_kernel(cycle, SimpleNamespace(context=ctx, stream_writer=lambda _: None))  # type: ignore[arg-type]
    prompts["write_kernel"] = model.prompts[0]
    store.close()
    return prompts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evaluation", type=Path, help="a counters_cost.json from bench/counters_cost.py")
    parser.add_argument("--kernel", type=Path, default=REPO / "examples" / "trimul_triton_fast.py")
    parser.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    args = parser.parse_args()
    evaluation, code = evaluation_with_counters(args)
    out = args.out or Path(tempfile.mkdtemp(prefix="counter-prompts-"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="counter-prompts-ws-") as workspace:
        prompts = render(evaluation, code, Path(workspace))
    missing = []
    for name, prompt in prompts.items():
        (out / f"{name}.txt").write_text(prompt)
        start = prompt.find(MARK)
        if start < 0:
            missing.append(name)
            print(f"== {name}: {len(prompt)} characters, NO counters block")
            continue
        block = prompt[start:].split("\n\n")[0]
        print(f"== {name}: {len(prompt)} characters, counters block of {len(block)}:\n{block}\n")
    status = evaluation.counters.status.value if evaluation.counters is not None else "none"
    print(f"counters status: {status}; prompts written to {out}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
