"""A synthetic *timed* run written through the Store's own methods, as a GPU run would leave it, for report tests.

The CPU cannot time kernels, so this is how the report's latency charts and per-shape tables are tested without a GPU.
Every number is made up here and labelled so by the run's model name; nothing is measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ksearch.agent.config import RunConfig
from ksearch.agent.world_model import Action, Node, NodeStatus, SolutionRef, WorldModel
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import (
    Evaluation,
    KernelResources,
    Mismatch,
    ProfiledKernel,
    RooflinePoint,
    ShapeProfile,
    Timing,
    Verdict,
)
from ksearch.store import Store
from ksearch.tasks.trimul import TrimulTask

EVAL_KEY = "synthetic-eval-key|NVIDIA H100 80GB HBM3|harness-2"
DEVICE = "NVIDIA H100 80GB HBM3"
CONFIGS = ("bench_b1_n256", "bench_b1_n512", "bench_b2_n768")
HOSTILE = '</script><script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
"""Text an LLM could write: the report must show it as text, never run it."""
T0 = 1_800_000_000.0


@dataclass
class TimedRun:
    workspace: Path
    run_id: str
    medians: dict[str, list[float]]
    """Per candidate label: the per-config medians written to the store."""
    world_model: WorldModel
    rounds: int
    """Attempt rows, the seed's included."""
    timed_passes: int


def _code(label: str, body: str = "") -> str:
    return (
        f"import torch\n\n\ndef custom_kernel(data):\n    # {label}\n{body}    x, mask, weights, config = data\n"
        "    return x\n"
    )


def _timed(medians: list[float], device: str = DEVICE) -> Evaluation:
    timings = [
        Timing(config=c, median_ms=m, mean_ms=m * 1.01, stdev_ms=m * 0.02, samples=50, method="gpumode")
        for c, m in zip(CONFIGS, medians, strict=True)
    ]
    latency = 1.0
    for m in medians:
        latency *= m
    latency **= 1.0 / len(medians)
    return Evaluation(
        verdict=Verdict.PASSED,
        device=device,
        timed=True,
        score=1.0 / latency,
        latency_ms=latency,
        timings=timings,
        configs_passed=18,
        configs_total=18,
        duration_s=70.0,
        environment={
            "torch": "2.9.0",
            "triton": "3.5.0",
            "harness": "ksearch-evaluator-2",
            "device_name": device,
            "timing_method": "gpumode",
            "stage_seconds": "correctness=20s timing=45s check=5s",
        },
    )


def _with_evidence(evaluation: Evaluation) -> Evaluation:
    """The best's evidence as a GPU evaluation leaves it: a roofline point and a one-call profile per shape, and the
    resources of its kernels (floors at a made-up 25 % of each median)."""
    roofline = [
        RooflinePoint(
            config=t.config,
            measured_ms=t.median_ms,
            floor_ms=t.median_ms / 4,
            memory_ms=t.median_ms / 4,
            compute_ms=t.median_ms / 8,
            bound="memory",
            fraction=0.25,
            dtype="bf16",
            gpu="H100 SXM5 80GB",
        )
        for t in evaluation.timings
    ]
    profile = [
        ShapeProfile(
            config=t.config,
            call_ms=t.median_ms,
            kernel_ms=t.median_ms * 0.8,
            host_gap_ms=t.median_ms * 0.2,
            launches=5,
            kernels=[ProfiledKernel(name="_contract_kernel", launches=1, time_ms=t.median_ms * 0.6, share=0.6)],
            other_kernels=3,
        )
        for t in evaluation.timings
    ]
    resources = [
        KernelResources(
            name="_contract_kernel", shared_bytes=73728, registers=168, spilled_bytes=0, num_warps=8, num_stages=3
        )
    ]
    return evaluation.model_copy(update={"roofline": roofline, "profile": profile, "resources": resources})


def write_timed_run(workspace: Path, run_id: str = "trimul-timed", *, with_reference: bool = True) -> TimedRun:
    """A finished 5-round TriMul run on an H100 from a seed: rounds fail and pass, two nodes solved, one failed."""
    store = Store(workspace / "ksearch.db")
    try:
        return _write(store, workspace, run_id, with_reference)
    finally:
        store.close()


def _write(store: Store, workspace: Path, run_id: str, with_reference: bool) -> TimedRun:
    task = TrimulTask()
    seed = Candidate(task="trimul", language="triton", code=_code("seed"), entry_point="custom_kernel")
    config = RunConfig(
        run_id=run_id,
        task="trimul",
        model="replay:synthetic-timed-run",
        device="cuda",
        max_rounds=5,
        stagnation_window=2,
        seed_from="/somewhere/seed.py",
        seed_candidate_id=seed.id,
    )
    store.create_run(
        {
            "id": run_id,
            "task": "trimul",
            "model": config.model,
            "language": "triton",
            "device": "cuda",
            "config": config.model_dump(mode="json"),
            "created_at": T0,
        }
    )
    medians = {
        "seed": [2.0, 4.0, 8.0],
        "a.1": [1.5, 3.0, 6.5],
        "a1.1": [1.0, 2.2, 5.0],
    }
    candidates = {
        "seed": seed,
        "a.1": Candidate(task="trimul", language="triton", code=_code("a.1 fused gates"), entry_point="custom_kernel"),
        "a.2": Candidate(
            task="trimul", language="triton", code=_code("a.2", "    syntax error here(\n"), entry_point="custom_kernel"
        ),
        "b.1": Candidate(task="trimul", language="triton", code=_code("b.1 wrong"), entry_point="custom_kernel"),
        "a1.1": Candidate(
            task="trimul", language="triton", code=_code("a1.1 fp16 contraction"), entry_point="custom_kernel"
        ),
        "b.2": Candidate(task="trimul", language="triton", code=_code("b.2 crashes"), entry_point="custom_kernel"),
    }
    evaluations = {
        "seed": _timed(medians["seed"]),
        "a.1": _timed(medians["a.1"]),
        "a.2": Evaluation(verdict=Verdict.COMPILE_ERROR, device=DEVICE, log="SyntaxError: '(' was never closed"),
        "b.1": Evaluation(
            verdict=Verdict.INCORRECT,
            device=DEVICE,
            configs_passed=3,
            configs_total=18,
            mismatch=Mismatch(config="bench_b1_n256", message="max abs error 3.1 " + HOSTILE),
        ),
        "a1.1": _with_evidence(_timed(medians["a1.1"])),
        "b.2": Evaluation(verdict=Verdict.RUNTIME_ERROR, device=DEVICE, log="RuntimeError: illegal memory access"),
    }
    ev_ids = {}
    for label, cand in candidates.items():
        store.ensure_candidate(cand)
        ev_ids[label] = store.record_evaluation(cand.id, EVAL_KEY, evaluations[label])
    if with_reference:
        reference = Candidate(
            task="trimul", language="triton", code=task.reference_submission_source(), entry_point="custom_kernel"
        )
        store.ensure_candidate(reference)
        medians["reference"] = [3.0, 6.0, 12.0]
        store.record_evaluation(reference.id, EVAL_KEY, _timed(medians["reference"]))

    rounds = [  # (label, cycle, attempt, round, node, prompt kind, minutes after the start)
        ("seed", "seed", 0, 0, "root", "seed", 0.5),
        ("a.1", "c1", 1, 1, "a", "action_on_base", 3.0),
        ("a.2", "c1", 2, 2, "a", "improve", 4.0),
        ("b.1", "c2", 1, 3, "b", "action_on_base", 7.0),
        ("a1.1", "c3", 1, 4, "a1", "action_on_base", 11.0),
        ("b.2", "c2", 2, 5, "b", "debug", 12.5),
    ]
    for label, cycle, attempt, round_index, node, kind, minutes in rounds:
        ev = evaluations[label]
        store.record_attempt(
            {
                "run_id": run_id,
                "cycle_id": cycle,
                "attempt": attempt,
                "round_index": round_index,
                "node_id": node,
                "prompt_kind": kind,
                "candidate_id": candidates[label].id,
                "evaluation_id": ev_ids[label],
                "verdict": ev.verdict.value,
                "score": ev.score,
                "error": None if ev.passed else ev.summary(),
                "created_at": T0 + 60 * minutes,
            }
        )

    def ref(label: str, round_index: int) -> SolutionRef:
        ev = evaluations[label]
        return SolutionRef(
            candidate_id=candidates[label].id,
            evaluation_id=ev_ids[label],
            verdict="passed",
            score=ev.score,
            latency_ms=ev.latency_ms,
            round_index=round_index,
        )

    wm = WorldModel(
        kernel_summary="TriMul is dominated by the N^3 contraction; " + HOSTILE,
        open_questions=["Is fp16 accumulation accurate enough for Cauchy inputs?"],
        nodes={
            "root": Node(id="root", status=NodeStatus.SOLVED, solution=ref("seed", 0)),
            "a": Node(
                id="a",
                parent_id="root",
                decision="Fusion",
                choice="fuse the gates",
                action=Action(title="Fuse the gate projections", difficulty=2, score=0.8, expected_speedup=1.3),
                rating=7.5,
                status=NodeStatus.SOLVED,
                solution=ref("a.1", 1),
                cycles=1,
                notes="FOLLOW_THROUGH: yes " + HOSTILE,
            ),
            "b": Node(
                id="b",
                parent_id="root",
                decision="Precision",
                choice="bf16 everywhere",
                action=Action(title="Run the contraction in bf16", difficulty=3, score=0.6),
                status=NodeStatus.FAILED,
                cycles=1,
                failed_cycles=1,
            ),
            "a1": Node(
                id="a1",
                parent_id="a",
                action=Action(title="fp16 inputs to the contraction", score=0.7),
                rating=8.0,
                status=NodeStatus.SOLVED,
                solution=ref("a1.1", 4),
                cycles=1,
            ),
            "a2": Node(id="a2", parent_id="a", action=Action(title="Split-K over N", difficulty=4, score=0.4)),
        },
    )
    store.record_snapshot(run_id, 0, "setup", WorldModel().model_dump_json())
    store.record_snapshot(run_id, 3, "prune", wm.model_dump_json())
    calls = [
        ("plan:0:0", "planner", 1200, 800, 0.03, 0.2),
        ("write:c1:1", "coder", 3000, 2500, 0.08, 1.0),
        ("write:c1:2", "coder", 3500, 2600, 0.09, 2.0),
        ("plan:1:0", "planner", 2000, 600, 0.04, 5.0),
        ("write:c2:1", "coder", 3100, 2400, 0.08, 6.0),
        ("write:c3:1", "coder", 3300, 2700, 0.09, 10.0),
        ("write:c2:2", "coder", 3600, 2200, 0.08, 12.0),
    ]
    for key, role, tin, tout, cost, minutes in calls:
        store.record_llm_call(
            run_id,
            {
                "call_key": key,
                "role": role,
                "model": "synthetic",
                "prompt": "p",
                "reply": "r",
                "input_tokens": tin,
                "output_tokens": tout,
                "cost_usd": cost,
                "latency_s": 20.0,
                "retries": 1 if key == "plan:1:0" else 0,
                "created_at": T0 + 60 * minutes,
            },
        )
    best = evaluations["a1.1"]
    store.update_run(
        run_id,
        status="finished",
        done_reason="round budget spent (5/5)",
        rounds_used=5,
        best_candidate_id=candidates["a1.1"].id,
        best_evaluation_id=ev_ids["a1.1"],
        best_score=best.score,
    )
    store.db["runs"].update(run_id, {"updated_at": T0 + 60 * 13})
    return TimedRun(
        workspace=workspace, run_id=run_id, medians=medians, world_model=wm, rounds=len(rounds), timed_passes=3
    )


def hostile_marker_in(html: str) -> bool:
    """True if the hostile text appears unescaped (as markup) anywhere in a page."""
    return HOSTILE in html or json.dumps(HOSTILE)[1:-1] in html
