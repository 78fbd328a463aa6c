"""A TriMul search after two parallel cycles, as examples/trimul-record reached round 17 (issue 57): its real kernels
(the record's replies), its per-shape times (trajectory.md), a profile and resources per attempt, on an H100. The
profiles and spreads are made up in the record's proportions (the record kept only three shapes' profiles); the
profiled call's wall time is twice the timed mean, as the record's b0 read 0.60 ms against 0.29 ms timed.

``planner_prompt`` and ``coder_prompt`` render the prompts the model would read there."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from ksearch.agent.config import RunConfig
from ksearch.agent.cycle_logic import CycleProgress
from ksearch.agent.state import BestRef, CycleResult, CycleState, SearchState, SiblingCycle
from ksearch.agent.world_model import ROOT_ID, Action, Node, NodeStatus, SolutionRef, WorldModel
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import (
    Evaluation,
    KernelResources,
    ProfiledKernel,
    ShapeProfile,
    Timing,
)
from ksearch.flows.services import device_description
from ksearch.llm.parsing import extract_code
from ksearch.store import Store
from ksearch.tasks.trimul import TrimulTask
from ksearch.tools.evaluator.parent.evidence import roofline_points
from ksearch.tools.fingerprint import DeviceInfo

RECORD = Path(__file__).resolve().parents[2] / "examples" / "trimul-record"
KEY = "trimul|h100"
RUN = "rec"
H100 = DeviceInfo(
    device="cuda:0",
    python="3.12",
    torch="2.11.0",
    triton="3.6.0",
    gpu="NVIDIA H100 80GB HBM3",
    sms="132",
    memory_gb="79",
    capability="9.0",
    cuda="13.0",
    l2_mb="50",
)
SHAPES = [c.name for c in TrimulTask().benchmark_configs("cuda")]

# per-shape means (ms) of the record's rounds 10 (the parent), 13, 14, 15 and 16 (trajectory.md)
TIMES = {
    "base": [0.309, 1.040, 0.425, 0.524, 1.875, 1.718, 3.138],
    "c7_1": [0.312, 1.054, 0.470, 0.521, 1.809, 1.763, 3.185],
    "c7_2": [0.450, 1.020, 0.504, 0.513, 1.775, 1.857, 3.255],
    "c8_1": [0.458, 1.143, 0.528, 0.604, 1.984, 1.863, 3.325],
    "c8_2": [0.376, 1.024, 0.472, 0.537, 1.779, 1.676, 3.049],
}
REPLY = {"base": "write_c5_2", "c7_1": "write_c7_1", "c7_2": "write_c7_2", "c8_1": "write_c8_1", "c8_2": "write_c8_2"}
KERNELS = {  # the kernels of each code and their share of its kernel time
    "base": [("_proj_gate_gemm", 0.45), ("_out_norm_gate_proj", 0.25), ("nvjet_sm90_hsh_192x192_64x4", 0.18)],
    "c7": [("_ln_proj_rows", 0.52), ("_out_norm_gate_proj", 0.27), ("nvjet_sm90_hsh_192x192_64x4", 0.19)],
    "c8": [("_proj_gate_gemm", 0.47), ("_out_norm_gate_proj", 0.22), ("nvjet_sm90_hsh_192x192_64x4", 0.19)],
}


def code(label: str) -> str:
    return extract_code((RECORD / "replies" / f"{REPLY[label]}.md").read_text(encoding="utf-8"), "triton")


def evaluation(label: str) -> Evaluation:
    times = TIMES[label]
    kernels = KERNELS[label.split("_")[0]]
    timings, profile = [], []
    for name, ms in zip(SHAPES, times, strict=True):
        timings.append(
            Timing(
                config=name,
                median_ms=ms * 0.99,
                mean_ms=ms,
                stdev_ms=ms * 0.03,
                samples=70,
                method="gpumode-benchmark",
                headline="mean",
                windows_left_out=30,
            )
        )
        busy = ms * 0.8
        profile.append(
            ShapeProfile(
                config=name,
                call_ms=2 * ms,
                kernel_ms=busy,
                host_gap_ms=2 * ms - busy,
                launches=6,
                kernels=[
                    ProfiledKernel(name=k, launches=1, time_ms=round(busy * share, 5), share=busy * share / (2 * ms))
                    for k, share in kernels
                ],
            )
        )
    roofline = roofline_points(TrimulTask(), timings, H100.gpu or "")
    latency, score = TrimulTask().score(timings)
    return Evaluation(
        verdict="passed",
        device="NVIDIA H100 80GB HBM3",
        timed=True,
        score=score,
        latency_ms=latency,
        timings=timings,
        configs_passed=18,
        configs_total=18,
        roofline=roofline,
        profile=profile,
        resources=[
            KernelResources(name=k, shared_bytes=49152, registers=162, spilled_bytes=0, num_warps=4, num_stages=1)
            for k, _ in kernels[:2]
        ],
    )


@dataclass
class Fixture:
    store: Store
    ids: dict[str, tuple[str, str]]
    """label -> (candidate id, evaluation id)"""
    state: SearchState
    ctx: SimpleNamespace


def _attempt(store: Store, cycle: str, attempt: int, round_index: int, ids: tuple[str, str], kind: str) -> None:
    store.record_attempt(
        {
            "run_id": RUN,
            "cycle_id": cycle,
            "attempt": attempt,
            "round_index": round_index,
            "node_id": {"c7": "fusedrow", "c8": "outstages"}[cycle],
            "prompt_kind": kind,
            "candidate_id": ids[0],
            "evaluation_id": ids[1],
            "verdict": "passed",
            "score": None,
            "error": None,
        }
    )


def _solution(ids: tuple[str, str], ev: Evaluation, **extra: object) -> SolutionRef:
    return SolutionRef(
        candidate_id=ids[0],
        evaluation_id=ids[1],
        verdict="passed",
        score=ev.score,
        latency_ms=ev.latency_ms,
        **extra,  # type: ignore[arg-type]
    )


def build(tmp_path: Path, **config: object) -> Fixture:
    """The store, state and context of the record's round-17 planning step, on an H100."""
    store = Store(tmp_path / "ksearch.db")
    store.create_run({"id": RUN, "task": "trimul", "model": "replay"})
    ids, evals = {}, {}
    for label in TIMES:
        evals[label] = evaluation(label)
        candidate = store.ensure_candidate(Candidate(task="trimul", language="triton", code=code(label)))
        ids[label] = (candidate, store.record_evaluation(candidate, KEY, evals[label]))
    _attempt(store, "c7", 1, 13, ids["c7_1"], "action_on_base")
    _attempt(store, "c8", 1, 15, ids["c8_1"], "action_on_base")
    _attempt(store, "c7", 2, 14, ids["c7_2"], "improve")
    _attempt(store, "c8", 2, 16, ids["c8_2"], "improve")
    nodes = {
        ROOT_ID: Node(id=ROOT_ID),
        "noweightops": Node(
            id="noweightops",
            parent_id=ROOT_ID,
            action=Action(title="Weights packed to fp16 by one Triton launch", difficulty=2, score=0.5),
            status=NodeStatus.SOLVED,
            solution=_solution(ids["base"], evals["base"]),
            cycles=1,
        ),
        "fusedrow": Node(
            id="fusedrow",
            parent_id="noweightops",
            action=Action(
                title="Input side in one Triton kernel: LayerNorm prologue, five projections, gating epilogue",
                difficulty=4,
                score=0.6,
                expected_speedup=1.15,
            ),
        ),
        "outstages": Node(
            id="outstages",
            parent_id="noweightops",
            action=Action(title="Fewer pipeline stages in the two big Triton kernels", difficulty=1, score=0.55),
        ),
        "hybrid": Node(
            id="hybrid",
            parent_id=ROOT_ID,
            action=Action(title="cuBLAS projection GEMM, then a Triton gating pass", difficulty=2, score=0.65),
            status=NodeStatus.SOLVED,
            solution=_solution(ids["c8_1"], evals["c8_1"]),
            cycles=1,
        ),
        "hybrid_og": Node(
            id="hybrid_og",
            parent_id="hybrid",
            action=Action(title="Out gate read from the cuBLAS result in the output kernel", difficulty=2, score=0.2),
        ),
        "tritonbmm": Node(
            id="tritonbmm",
            parent_id=ROOT_ID,
            action=Action(
                title="Triton contraction with the output LayerNorm in its epilogue", difficulty=5, score=0.3
            ),
        ),
    }
    wm = WorldModel(kernel_summary="TriMul on an H100.", nodes=nodes)
    results = [
        CycleResult(
            cycle_id="c7",
            node_id="fusedrow",
            rounds=2,
            passed=True,
            stop_reason="no improvement over base",
            base_score=evals["base"].score,
            base_candidate_id=ids["base"][0],
            best_candidate_id=ids["c7_1"][0],
            best_evaluation_id=ids["c7_1"][1],
            best_score=evals["c7_1"].score,
            promotion="not promoted (single measurement not better)",
        ),
        CycleResult(
            cycle_id="c8",
            node_id="outstages",
            rounds=2,
            passed=True,
            stop_reason="no improvement over base",
            base_score=evals["base"].score,
            base_candidate_id=ids["base"][0],
            best_candidate_id=ids["c8_2"][0],
            best_evaluation_id=ids["c8_2"][1],
            best_score=evals["c8_2"].score,
            promotion="not promoted (single measurement not better)",
        ),
    ]
    for r, label in zip(results, ("c7_1", "c8_2"), strict=True):  # prune has attached each cycle's best
        wm.nodes[r.node_id] = wm.nodes[r.node_id].model_copy(
            update={"status": NodeStatus.SOLVED, "cycles": 1, "solution": _solution(ids[label], evals[label])}
        )
    best = BestRef(
        candidate_id=ids["base"][0],
        evaluation_id=ids["base"][1],
        node_id="noweightops",
        score=evals["base"].score,
        latency_ms=evals["base"].latency_ms,
    )
    state = SearchState(world_model=wm, step=4, rounds_used=16, evidence=results, best=best, cycles_started=8)
    task = TrimulTask()
    settings = {"max_attempts_per_cycle": 2, "parallel_cycles": 2, "skills": False, **config}
    run_config = RunConfig(run_id=RUN, task="trimul", model="replay:x", device="cuda", **settings)  # type: ignore[arg-type]
    ctx = SimpleNamespace(
        config=run_config,
        store=store,
        task=task,
        run_id=RUN,
        eval_key=KEY,
        device_description=device_description(H100, task, None),
        skills=[],
        skill_context=None,
        counters=None,  # no Nsight Compute here: the counters' section is another test's (test_counter_prompts)
        prompts_only=False,
    )
    return Fixture(store=store, ids=ids, state=state, ctx=ctx)


class _Asked(Exception):
    """Raised by the capturing model once it has the prompt."""


class _CapturingLLM:
    """Takes the prompt of the one call a node makes and stops the node there."""

    def __init__(self) -> None:
        self.prompt = ""

    def complete(self, role: str, call_key: str, prompt: str, **_: object) -> None:
        self.prompt = prompt
        raise _Asked

    def complete_json(self, role: str, call_key: str, prompt: str, **_: object) -> None:
        self.prompt = prompt
        raise _Asked


def _asked(node, state: object, fx: Fixture) -> str:  # noqa: ANN001 - a graph node function
    llm = _CapturingLLM()
    ctx = SimpleNamespace(**{**vars(fx.ctx), "llm": llm})
    runtime = SimpleNamespace(context=ctx, stream_writer=lambda event: None)
    try:
        node(state, runtime)
    except _Asked:
        return llm.prompt
    raise AssertionError("the node made no LLM call")


def planner_prompt(fx: Fixture) -> str:
    """The planner's prompt at this step, as the plan node sends it."""
    from ksearch.nodes.plan import plan

    return _asked(plan, fx.state, fx)


def coder_state(fx: Fixture) -> CycleState:
    """Cycle c8's second attempt, written while c7 (beside it) has finished both of its attempts."""
    base = fx.ids["base"][0]
    c8_1 = fx.ids["c8_1"]
    first = evaluation("c8_1")
    fields: dict[str, object] = {
        "cycle_id": "c8",
        "node_id": "outstages",
        "action": fx.state.world_model.nodes["outstages"].action,
        "base_candidate_id": base,
        "base_score": evaluation("base").score,
        "attempt_budget": 2,
        "attempt": 1,
        "progress": CycleProgress(
            attempts=1,
            best_score=first.score,
            best_candidate_id=c8_1[0],
            best_evaluation_id=c8_1[1],
            passed_any=True,
            last_passed=True,
        ),
        "last_candidate_id": c8_1[0],
        "last_evaluation_id": c8_1[1],
        "tree_view": "(tree)",
    }
    title = fx.state.world_model.nodes["fusedrow"].action.title  # type: ignore[union-attr]
    fields["siblings"] = [SiblingCycle(cycle_id="c7", node_id="fusedrow", title=title, base_candidate_id=base)]
    return CycleState(**fields)  # type: ignore[arg-type]


def coder_prompt(fx: Fixture, state: CycleState | None = None) -> str:
    """The coder's prompt for ``state`` (by default ``coder_state``), as the write_kernel node sends it."""
    from ksearch.nodes.write_kernel import write_kernel

    return _asked(write_kernel, state or coder_state(fx), fx)
