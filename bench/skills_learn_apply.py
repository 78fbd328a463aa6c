"""Skills end to end: learn skills from one expert kernel, then apply one of them in a search, with SCRIPTED replies.

Usage (from the repository root; no network, no model):

    python bench/skills_learn_apply.py OUT --task trimul --device cuda     # the GPU run (~5 minutes on an H100)
    python bench/skills_learn_apply.py OUT --task softmax --device cpu     # the same pipeline on the CPU interpreter

What it does, all through ksearch's own flows (the real walk, lifter, store, graph, evaluator):

1. ``skills learn``: KLineage's backward walk over the expert kernel (TriMul: ``examples/trimul_triton.py``;
   softmax: ``examples/softmax_expert.py``). The simplifier's proposals and the lifter's drafts are hand-written
   replies (written to OUT/learn-replies.jsonl, labelled as scripted); the evaluator decides every step: a removal
   is accepted only when the simpler kernel passes every correctness test and, on a GPU, is not significantly faster
   than the kernel it came from (paired, interleaved re-measurement). TriMul's walk proposes three removals: the fp16
   tensor-core operands of the N^3 contraction, then dropping the mask (wrong on masked inputs: the evaluator must
   reject it), then the channel-major layout written by the projection kernel. Each accepted step, reversed, becomes
   a candidate skill.
2. A two-round search on the same task (``start_run``, scripted planner and coder replies): round 1 writes a
   starting kernel that lacks the skill (code the skill was not learned from: different contraction tiles), round 2
   binds the learned skill (TriMul: fp16 contraction operands; softmax: online softmax) and writes the kernel with it
   applied. The cycle's end records a trial on the skill with the paired speedup over its parent; on a GPU a
   significant speedup on this held-out code admits the skill.

Results go to OUT: ``results.json`` (rewritten after each phase, so a run cut short keeps what it measured), the
learn report, the planner and coder prompts that show the skill, the workspace (``OUT/ws``, inspect it with
``ksearch --workspace OUT/ws skills list`` or ``ksearch --workspace OUT/ws show search``). Running it again on the same
OUT reuses every recorded reply and cached evaluation (a finished search is not run again; an interrupted one is
resumed), so a run cut off by a time limit can simply be started again; use a new OUT for another ``--walk``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ksearch.agent.config import RunConfig  # noqa: E402
from ksearch.errors import RunNotFoundError  # noqa: E402
from ksearch.flows import run as runner  # noqa: E402
from ksearch.flows import skills as skills_flow  # noqa: E402
from ksearch.flows.placement import resolve_device  # noqa: E402
from ksearch.llm.parsing import extract_code  # noqa: E402
from ksearch.llm.replay import load_replay_entries  # noqa: E402
from ksearch.skills.evidence import EvidenceKind  # noqa: E402
from ksearch.skills.library import library_views, load_evidence  # noqa: E402

LEARN_SESSION = "learn-expert"
SEARCH_RUN = "search"
SCRIPT_HEADER = (
    "// SCRIPTED replies written by hand by the ksearch authors for bench/skills_learn_apply.py: NOT a real model's\n"
    "// output. The evaluator, not these replies, decides which steps are accepted and what is measured.\n"
)


def replace_once(code: str, old: str, new: str) -> str:
    """``code`` with ``old`` replaced; fails loudly when the expert changed and the edit no longer applies."""
    if code.count(old) != 1:
        raise SystemExit(f"scripted edit does not apply ({code.count(old)} matches): {old[:80]!r}")
    return code.replace(old, new)


def fenced(code: str) -> str:
    return f"```python\n{code}```\n"


@dataclass
class Scenario:
    task: str
    expert_file: Path
    learn_replies: list[tuple[str, str]]
    """(call key, reply) for the walk's ``simplify:<k>`` and the lifter's ``lift:<k>`` calls."""
    apply_category: str
    """The learned skill the search binds."""
    parent_code: str
    parent_title: str
    child_code: str
    child_title: str


# --------------------------------------------------------------------------------------------------------------------
# TriMul


def _trimul_variants(expert: str) -> dict[str, str]:
    """The expert and the hand-written simplifications of it; module docstrings say what each one is."""
    body = expert[expert.index('"""', 3) + 3 :]  # the expert without its module docstring

    def doc(text: str) -> str:
        return f'"""{text}"""\n' + body

    # step 1: the contraction's operands in fp16 on tensor cores -> float32 operands, exact (IEEE) float32 dot
    fp32 = doc(
        "TriMul in Triton (examples/trimul_triton.py without fp16 contraction operands: left/right are "
        "float32 and the contraction is an exact float32 dot)."
    )
    fp32 = replace_once(
        fp32, "tl.store(out_ptr + off, val.to(tl.float16), mask=out_ok)", "tl.store(out_ptr + off, val, mask=out_ok)"
    )
    fp32 = replace_once(fp32, "acc += tl.dot(a, bt)", 'acc += tl.dot(a, bt, input_precision="ieee")')
    fp32 = replace_once(
        fp32,
        "left = torch.empty((B, H, N, N), dtype=torch.float16, device=dev)",
        "left = torch.empty((B, H, N, N), dtype=torch.float32, device=dev)",
    )
    fp32 = replace_once(
        fp32,
        "right = torch.empty((B, H, N, N), dtype=torch.float16, device=dev)",
        "right = torch.empty((B, H, N, N), dtype=torch.float32, device=dev)",
    )

    # a wrong proposal: treat the mask as all ones (masked configurations fail)
    no_mask = replace_once(
        fp32,
        "        m = tl.load(mask_ptr + rows, mask=row_ok, other=0.0)\n        val = acc_p * gate * m[:, None]\n",
        "        val = acc_p * gate\n",
    )

    # step 3 (after step 1): the projection writes row-major [B*N*N, H]; torch makes the channel-major copy
    row_major = doc(
        "TriMul in Triton (examples/trimul_triton.py without fp16 contraction operands and without the "
        "channel-major store: the projection writes row-major, torch permutes)."
    )
    row_major = fp32.replace(fp32[: fp32.index('"""', 3) + 3], row_major[: row_major.index('"""', 3) + 3])
    row_major = replace_once(
        row_major, "    GATED_PROJ: tl.constexpr, CHANNEL_MAJOR: tl.constexpr,\n", "    GATED_PROJ: tl.constexpr,\n"
    )
    row_major = replace_once(
        row_major,
        row_major[row_major.index("    if CHANNEL_MAJOR:\n") : row_major.index("@triton.jit\ndef _contract_kernel")],
        "    tl.store(out_ptr + rows[:, None] * H + hs[None, :], val, mask=out_ok)\n\n\n",
    )
    row_major = replace_once(
        row_major,
        "left = torch.empty((B, H, N, N), dtype=torch.float32, device=dev)",
        "left_rows = torch.empty((M, H), dtype=torch.float32, device=dev)",
    )
    row_major = replace_once(
        row_major,
        "right = torch.empty((B, H, N, N), dtype=torch.float32, device=dev)",
        "right_rows = torch.empty((M, H), dtype=torch.float32, device=dev)",
    )
    row_major = replace_once(row_major, "for wp, wg, out, gated, channel_major in (", "for wp, wg, out, gated in (")
    row_major = replace_once(
        row_major, 'weights["left_gate.weight"], left, True, True),', 'weights["left_gate.weight"], left_rows, True),'
    )
    row_major = replace_once(
        row_major,
        'weights["right_gate.weight"], right, True, True),',
        'weights["right_gate.weight"], right_rows, True),',
    )
    row_major = replace_once(
        row_major, 'weights["out_gate.weight"], gate, False, False),', 'weights["out_gate.weight"], gate, False),'
    )
    row_major = replace_once(row_major, "GATED_PROJ=gated, CHANNEL_MAJOR=channel_major,", "GATED_PROJ=gated,")
    row_major = replace_once(
        row_major,
        "    out = torch.empty((B, H, N, N), dtype=torch.float32, device=dev)\n",
        "    left = left_rows.view(B, N, N, H).permute(0, 3, 1, 2).contiguous()\n"
        "    right = right_rows.view(B, N, N, H).permute(0, 3, 1, 2).contiguous()\n"
        "    out = torch.empty((B, H, N, N), dtype=torch.float32, device=dev)\n",
    )

    # the search's own starting point: step 1's kernel with smaller contraction tiles; and the skill applied to it
    tiles = ("    bi = min(64, _pow2_at_least(N))\n", "    bi = min(32, _pow2_at_least(N))\n")
    parent = replace_once(fp32, *tiles)
    parent = parent.replace(
        parent[: parent.index('"""', 3) + 3],
        '"""TriMul in Triton: float32 channel-major operands, an exact float32 contraction in 32x32 tiles."""',
    )
    child = replace_once(expert, *tiles)
    child = child.replace(
        child[: child.index('"""', 3) + 3],
        '"""TriMul in Triton: fp16 channel-major operands on tensor cores (float32 accumulation) in '
        '32x32 contraction tiles."""',
    )
    for name, code in (("fp32", fp32), ("row_major", row_major), ("parent", parent)):
        assert "dtype=torch.float16" not in code, name
    assert "CHANNEL_MAJOR" not in row_major and "dtype=torch.float16" in child
    return {"fp32": fp32, "no_mask": no_mask, "row_major": row_major, "parent": parent, "child": child}


def _simplify(category: str, locus: str, removed: str, backward_edit: str, reason: str, code: str) -> str:
    head = {
        "done": False,
        "category": category,
        "locus": locus,
        "removed": removed,
        "backward_edit": backward_edit,
        "reason": reason,
    }
    return json.dumps(head) + "\n\n" + fenced(code)


def trimul_scenario(walk: str, arch_is_gpu: bool) -> Scenario:
    expert_file = REPO / "examples" / "trimul_triton.py"
    v = _trimul_variants(expert_file.read_text(encoding="utf-8"))
    fp16 = {
        "category": "fp16_contraction_operands",
        "intent": "Run the triangle contraction on tensor cores by storing its two operands in fp16 with float32 "
        "accumulation.",
        "anchor": "trimul.contract",
        "recipe": "Have the projection kernel store left and right as fp16 (`val.to(tl.float16)`, buffers "
        "`torch.empty((B, H, N, N), dtype=torch.float16)`), keep the accumulator float32 "
        "(`acc = tl.zeros(..., tl.float32)`; `acc += tl.dot(a, bt)` with the default precision) and keep every "
        "LayerNorm statistic in float32. Tiles: BLOCK_I = BLOCK_J = 64 and BLOCK_K = 32 are a good start on sm90.",
        "before_snippet": 'acc += tl.dot(a, bt, input_precision="ieee")',
        "after_snippet": "acc += tl.dot(a, bt)  # fp16 operands, float32 accumulator",
        "preconditions": [
            {
                "category": "data_types",
                "text": "the tolerance admits fp16 operands (TriMul: 2e-2) with a float32 "
                "accumulator; gated, masked projections keep |values| small enough for fp16",
            },
            {
                "category": "layout",
                "text": "the operands are laid out so that each (b, h) slice is a plain N x N "
                "matrix (channel-major), so the contraction is one batched GEMM",
            },
            {"category": "hardware", "text": "fp16 tensor cores (sm70 and later)"},
        ],
        "requires": [{"locus": "hardware", "name": "tensor_cores"}] if arch_is_gpu else [],
        "provides": [{"locus": "trimul.contract", "name": "fp16_operands", "detect": ["dtype=torch.float16"]}],
        "conflicts": [],
        "effects": [
            "the N^3 contraction moves from float32 FMA to fp16 tensor-core MMA, and its operand traffic halves"
        ],
        "risks": [
            "the LayerNorm statistics must stay float32 (Cauchy inputs have huge outliers)",
            "the mask must still be applied before the contraction: dropping it fails the masked tests",
        ],
    }
    channel_major = {
        "category": "channel_major_store",
        "intent": "Write the gated projections straight into the layout the contraction reads, instead of "
        "permuting a row-major copy.",
        "anchor": "trimul.proj_store",
        "recipe": "Give the projection kernel a constexpr CHANNEL_MAJOR; when set, split each row index into "
        "b = row // (N*N) and p = row - b*N*N and store val at b*H*N*N + h*N*N + p, so left and right come out as "
        "[B, H, N, N] and the host needs no permute().contiguous() copy.",
        "before_snippet": "left = left_rows.view(B, N, N, H).permute(0, 3, 1, 2).contiguous()",
        "after_snippet": "off = b[:, None] * (H * NN) + hs[None, :] * NN + p[:, None]",
        "preconditions": [
            {"category": "layout", "text": "the consumer reads each (b, h) slice as an N x N matrix"},
            {"category": "storage", "text": "rows are stored as b*N*N + i*N + k, contiguous in C"},
        ],
        "requires": [],
        "provides": [{"locus": "trimul.proj_store", "name": "channel_major_store", "detect": ["CHANNEL_MAJOR"]}],
        "conflicts": [],
        "effects": ["one fewer full read and write of the two [B, N, N, H] operands"],
        "risks": ["strided stores along p: keep BLOCK_M a multiple of 32 so the stores stay coalesced"],
    }
    replies = [
        (
            "simplify:1",
            _simplify(
                "fp16_contraction_operands",
                "trimul.contract",
                "fp16 operands of the triangle contraction (tensor cores)",
                "left/right stored as float32; the contraction's tl.dot runs in IEEE float32",
                "left and right are allocated as torch.float16 and stored with .to(tl.float16)",
                v["fp32"],
            ),
        ),
    ]
    if walk == "full":
        replies += [
            (
                "simplify:2",
                _simplify(
                    "fused_mask",
                    "trimul.proj_epilogue",
                    "the mask multiply in the projection epilogue (the mask is all ones in most configurations)",
                    "val = acc_p * gate, without the mask",
                    "the kernel loads mask_ptr per row",
                    v["no_mask"],
                ),
            ),
            (
                "simplify:3",
                _simplify(
                    "channel_major_store",
                    "trimul.proj_store",
                    "the channel-major store of the projection kernel",
                    "store row-major [B*N*N, H]; torch permutes to [B, H, N, N] before the contraction",
                    "CHANNEL_MAJOR branch in _ln_proj_kernel",
                    v["row_major"],
                ),
            ),
            (
                "simplify:4",
                json.dumps(
                    {
                        "done": True,
                        "reason": "the remaining mechanisms (fused LayerNorm and "
                        "projection, the fp16 projection dot) are kept for this demonstration",
                    }
                ),
            ),
            ("lift:3", json.dumps(channel_major)),
        ]
    else:
        replies += [("simplify:2", json.dumps({"done": True, "reason": "short walk: one removal only"}))]
    replies.append(("lift:1", json.dumps(fp16)))
    return Scenario(
        task="trimul",
        expert_file=expert_file,
        learn_replies=replies,
        apply_category="fp16_contraction_operands",
        parent_code=v["parent"],
        parent_title="Float32 channel-major operands, exact float32 contraction, 32x32 tiles",
        child_code=v["child"],
        child_title="fp16 contraction operands on tensor cores",
    )


# --------------------------------------------------------------------------------------------------------------------
# softmax (the CPU check of the same pipeline)


def softmax_scenario() -> Scenario:
    """The README's demo walk (examples/softmax-skills-demo.jsonl); the search applies its online-softmax skill."""
    entries = load_replay_entries(str(REPO / "examples" / "softmax-skills-demo.jsonl"))
    replies = [(e.call_key or "", e.reply) for e in entries]
    codes = {key: extract_code(reply, "triton") for key, reply in replies if key in ("simplify:1", "simplify:3")}
    launch = "BLOCK=triton.next_power_of_2(n_cols))"
    whole_row = replace_once(codes["simplify:3"], launch, launch[:-1] + ", num_warps=4)")
    online = replace_once(codes["simplify:1"], "BLOCK=block)", "BLOCK=block, num_warps=4)")
    return Scenario(
        task="softmax",
        expert_file=REPO / "examples" / "softmax_expert.py",
        learn_replies=replies,
        apply_category="online_softmax",
        parent_code=whole_row,
        parent_title="One program per row, the whole row in one block",
        child_code=online,
        child_title="Stream the row online",
    )


# --------------------------------------------------------------------------------------------------------------------
# The two phases


def write_replies(path: Path, replies: list[tuple[str, str]]) -> Path:
    with path.open("w", encoding="utf-8") as f:
        f.write(SCRIPT_HEADER)
        for key, reply in replies:
            f.write(json.dumps({"call_key": key, "reply": reply}) + "\n")
    return path


def search_replies(sc: Scenario, skill_id: str) -> list[tuple[str, str]]:
    plan0 = {
        "kernel_summary": f"{sc.task}: start from a plain kernel, then apply learned skills",
        "open_questions": ["how much does the learned skill give on code it was not learned from?"],
        "ops": [
            {
                "op": "insert",
                "parent_id": "root",
                "node": {
                    "id": "a",
                    "decision": "Starting kernel",
                    "choice": "plain",
                    "action": {"title": sc.parent_title, "difficulty": 1, "score": 0.9},
                },
            }
        ],
    }
    plan1 = {
        "ops": [
            {"op": "update", "node_id": "a", "patch": {"notes": "FOLLOW_THROUGH: yes", "rating": 6}},
            {
                "op": "insert",
                "parent_id": "a",
                "node": {
                    "id": "a1",
                    "action": {"title": sc.child_title, "difficulty": 2, "score": 0.9, "skill_id": skill_id},
                },
            },
        ]
    }
    return [
        ("plan:0:0", json.dumps(plan0)),
        ("write:c1:1", fenced(sc.parent_code)),
        ("plan:1:0", json.dumps(plan1)),
        ("write:c2:1", fenced(sc.child_code)),
    ]


class Results:
    def __init__(self, out: Path, meta: dict) -> None:
        self.path, self.data = out / "results.json", {"meta": meta, "phases": {}}

    def phase(self, name: str, **fields: object) -> None:
        self.data["phases"][name] = fields
        self.path.write_text(json.dumps(self.data, indent=2, default=str) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="directory for results (created; re-running on it reuses everything)")
    parser.add_argument("--task", choices=("trimul", "softmax"), default="trimul")
    parser.add_argument("--device", default="auto", help="auto, cuda, cuda:N or cpu")
    parser.add_argument(
        "--walk",
        choices=("full", "short"),
        default="full",
        help="TriMul only. full: three scripted removals (one wrong); short: only the removal of the "
        "skill the search applies (fewer GPU evaluations)",
    )
    parser.add_argument(
        "--compare-rounds", type=int, default=5, help="rounds of each paired re-measurement of the walk"
    )
    args = parser.parse_args()

    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "prompts").mkdir(exist_ok=True)
    ws = out / "ws"
    device = resolve_device(args.device)
    on_gpu = device != "cpu"
    sc = trimul_scenario(args.walk, on_gpu) if args.task == "trimul" else softmax_scenario()
    results = Results(
        out,
        {
            "task": sc.task,
            "device": device,
            "walk": args.walk,
            "expert": str(sc.expert_file),
            "scripted": "every model reply is hand-written (see learn-replies.jsonl, search-replies.jsonl)",
        },
    )
    t0 = time.monotonic()

    def log(message: str) -> None:
        print(f"[{time.monotonic() - t0:7.1f}s] {message}", flush=True)

    # ---- 1. learn from the expert
    learn_file = write_replies(out / "learn-replies.jsonl", sc.learn_replies)

    def on_learn(event: str, data: dict) -> None:
        if event == "step":
            verdict = "accepted" if data["accepted"] else "rejected"
            log(f"walk step {data['index']} ({data['category']}): {data['verdict']}, {verdict}: {data['reason'][:160]}")
        elif event in ("expert_passed", "walk_done", "skill", "lift_failed"):
            log(f"{event}: {json.dumps(data, default=str)[:240]}")

    log(f"learning from {sc.expert_file.name} on {device} (session {LEARN_SESSION})")
    report = skills_flow.learn_from_expert(
        sc.expert_file,
        sc.task,
        model=f"replay:{learn_file}",
        workspace=ws,
        device=device,
        session=LEARN_SESSION,
        compare_rounds=args.compare_rounds,
        on_event=on_learn,
    )
    (out / "learn-report.json").write_text(skills_flow.report_json(report) + "\n", encoding="utf-8")
    learned = {v.skill.category: v.skill_id for v in report.skills}
    results.phase(
        "learn",
        seconds=round(time.monotonic() - t0, 1),
        expert=report.expert.summary(),
        termination=report.walk.termination,
        steps=[
            {
                k: s.model_dump(mode="json").get(k)
                for k in ("index", "category", "verdict", "accepted", "reason", "speedup", "ci_low", "ci_high")
            }
            for s in report.walk.steps
        ],
        skills=learned,
        lift_errors=report.lift_errors,
    )
    if sc.apply_category not in learned:
        log(f"the walk did not yield a {sc.apply_category} skill (see results.json): no search to run")
        return 1

    # ---- 2. a search that applies it
    skill_id = learned[sc.apply_category]
    search_file = write_replies(out / "search-replies.jsonl", search_replies(sc, skill_id))
    config = RunConfig(
        run_id=SEARCH_RUN,
        task=sc.task,
        model=f"replay:{search_file}",
        device=device,
        max_rounds=2,
        max_attempts_per_cycle=1,
        stagnation_window=1,
        lift_skills=False,
    )
    t1 = time.monotonic()

    def on_run(event: str, data: dict) -> None:
        log(f"{event}: {json.dumps({k: v for k, v in data.items() if k != 'event'}, default=str)[:240]}")

    store = runner.open_store(ws)
    try:
        try:
            status = store.get_run(SEARCH_RUN)["status"]
        except RunNotFoundError:
            status = None
    finally:
        store.close()
    log(f"search {SEARCH_RUN} on {device}, applying skill {skill_id} ({sc.apply_category}); earlier status: {status}")
    if status is None:
        outcome = runner.start_run(config, workspace=ws, on_event=on_run)
        status = outcome.status
    elif status != "finished":
        status = runner.resume_run(SEARCH_RUN, workspace=ws, on_event=on_run).status

    # ---- 3. what the library learned, and the prompts that carried the skill
    store = runner.open_store(ws)
    try:
        prompts = {c["call_key"]: c["prompt"] for c in store.list_llm_calls(SEARCH_RUN)}
        for key in ("plan:1:0", "write:c2:1"):
            if key in prompts:
                (out / "prompts" / f"{key.replace(':', '_')}.txt").write_text(prompts[key], encoding="utf-8")
        evaluations = {}
        for attempt in store.list_attempts(SEARCH_RUN):  # one row per round: node, candidate, evaluation
            evaluation = store.get_evaluation(attempt["evaluation_id"]) if attempt["evaluation_id"] else None
            evaluations[attempt["node_id"]] = {
                "candidate_id": attempt["candidate_id"],
                "summary": evaluation.summary() if evaluation else attempt["error"],
                "latency_ms": evaluation.latency_ms if evaluation else None,
                "timings": [t.model_dump(mode="json") for t in evaluation.timings] if evaluation else [],
            }
        trials = [e.model_dump(mode="json") for e in load_evidence(store, skill_id) if e.kind == EvidenceKind.TRIAL]
        library = [
            {
                "skill_id": v.skill_id,
                "category": v.skill.category,
                "status": v.status.value,
                "estimate": v.estimate.model_dump(mode="json"),
            }
            for v in library_views(store)
        ]
    finally:
        store.close()
    shown = skill_id in prompts.get("plan:1:0", "")
    recipe_given = f"Skill {skill_id}" in prompts.get("write:c2:1", "")
    results.phase(
        "search",
        seconds=round(time.monotonic() - t1, 1),
        status=status,
        skill_id=skill_id,
        evaluations=evaluations,
        skill_in_planner_prompt=shown,
        recipe_in_coder_prompt=recipe_given,
        trials=trials,
        library=library,
    )
    final = next(item for item in library if item["skill_id"] == skill_id)
    log(
        f"skill {skill_id} ({sc.apply_category}) is now {final['status']}; trials: "
        + "; ".join(
            f"{t['verdict']} x{t['speedup']} [{t['ci_low']}, {t['ci_high']}] held_out={t['held_out']}" for t in trials
        )
    )
    log(f"results in {out / 'results.json'}; workspace {ws}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
