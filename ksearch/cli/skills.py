"""``ksearch skills list|show|export|import|learn``: the verified optimisation skill library (the skills flows)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from ksearch.cli._common import JsonOpt, json_mode, out, workspace_of

app = typer.Typer(
    help="Verified optimisation skills (KLineage): list, show, export, import, learn from an expert kernel.",
    no_args_is_help=True,
    rich_markup_mode=None,
)  # fmt: skip (plain help, as the main app's)

SkillIdArg = Annotated[
    str, typer.Argument(help="A skill id (a unique prefix is enough); list them with `ksearch skills list`.")
]

# ksearch.flows.skills' STATUSES, MAX_STEPS and MAX_REJECTIONS, for the help and the defaults: written out here
# because importing that flow is slow (tests/cli/test_cli_import.py checks that they agree).
STATUSES = ["candidate", "admitted", "retired"]
MAX_STEPS = 16
MAX_REJECTIONS = 4


def _estimate(view: Any) -> str:
    est = view.estimate
    if est.speedup is None:
        return "not measured"
    return f"x{est.speedup:.2f} [{est.low:.2f}, {est.high:.2f}]"


def _scope(view: Any) -> str:
    s = view.skill.scope
    return f"{','.join(s.families)} / {','.join(s.languages)} / {','.join(s.archs)}"


@app.command("list")
def list_(
    ctx: typer.Context,
    task: Annotated[str | None, typer.Option(help="Only skills in scope for this task's family.")] = None,
    language: Annotated[str | None, typer.Option(help="Only skills in scope for this language.")] = None,
    arch: Annotated[
        str | None, typer.Option(help="Only skills in scope for this architecture (sm90, sm100, cpu).")
    ] = None,
    status: Annotated[str | None, typer.Option(help=f"Only skills with this status ({', '.join(STATUSES)}).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The library: id, status, scope, trials and the effect estimate derived from the evidence now."""
    from ksearch.flows import skills as skills_flow

    json_mode(as_json)
    views = skills_flow.list_skills(workspace_of(ctx), task=task, language=language, arch=arch, status=status)
    if as_json:
        print(json.dumps([v.model_dump(mode="json") for v in views], indent=2))
        return
    if not views:
        out.print("no skills in this workspace (learn some with `ksearch skills learn`, or `ksearch skills import`)")
        return
    table = Table("id", "category", "status", "source", "scope", "passed", "estimate")
    table.columns[0].no_wrap = True
    for v in views:
        est = v.estimate
        table.add_row(
            v.skill_id,
            escape(v.skill.category),
            v.status.value,
            v.skill.source.value,
            escape(_scope(v)),
            f"{est.trials_passed}/{est.trials}",
            _estimate(v),
        )
    out.print(table)


@app.command()
def show(ctx: typer.Context, skill_id: SkillIdArg, as_json: JsonOpt = False) -> None:
    """One skill: its record, derived status and estimate, and its whole evidence log."""
    from ksearch.flows import skills as skills_flow

    json_mode(as_json)
    view, evidence = skills_flow.show_skill(skill_id, workspace_of(ctx))
    if as_json:
        print(
            json.dumps(
                {"view": view.model_dump(mode="json"), "evidence": [e.model_dump(mode="json") for e in evidence]},
                indent=2,
            )
        )
        return
    s = view.skill
    out.print(f"[bold]{view.skill_id}[/bold] {s.category} ({view.status.value}, source {s.source.value})")
    out.print(f"intent: {escape(s.intent)}\nanchor: {escape(s.anchor)}\nscope: {escape(_scope(view))}")
    out.print(f"recipe:\n  {escape(s.recipe)}")
    out.print("preconditions:")
    for p in s.preconditions:
        out.print(f"  - {p.category}: {escape(p.text)}")
    for name in ("requires", "provides", "conflicts"):
        features = getattr(s, name)
        if features:
            out.print(
                f"{name}: " + ", ".join(f"{f.locus}/{f.name}" + (f" {f.detect}" if f.detect else "") for f in features)
            )
    out.print("effects:\n" + "\n".join(f"  - {escape(e)}" for e in s.effects))
    if view.risks:
        out.print("risks:\n" + "\n".join(f"  - {escape(r)}" for r in view.risks))
    est = view.estimate
    source = f"; source x{est.source_speedup:.2f}" if est.source_speedup else ""
    out.print(
        f"estimate: {_estimate(view)}; {est.trials} trials ({est.trials_passed} passed, {est.paired_trials} "
        f"paired, {est.held_out_verified} held-out verified){source}"
    )
    out.print(f"evidence ({len(evidence)} records; speedups are paired: code before / code after):")
    for e in evidence:
        paired = f"x{e.speedup:.3f} [{e.ci_low:.3f}, {e.ci_high:.3f}]" if e.speedup is not None else "not timed"
        flags = ", ".join(
            f
            for f in (
                "held out" if e.held_out else "",
                "verified" if e.verified else "",
                "imported" if e.imported else "",
            )
            if f
        )
        out.print(
            f"  {e.kind.value} {e.run_id}/{e.cycle_id} on {escape(e.task)} ({e.arch}): {e.verdict}, {paired}"
            + (f" [{flags}]" if flags else "")
        )
        if e.note:
            out.print(f"    {escape(e.note[:300])}")


@app.command()
def export(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="The JSON file to write.")],
    skill_ids: Annotated[list[str] | None, typer.Option("--id", help="Export only these skills (repeatable).")] = None,
) -> None:
    """Write skills with their evidence logs as a ksearch-skills JSON file others can import."""
    from ksearch.flows import skills as skills_flow

    count = skills_flow.export_skills(file, workspace_of(ctx), skill_ids=skill_ids)
    out.print(f"wrote {count} skills to {file}")


@app.command("import")
def import_(ctx: typer.Context, file: Annotated[Path, typer.Argument(help="A ksearch-skills JSON file.")]) -> None:
    """Add the skills of a ksearch-skills file to this workspace (evidence marked imported; idempotent)."""
    from ksearch.flows import skills as skills_flow

    report = skills_flow.import_skills(file, workspace_of(ctx))
    out.print(
        f"imported {len(report.new_skills)} new skills ({len(report.known_skills)} already known), "
        f"{report.evidence_added} evidence records"
    )
    for sid in report.new_skills:
        out.print(f"  {sid}")


@app.command()
def learn(
    ctx: typer.Context,
    file: Annotated[
        Path, typer.Argument(help="The expert kernel: a complete module that passes `ksearch eval TASK FILE`.")
    ],
    task: Annotated[str, typer.Option("--task", "-t", help="The task it solves (see `ksearch tasks`).")],
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            help=(
                "provider:model, replay:FILE of scripted replies, or replay:SESSION (an earlier learn session's "
                "replies, e.g. to re-time a CPU walk on a GPU)."
            ),
        ),
    ],
    device: Annotated[
        str, typer.Option(help="auto, cuda / cuda:N, or cpu (correctness only: effects are not measured).")
    ] = "auto",
    language: Annotated[str, typer.Option(help="Kernel language.")] = "triton",
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible server URL.")] = None,
    max_steps: Annotated[int, typer.Option(help="Simplification proposals at most (KLineage: 16).")] = MAX_STEPS,
    max_rejections: Annotated[int, typer.Option(help="Rejected proposals at most (KLineage: 4).")] = MAX_REJECTIONS,
    session: Annotated[
        str | None, typer.Option(help="Re-use a session id (after a crash: nothing paid for is repeated).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Learn skills from an expert kernel: walk it backward one validation-gated simplification at a time and lift
    each accepted step, reversed, into a candidate skill."""
    from ksearch.flows import skills as skills_flow

    console = json_mode(as_json)

    def on_event(event: str, data: dict[str, Any]) -> None:
        if event == "expert":
            c = data["context"]
            console.print(f"session [bold]{data['session']}[/bold]: family {c['family']}, {c['language']}, {c['arch']}")
        elif event == "expert_passed":
            console.print(f"expert: {escape(data['summary'])}")
        elif event == "step":
            colour = "green" if data["accepted"] else "red"
            verdict = "accepted" if data["accepted"] else "rejected"
            console.print(
                f"step {data['index']}: remove {escape(data['category'])} at {escape(data['locus'])}: "
                f"[{colour}]{verdict}[/{colour}] ({escape(data['reason'][:160])})"
            )
        elif event == "walk_done":
            console.print(f"walk ended: {data['termination']} ({escape(data['reason'][:160])})")
        elif event == "skill":
            console.print(
                f"[bold green]skill[/bold green] {data['skill_id']} from step {data['index']}: {escape(data['intent'])}"
            )
        elif event == "lift_failed":
            console.print(f"[yellow]step {data['index']} could not be lifted[/yellow]: {escape(data['error'][:200])}")

    report = skills_flow.learn_from_expert(
        file,
        task,
        model=model,
        workspace=workspace_of(ctx),
        device=device,
        language=language,
        base_url=base_url,
        session=session,
        max_steps=max_steps,
        max_rejections=max_rejections,
        on_event=on_event,
    )
    if as_json:
        print(skills_flow.report_json(report))
        return
    out.print(
        f"{len(report.skills)} candidate skills learned (session {report.session}); a skill is admitted once a "
        "search verifies it on other code: see `ksearch skills list`"
    )
