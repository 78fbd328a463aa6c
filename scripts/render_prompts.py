"""Render a TriMul planner prompt and coder prompts from real evaluations, to read them as the model does (issue 57).

    python scripts/render_prompts.py OUT                       # CPU: the Triton interpreter, aimed at an H100
    python scripts/render_prompts.py OUT --device cuda         # the GPU: every shape timed and profiled

It replays the first rounds of examples/trimul-record (its recorded replies; no model is called) as a new run in
OUT/ws with two cycles at once, two attempts each, and ``--compete examples/trimul_triton_fast.py``: four kernels and
the competitor are evaluated, the planner writes its second plan from their evidence, and the run stops as soon as the
next coder prompts are written (nothing after them is evaluated). It then writes, from the run's store:

- OUT/planner.md: the second plan's prompt (every attempt of both cycles, the codes they started from, the gap to
  the competing kernel, the frontier with its next exploration cycle);
- OUT/coder-<call>.md: every coder prompt (a second attempt is written beside the attempts the other cycle has
  finished by then; the first attempts of the second step);

and prints one line per defect of issue 57 that the prompts must not show. On the CPU nothing is timed, so the
per-shape profile and hardware-counter checks read "n/a" (on a GPU the counters come from Nsight Compute where it
runs). About 2-3 minutes on an H100 (five evaluations and one leaderboard-mode
confirmation), longer on the CPU (the interpreter).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ksearch.agent.config import RunConfig  # noqa: E402
from ksearch.errors import KsearchError  # noqa: E402
from ksearch.flows import driving  # noqa: E402
from ksearch.flows import run as runner  # noqa: E402
from ksearch.tasks.trimul import TrimulTask  # noqa: E402

RECORD = REPO / "examples" / "trimul-record"
COMPETITOR = REPO / "examples" / "trimul_triton_fast.py"
RUN_ID = "render"
STOP_AFTER = frozenset({"c3", "c4"})
"""The second step's cycles: the run stops once each has written its first prompt (stopping at the first of them could
stop the other before its prompt, as the two are written at once)."""


def run_config(device: str, compete: bool) -> RunConfig:
    return RunConfig(
        run_id=RUN_ID,
        task="trimul",
        model=f"replay:{RECORD / 'replies.jsonl'}",
        device=device,
        target_gpu="h100" if device == "cpu" else None,
        max_rounds=8,
        max_attempts_per_cycle=2,
        stagnation_window=2,
        parallel_cycles=2,
        skills=False,
        compete=[str(COMPETITOR)] if compete else [],
    )


def drive(config: RunConfig, workspace: Path) -> None:
    """The run up to the second step's coder prompts; a stop there is the expected end."""

    written: set[str] = set()

    def on_event(kind: str, event: dict[str, Any]) -> None:
        print(f"  {kind} {event.get('cycle_id') or event.get('node_id') or ''}".rstrip(), flush=True)
        if kind == "write" and event.get("cycle_id") in STOP_AFTER:
            written.add(event["cycle_id"])
            if written == STOP_AFTER:
                driving.request_stop("the prompts to render are written")

    try:
        runner.start_run(config, workspace=workspace, on_event=on_event)
    except KsearchError as exc:
        if "the prompts to render are written" not in str(exc):
            raise


def prompts(workspace: Path) -> dict[str, str]:
    store = runner.open_store(workspace)
    try:
        return {c["call_key"]: c["prompt"] for c in store.list_llm_calls(RUN_ID) if c.get("prompt")}
    finally:
        store.close()


def checks(planner: str, coders: list[str], timed: bool) -> list[tuple[str, bool | None]]:
    """(what, held): each defect of issue 57 absent from the rendered prompts (None: not applicable here)."""
    shapes = [c.name for c in TrimulTask().benchmark_configs("cuda")]
    everything = [planner, *coders]
    profiled = [len(re.findall(rf"\n  {s}: mean [^\n]*\n    kernels ", planner)) for s in shapes] if timed else []
    return [
        ("every timed shape in the spec and the roofline floors", all(all(s in p for s in shapes) for p in everything)),
        ("every timed shape's kernels in every attempt's evidence", (min(profiled) >= 4) if timed else None),
        ("the hardware counters of each cycle's best", ("Hardware counters (" in planner) if timed else None),
        ("no 'host gap' from the profiled call's wall time", all("host gap" not in p for p in everything)),
        ("no code clipped ('characters cut' only in logs and notes)", "characters cut] ...\n```" not in planner),
        ("every attempt's code whole or as a diff", "(whole" in planner or "```diff" in planner),
        ("no score beside times in ms", all(re.search(r"score:? \d", p) is None for p in everything)),
        ("the calls left out of a statistic explained", all("+k not counted = calls timed" in p for p in everything)),
        ("one L2 figure", all(len(set(re.findall(r"\d+ MB L2", p))) == 1 for p in everything)),
        ("TriMul's flops computed per shape, no 'dominates'", all("dominates" not in p for p in everything)),
        ("one side-stream rule", all("a side stream only if it is joined" not in p for p in coders)),
        ("each child against its parent with the noise band", "regression vs parent" not in planner),
        ("the coder sees the cycles beside it", any(re.search(r"\nCycle c\d on node", p) for p in coders)),
        (
            "the gap to the competing kernel",
            "# Best known competing kernels" in planner and "## trimul_triton_fast" in planner,
        ),
        ("the planner is told the exploration rule", "cycle explores" in planner),
        ("launch parameters as one sweep action", '"sweep"' in planner),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cpu", help="cpu (the interpreter, aimed at an H100) or cuda")
    parser.add_argument("--no-compete", action="store_true", help="without examples/trimul_triton_fast.py")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    workspace = out / "ws"
    if not (workspace / "ksearch.db").exists():
        drive(run_config(args.device, not args.no_compete), workspace)
    found = prompts(workspace)
    plans = sorted(k for k in found if k.startswith("plan:") and not k.endswith(":0:0"))
    if not plans:
        print(f"no second plan was written; see {workspace}", file=sys.stderr)
        return 1
    planner = found[plans[-1]]
    (out / "planner.md").write_text(planner, encoding="utf-8")
    coder_keys = sorted(k for k in found if k.startswith("write:") and "#" not in k)
    for key in coder_keys:
        (out / f"coder-{key.replace(':', '_')}.md").write_text(found[key], encoding="utf-8")
    print(f"wrote {out / 'planner.md'} ({len(planner):,} chars) and {len(coder_keys)} coder prompts")
    failed = 0
    for what, held in checks(planner, [found[k] for k in coder_keys], timed=args.device != "cpu"):
        print(f"{'n/a ' if held is None else 'ok  ' if held else 'FAIL'} {what}")
        failed += held is False
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
