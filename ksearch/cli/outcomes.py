"""How a driven run ends, for people and for scripts: the closing lines, the ``--json`` object, the exit status.

A run that finished with a kernel that passed, or that waits for an answer, exits 0; one that finished with no
kernel that passed exits ``ExitCode.NO_KERNEL_PASSED`` (3), like ``eval`` of a kernel that fails, so that a script
tells a search that found nothing from one that failed (1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from ksearch.cli._common import count, out
from ksearch.cli.errors import ExitCode

if TYPE_CHECKING:
    from ksearch.flows.run import RunOutcome


def exit_code(outcome: RunOutcome) -> ExitCode:
    """0 for a run that waits or found a passing kernel; ``NO_KERNEL_PASSED`` for one that finished without."""
    if outcome.status == "finished" and outcome.best is None:
        return ExitCode.NO_KERNEL_PASSED
    return ExitCode.OK


def outcome_json(outcome: RunOutcome, ws: Path, **extra: Any) -> dict[str, Any]:
    """What ``run --json`` (and resume, replay, fork) print: the run's status, its best kernel and what it waits for."""
    from ksearch.flows import inspect as inspect_flow

    best: dict[str, Any] | None = None
    if outcome.best is not None:
        evaluation = inspect_flow.evaluation(outcome.best.evaluation_id, ws)
        best = {
            **outcome.best.model_dump(mode="json"),
            "verdict": evaluation.verdict.value,
            "summary": evaluation.summary(),
            "device": evaluation.device,
            "timed": evaluation.timed,
        }
    return {
        "run_id": outcome.run_id,
        "status": outcome.status,
        "done_reason": outcome.done_reason,
        "rounds_used": outcome.rounds_used,
        "passed": outcome.best is not None,
        "best": best,
        "pending": [
            {"key": w.prompt.key, "kind": w.prompt.kind, "role": w.prompt.role, "answered": w.answered}
            for w in outcome.pending
        ],
        **extra,
        "exit_code": int(exit_code(outcome)),
    }


def print_waiting(outcome: RunOutcome) -> None:
    """A paused run: what it waits for and the commands that answer it (nothing runs until then)."""
    run_id = outcome.run_id
    out.print(
        f"\nrun [bold]{run_id}[/bold] is [yellow]waiting[/yellow] after {count(outcome.rounds_used, 'round')}; "
        "nothing runs until it is answered:"
    )
    several = len(outcome.pending) > 1
    for w in outcome.pending:
        prompt = w.prompt
        if prompt.kind == "device":
            out.print(
                f"  [yellow]{escape(prompt.key)}[/yellow]: waits for the GPU; continue with `ksearch resume {run_id}` "
                "on a machine that has it"
            )
        elif prompt.kind == "approval":
            node = prompt.details.get("node_id")
            out.print(
                f"  approval of a new best (node {escape(str(node))}): ksearch steer {run_id} approve|reject"
                + (f" {node}" if several else "")
            )
        else:
            key = f" --key {prompt.key}" if several else ""
            out.print(
                f"  {prompt.role} prompt [cyan]{escape(prompt.key)}[/cyan]: read it with `ksearch pending "
                f"{run_id}{key}`, answer with `ksearch respond {run_id}{key} --file reply.md`"
            )


def print_outcome(outcome: RunOutcome, ws: Path) -> None:
    from ksearch.flows import inspect as inspect_flow

    if outcome.status == "waiting":
        print_waiting(outcome)
        return
    out.print(
        f"\nrun [bold]{outcome.run_id}[/bold] {outcome.status}: {outcome.done_reason}; "
        f"{count(outcome.rounds_used, 'round')}"
    )
    if outcome.best is None:
        out.print("[yellow]no candidate passed[/yellow]")
        return
    evaluation = inspect_flow.evaluation(outcome.best.evaluation_id, ws)
    out.print(
        f"[bold green]best kernel[/bold green] (node {escape(outcome.best.node_id)}): {escape(evaluation.summary())}"
    )
    for t in evaluation.timings:
        out.print(f"  {t.describe()}")
    out.print(f"see it with: ksearch show {outcome.run_id} --code")


def finish(outcome: RunOutcome, ws: Path, as_json: bool, *, extra: dict[str, Any] | None = None) -> None:
    """End a command that drove a run: its closing lines (or its JSON object on stdout) and its exit status."""
    if as_json:
        print(json.dumps(outcome_json(outcome, ws, **(extra or {})), indent=2, default=str))
    else:
        print_outcome(outcome, ws)
    raise typer.Exit(int(exit_code(outcome)))
