"""Drive a ``--model interactive`` run from a folder of hand-written replies, as far as the replies go.

    python scripts/interactive_drive.py WORKSPACE REPLIES OUT --run-id RUN [-- TASK RUN-OPTIONS...]

Each reply file answers one prompt and is named by the round the prompt comes before and the role that asks:
``r01-planner.md`` (the first plan), ``r01-coder.md`` (the kernel of round 1), ``r02-coder.md``, ...,
``r04-planner.md`` (the plan after round 3's cycle ended), with ``-repair1`` appended for a repair prompt
(``r02-coder-repair1.md``) and ``rNN-approval.md`` (``approve`` or ``reject``) for a new best waiting for approval.
A file named by the call key also answers (``plan_0_0.md``, ``write_c2_1.md``, ``write_c2_1-repair1.md``); it is the
way to tell apart parallel prompts of one round, so those are saved and asked for by call key only.

The loop: read what the run waits for (``ksearch pending``), save each prompt to ``OUT/prompts/NAME.md``, answer it
with ``REPLIES/NAME.md`` (``ksearch respond``), and drive the run to its next pause; it stops when the run finishes or
when a prompt has no reply file yet (write it after reading the saved prompt, then run the same command again).
When RUN does not exist yet, the arguments after ``--`` start it: ``ksearch run TASK --model interactive --run-id RUN
...``. Nothing runs on the model's side, so the script needs no network; kernels are evaluated on the run's device.

OUT also receives ``drive.json`` (status, what it waits for, the trajectory: round, cycle, node, action, verdict,
latency, score, and the best), ``trajectory.md`` (the same as a table), ``replies.jsonl`` (every reply of the run as
a replay file labelled hand-written: ``ksearch run TASK --model replay:OUT/replies.jsonl`` re-runs it) and, with
``--save-db``, a one-file copy of the workspace database (to carry the run to another machine and back).

Example, on the CPU with the built-in softmax task:

    python scripts/interactive_drive.py /tmp/ws replies/ /tmp/out --run-id demo -- softmax --device cpu --max-rounds 6

On a GPU machine reached one command at a time (TriMul; the workspace travels as an ignored folder and comes back
as one file): keep the workspace in ``handrun/ws`` (listed in ``.git/info/exclude``), the replies in a tracked
folder, and run

    PYTHONUNBUFFERED=1 python3 scripts/interactive_drive.py handrun/ws REPLIES $OUT --run-id trimul-hand \
        --save-db $OUT/ksearch.db -- trimul --device cuda --max-rounds 8 --stagnation-window 3

then copy the returned ``ksearch.db`` over ``handrun/ws/ksearch.db``, read ``prompts/`` and ``drive.json``, write the
next reply files and run the same command again. OUT then holds at most 4 files besides the prompts of that call.
To spend GPU calls on evaluations only, answer the planner's and coder's prompts on the machine without the GPU with
``--prompts-only`` (the run plans and writes there, and stops where kernels wait for the GPU; its coder prompts are
saved as they come); then the GPU call evaluates them and drives to the next prompts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ksearch.errors import KsearchError, RunNotFoundError
from ksearch.flows import inspect as inspect_flow
from ksearch.flows import interactive as interactive_flow
from ksearch.flows import run as run_flow
from ksearch.flows import steering as steering_flow
from ksearch.flows.workspace import DB_NAME, open_store
from ksearch.llm.interactive import Waiting

VIA = "scripts/interactive_drive.py"
"""How the replies went in, for the replay file's note."""


def hand_written_note(via: str = VIA) -> str:
    return (
        "HAND-WRITTEN: every reply in this file was written by hand (by a person or a coding agent, outside ksearch's "
        f"LLM layer) answering `--model interactive` prompts ({via}), not by a model called through ksearch."
    )


_WRITE_KEY = re.compile(r"^write:(c\d+):(\d+)$")


def reply_names(prompt: Waiting, next_round: int) -> list[str]:
    """The reply file names (without ``.md``) that answer ``prompt``: by round and role first, then by call key."""
    key, _, repair = prompt.prompt.key.partition("#")
    suffix = f"-{repair}" if repair else ""
    if prompt.prompt.kind == "approval":
        by_round = f"r{next_round - 1:02d}-approval"  # the round that produced the candidate
    else:
        by_round = f"r{next_round:02d}-{prompt.prompt.role}{suffix}"
    by_key = re.sub(r"[^A-Za-z0-9_-]", "_", key) + suffix
    return [by_round, by_key]


def prompt_names(prompts: list[Waiting], next_round: int) -> list[list[str]]:
    """``reply_names`` of each prompt, except that parallel prompts of one round (which share a round-and-role name)
    are named by call key only: each is saved, and answered, under a name of its own."""
    names = [reply_names(w, next_round) for w in prompts]
    by_round = [n[0] for n in names]
    return [n[1:] if by_round.count(n[0]) > 1 else n for n in names]


def next_round(run_id: str, workspace: Path) -> int:
    """The round the run's next kernel will be: one after the last recorded round (the seed is round 0)."""
    attempts = inspect_flow.run_view(run_id, workspace).attempts
    return max((a["round_index"] for a in attempts), default=0) + 1


def save_prompt(out: Path, name: str, prompt: Waiting) -> Path:
    p = prompt.prompt
    lines = [f"<!-- run prompt {p.key} ({p.role}, attempt {p.attempt}); answer it with REPLIES/{name}.md -->", ""]
    if p.system:
        lines += ["# system", "", p.system, ""]
    lines += ["# prompt", "", p.prompt, "", "# expected reply", "", p.reply_format.description]
    if p.reply_format.json_schema:
        lines += ["", "```json", json.dumps(p.reply_format.json_schema, indent=1), "```"]
    path = out / "prompts" / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def start(workspace: Path, run_id: str, run_args: list[str]) -> None:
    """Start the run with ``ksearch run ... --model interactive`` (it drives to the first prompt and exits 0)."""
    if not run_args:
        raise SystemExit(f"run {run_id} is not in {workspace}: give the task and run options after `--` to start it")
    command = [
        sys.executable,
        "-m",
        "ksearch.cli",
        "--workspace",
        str(workspace),
        "run",
        *run_args,
        "--model",
        "interactive",
        "--run-id",
        run_id,
    ]
    print("$ " + " ".join(command[1:]), flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(command, env=env)
    if done.returncode != 0:
        raise SystemExit(f"starting the run failed (exit {done.returncode})")


def reply_file(replies: Path, names: list[str]) -> Path | None:
    """The first reply file that answers a prompt saved under ``names`` (``prompt_names``), or None."""
    return next((replies / f"{n}.md" for n in names if (replies / f"{n}.md").is_file()), None)


def approval_decision(found: Path, text: str) -> str:
    """``approve`` or ``reject``: the first word of an approval's reply file."""
    decision = text.strip().split()[0].lower() if text.strip() else ""
    if decision not in ("approve", "reject"):
        raise SystemExit(f"{found} must start with `approve` or `reject`")
    return decision


def answer(run_id: str, workspace: Path, replies: Path, out: Path, prompts_only: bool = False) -> tuple[str, list[str]]:
    """Answer every open prompt that has a reply file, then drive the run on once.

    Returns ``(state, missing)``: ``answered`` (drive again), ``finished``, ``waiting`` with the reply file names
    still missing (one per open prompt without a reply), or, with ``prompts_only``, ``device`` when every prompt is
    answered and kernels wait for the GPU."""
    view = interactive_flow.pending(run_id, workspace=workspace)
    if view.status == "finished":
        return "finished", []
    devices = [w for w in view.prompts if w.prompt.kind == "device"]
    open_prompts = [w for w in view.prompts if not w.answered and w.prompt.kind != "device"]
    if not open_prompts:  # stopped, crashed, answers recorded but not taken yet, or kernels to evaluate: drive it
        if devices and prompts_only:
            return "device", []
        run_flow.resume_run(run_id, workspace=workspace, on_event=print_event, prompts_only=prompts_only)
        return "answered", []
    round_no = next_round(run_id, workspace)
    missing, given = [], 0
    for waiting, names in zip(open_prompts, prompt_names(open_prompts, round_no), strict=True):
        saved = save_prompt(out, names[0], waiting)
        found = reply_file(replies, names)
        if found is None:
            print(
                f"waiting for {waiting.prompt.key}: prompt saved to {saved}; write the reply as {replies / names[0]}.md"
            )
            missing.append(names[0])
            continue
        text = found.read_text(encoding="utf-8")
        print(f"answering {waiting.prompt.key} with {found.name}", flush=True)
        if waiting.prompt.kind == "approval":
            decision = approval_decision(found, text)
            steering_flow.steer(
                run_id,
                decision,
                {"node_id": waiting.prompt.details.get("node_id")},
                author="interactive_drive",
                workspace=workspace,
                drive=False,
            )
        else:
            interactive_flow.respond(run_id, text, key=waiting.prompt.key, workspace=workspace, drive=False)
        given += 1
    if not given:
        return "waiting", missing
    run_flow.resume_run(run_id, workspace=workspace, on_event=print_event, prompts_only=prompts_only)
    return "answered", []


def print_event(name: str, data: dict[str, Any]) -> None:
    """Progress on stdout: the rounds, selections, promotions and steering of the run."""
    if name in ("selected", "round", "promotion", "new_best", "steered", "plan_rejected"):
        detail = {k: v for k, v in data.items() if k != "event"}
        print(f"  {name}: {json.dumps(detail, default=str)[:400]}", flush=True)


def trajectory(run_id: str, workspace: Path) -> list[dict[str, Any]]:
    """One row per round: what was tried, its verdict, latency and score."""
    view = inspect_flow.run_view(run_id, workspace)
    rows = []
    for a in view.attempts:
        node = view.world_model.nodes.get(a["node_id"])
        latency = None
        if a.get("evaluation_id"):
            latency = inspect_flow.evaluation(a["evaluation_id"], workspace).latency_ms
        rows.append(
            {
                "round": a["round_index"],
                "cycle": a["cycle_id"],
                "attempt": a["attempt"],
                "prompt": a.get("prompt_kind"),
                "node": a["node_id"],
                "action": node.action.title if node is not None and node.action is not None else None,
                "verdict": a["verdict"],
                "latency_ms": latency,
                "score": a["score"],
                "candidate": a["candidate_id"],
            }
        )
    return rows


def hand_written_replay(run_id: str, workspace: Path, via: str = VIA) -> str:
    """The run's replies as a replay file (``--model replay:FILE``), labelled hand-written (``via``: how they went
    in)."""
    note = hand_written_note(via)
    store = open_store(workspace)
    try:
        calls = store.list_llm_calls(run_id)
    finally:
        store.close()
    lines = [f"// {note} Run {run_id}."]
    for i, call in enumerate(calls):
        entry = {"call_key": call["call_key"], "reply": call["reply"]}
        if i == 0:
            entry = {"note": note, **entry}
        lines.append(json.dumps(entry))
    return "\n".join(lines) + "\n"


def save_db(workspace: Path, dest: Path) -> None:
    """A consistent one-file copy of the workspace database (SQLite's online backup: WAL content included)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.unlink(missing_ok=True)
    source = sqlite3.connect(workspace / DB_NAME)
    target = sqlite3.connect(dest)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()


def report(
    run_id: str, workspace: Path, out: Path, state: str, missing: list[str], error: str | None, via: str = VIA
) -> dict[str, Any]:
    row = inspect_flow.run_row(run_id, workspace)
    rows = trajectory(run_id, workspace)
    summary = {
        "run_id": run_id,
        "task": row["task"],
        "device": row["device"],
        "status": row["status"],
        "stopped_because": {
            "finished": "the run finished",
            "waiting": "no reply file for the waiting prompt",
            "device": "--prompts-only: every prompt is answered, kernels wait for the GPU",
            "error": f"error: {error}",
            "stuck": f"error: {error}",
        }.get(state, "--max-answers reached"),
        "waiting_for": missing,
        "rounds_used": row["rounds_used"],
        "done_reason": row["done_reason"],
        "best_candidate_id": row["best_candidate_id"],
        "best_score": row["best_score"],
        "best_latency_ms": inspect_flow.evaluation(row["best_evaluation_id"], workspace).latency_ms
        if row.get("best_evaluation_id")
        else None,
        "trajectory": rows,
    }
    (out / "drive.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    table = [
        "| round | cycle | attempt | node | action | verdict | latency (ms) | score |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        latency = "" if r["latency_ms"] is None else f"{r['latency_ms']:.4f}"
        score = "" if r["score"] is None else f"{r['score']:.4g}"
        table.append(
            f"| {r['round']} | {r['cycle']} | {r['attempt']} | {r['node']} | {r['action'] or ''} | "
            f"{r['verdict']} | {latency} | {score} |"
        )
    (out / "trajectory.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    (out / "replies.jsonl").write_text(hand_written_replay(run_id, workspace, via), encoding="utf-8")
    return summary


def arguments(description: str, prompts_only_help: str) -> argparse.ArgumentParser:
    """The command line this script and ``mcp_drive.py`` share (what follows ``--`` is each one's own)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("workspace", type=Path, help="the ksearch workspace (its ksearch.db holds the run)")
    parser.add_argument("replies", type=Path, help="folder of reply files (r01-planner.md, r01-coder.md, ...)")
    parser.add_argument("out", type=Path, help="folder for the saved prompts, drive.json, trajectory.md, replies.jsonl")
    parser.add_argument("--run-id", required=True, help="the run to drive (started from what follows -- if new)")
    parser.add_argument("--save-db", type=Path, help="also write a one-file copy of the workspace database here")
    parser.add_argument("--max-answers", type=int, default=200, help="stop after this many drive steps (a guard)")
    parser.add_argument("--prompts-only", action="store_true", help=prompts_only_help)
    return parser


def finish(args: argparse.Namespace, state: str, missing: list[str], error: str | None, via: str = VIA) -> int:
    """Write OUT's files (and the database copy), print where the run stands; the exit status."""
    workspace, out = args.workspace.resolve(), args.out.resolve()
    try:
        summary = report(args.run_id, workspace, out, state, missing, error, via)
    except RunNotFoundError:
        return 1
    finally:
        if args.save_db is not None and (workspace / DB_NAME).is_file():
            save_db(workspace, args.save_db.resolve())
    best = summary["best_latency_ms"]
    print(
        f"run {args.run_id}: {summary['status']} after {summary['rounds_used']} rounds; "
        f"best {summary['best_candidate_id'] or 'none'}"
        + (f" at {best:.4f} ms" if best else "")
        + (f"; waiting for {', '.join(missing)}" if missing else "")
        + ("; kernels wait for the GPU" if state == "device" else "")
    )
    return 1 if error else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args = arguments(
        __doc__.split("\n\n")[0],
        "on a machine without the run's GPU: answer and write prompts, stop where kernels wait "
        "for the GPU (run the script again there without this flag)",
    ).parse_args(argv)
    workspace, out = args.workspace.resolve(), args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    state, missing, error = "answered", [], None
    try:
        try:
            inspect_flow.run_row(args.run_id, workspace)
        except RunNotFoundError:
            start(workspace, args.run_id, run_args)
        for _ in range(args.max_answers):
            state, missing = answer(args.run_id, workspace, args.replies.resolve(), out, args.prompts_only)
            if state != "answered":
                break
    except KsearchError as exc:  # the run stays resumable: running this command again resumes it
        state, error = "error", f"{exc}" + (f" (hint: {exc.hint})" if exc.hint else "")
        print(f"error: {error}", file=sys.stderr)
    return finish(args, state, missing, error)


if __name__ == "__main__":
    sys.exit(main())
