"""People and agents in the loop: ``pending``, ``respond``, ``steer``, ``fork`` and ``mcp``."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from ksearch.cli._common import JsonOpt, RunIdArg, count, json_mode, out, rule, workspace_of
from ksearch.cli.options import (
    DEVICE,
    MAX_ROUNDS,
    MODEL,
    STAGNATION_WINDOW,
    BaseUrlOpt,
    MaxTokensOpt,
    RunIdOpt,
    TemperatureOpt,
)
from ksearch.cli.outcomes import exit_code, finish, print_outcome
from ksearch.cli.progress import Progress
from ksearch.errors import UserError

app = typer.Typer()


@app.command()
def pending(
    ctx: typer.Context,
    run_id: Annotated[str | None, typer.Argument(help="A run id (default: the most recent waiting run).")] = None,
    key: Annotated[str | None, typer.Option("--key", "-k", help="Show only the prompt with this call key.")] = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw", help="Print only the prompt text (system, then user), e.g. to pipe it to a file or another model."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show what a paused run waits for: each prompt's role, call key, full text and expected reply format."""
    json_mode(as_json)
    from ksearch.flows import interactive as interactive_flow

    ws = workspace_of(ctx)
    view = interactive_flow.pending(run_id or interactive_flow.latest_waiting_run(workspace=ws), workspace=ws)
    prompts = [w for w in view.prompts if key is None or w.prompt.key == key]
    if key is not None and not prompts:
        raise UserError(
            f"run {view.run_id} waits for no prompt {key!r}", hint=f"see them all: ksearch pending {view.run_id}"
        )
    if as_json:
        print(json.dumps({**view.as_json(), "prompts": [w.model_dump(mode="json") for w in prompts]}, indent=2))
        return
    if raw:
        if len(prompts) != 1:
            raise UserError(
                f"run {view.run_id} waits for {len(prompts)} prompts; --raw needs one", hint="name it with --key KEY"
            )
        prompt = prompts[0].prompt
        print((prompt.system + "\n\n" if prompt.system else "") + prompt.prompt)
        return
    if not prompts:
        out.print(f"run [bold]{view.run_id}[/bold] ({view.status}) waits for nothing")
        return
    devices = [w for w in prompts if w.prompt.kind == "device"]
    prompts = [w for w in prompts if w.prompt.kind != "device"]
    several = sum(not w.answered for w in prompts) > 1
    out.print(
        f"run [bold]{view.run_id}[/bold] ({view.status}) waits for {len(prompts)} answer(s)"
        + (f" and for its device ({len(devices)} evaluation(s))" if devices else "")
    )
    for w in devices:
        out.print(f"[yellow]{escape(w.prompt.key)}[/yellow]: {escape(w.prompt.prompt)}")
    for w in prompts:
        p = w.prompt
        rule(f"{p.key}: {p.role} {'approval' if p.kind == 'approval' else 'prompt'} (attempt {p.attempt})")
        if p.system:
            out.print("[dim]system prompt:[/dim]")
            print(p.system)
        print(p.prompt)
        rule("expected reply")
        out.print(escape(p.reply_format.description))
        if p.reply_format.json_schema:
            out.print("[dim](the JSON schema is in the prompt above; `--json` gives it as data)[/dim]")
        if w.answered:
            out.print(
                "[green]answered[/green]: the run takes the recorded answer when it is driven next (`ksearch resume`)"
            )
        elif p.kind == "approval":
            out.print(
                f"answer with: ksearch steer {view.run_id} approve|reject"
                + (f" {p.details['node_id']}" if several else "")
            )
        else:
            out.print(
                f"answer with: ksearch respond {view.run_id}"
                + (f" --key {p.key}" if several else "")
                + " --file reply.md"
            )


@app.command()
def respond(
    ctx: typer.Context,
    run_id: RunIdArg,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="The reply ('-' or absent: read standard input).")
    ] = None,
    key: Annotated[
        str | None, typer.Option("--key", "-k", help="Which prompt to answer, when the run waits for several.")
    ] = None,
    no_drive: Annotated[
        bool, typer.Option("--no-drive", help="Only record the reply; the next `ksearch resume` takes it.")
    ] = False,
    prompts_only: Annotated[
        bool,
        typer.Option(
            "--prompts-only",
            help=(
                "Drive the run on this machine without its GPU: plan and write here; each kernel waits for `ksearch "
                "resume RUN` on the GPU machine."
            ),
        ),
    ] = False,
) -> None:
    """Answer a paused run's prompt, then drive the run to its next pause or its end (exit 0 when it waits again)."""
    from ksearch.flows import inspect as inspect_flow
    from ksearch.flows import interactive as interactive_flow

    reply = _read_reply(file)
    ws = workspace_of(ctx)
    run_row = inspect_flow.run_row(run_id, ws)
    with Progress(run_row["config"].get("max_rounds", 0)) as progress:
        response = interactive_flow.respond(
            run_row["id"],
            reply,
            key=key,
            workspace=ws,
            on_event=progress,
            drive=not no_drive,
            prompts_only=prompts_only,
        )
    out.print(f"recorded the reply to [cyan]{escape(response.key)}[/cyan]")
    if response.busy:
        out.print(f"[yellow]{escape(response.busy)}[/yellow]: it takes the reply at its next step")
    elif response.outcome is not None:
        print_outcome(response.outcome, ws)
        raise typer.Exit(int(exit_code(response.outcome)))
    else:
        out.print(f"continue with: ksearch resume {response.run_id}")


def _read_reply(file: Path | None) -> str:
    if file is None or str(file) == "-":
        if sys.stdin.isatty():
            raise UserError(
                "no reply given", hint="pass --file reply.md, or pipe the reply in: ksearch respond RUN < reply.md"
            )
        return sys.stdin.read()
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the reply file {file}: {exc}") from None


class SteerAct(StrEnum):
    pin = "pin"
    unpin = "unpin"
    prune = "prune"
    revive = "revive"
    add = "add"
    require_approval = "require-approval"
    approve = "approve"
    reject = "reject"


@app.command()
def steer(
    ctx: typer.Context,
    run_id: RunIdArg,
    act: Annotated[
        SteerAct,
        typer.Argument(
            help="pin|unpin|prune|revive NODE; add PARENT --title ...; require-approval [--off]; approve|reject [NODE]."
        ),
    ],
    node: Annotated[
        str | None, typer.Argument(help="The node acted on (for add: the parent of the new hypothesis).")
    ] = None,
    title: Annotated[
        str | None, typer.Option(help="add: the hypothesis (an action the coder can do in one round).")
    ] = None,
    description: Annotated[str, typer.Option(help="add: what to change in the code.")] = "",
    difficulty: Annotated[int, typer.Option(help="add: 1 (trivial) .. 5.")] = 2,
    score: Annotated[float, typer.Option(help="add: prior that it pays off, 0..1 (the main selection key).")] = 0.7,
    speedup: Annotated[float | None, typer.Option(help="add: expected speedup over the parent's solution.")] = None,
    rationale: Annotated[str, typer.Option(help="add: why you believe in it.")] = "",
    node_id: Annotated[str | None, typer.Option("--id", help="add: the new node's id (default: generated).")] = None,
    pin: Annotated[bool, typer.Option("--pin", help="add: also pin the new node.")] = False,
    off: Annotated[bool, typer.Option("--off", help="require-approval: stop requiring approvals.")] = False,
    author: Annotated[str | None, typer.Option(help="Who gives the act (default: user@host).")] = None,
    no_drive: Annotated[
        bool, typer.Option("--no-drive", help="approve/reject: only record; the next `ksearch resume` takes it.")
    ] = False,
) -> None:
    """Steer a run: acts are recorded, applied at the run's next step (running, paused or stopped), and replayed."""
    from ksearch.flows import inspect as inspect_flow
    from ksearch.flows import steering as steering_flow

    args = _steer_args(
        act,
        node,
        title=title,
        description=description,
        difficulty=difficulty,
        score=score,
        speedup=speedup,
        rationale=rationale,
        node_id=node_id,
        pin=pin,
        off=off,
    )
    ws = workspace_of(ctx)
    run_row = inspect_flow.run_row(run_id, ws)
    with Progress(run_row["config"].get("max_rounds", 0)) as progress:
        result = steering_flow.steer(
            run_row["id"], act.value, args, author=author, workspace=ws, on_event=progress, drive=not no_drive
        )
    out.print(f"act #{result.act_id} ({result.act}) on run [bold]{result.run_id}[/bold]: {escape(result.message)}")
    if result.busy:
        out.print(f"[yellow]{escape(result.busy)}[/yellow]: it takes the answer at its next step")
    elif result.outcome is not None:
        print_outcome(result.outcome, ws)
        raise typer.Exit(int(exit_code(result.outcome)))


def _steer_args(act: SteerAct, node: str | None, **options: Any) -> dict[str, Any]:
    if act in (SteerAct.pin, SteerAct.unpin, SteerAct.prune, SteerAct.revive):
        if node is None:
            raise UserError(f"`steer RUN {act.value}` needs a NODE", hint="see node ids with: ksearch show RUN")
        return {"node_id": node}
    if act == SteerAct.add:
        if node is None or not options["title"]:
            raise UserError("`steer RUN add PARENT --title TEXT` needs the parent node and a title")
        return {
            "parent_id": node,
            "title": options["title"],
            "description": options["description"],
            "difficulty": options["difficulty"],
            "score": options["score"],
            "expected_speedup": options["speedup"],
            "rationale": options["rationale"],
            "node_id": options["node_id"],
            "pin": options["pin"],
        }
    if act == SteerAct.require_approval:
        return {"on": not options["off"]}
    return {"node_id": node} if node else {}


@app.command()
def fork(
    ctx: typer.Context,
    run_id: RunIdArg,
    at: Annotated[int, typer.Option("--at", help="Continue from the end of this round of RUN (0 = before the first).")],
    model: Annotated[str | None, MODEL] = None,
    base_url: BaseUrlOpt = None,
    device: Annotated[str | None, DEVICE] = None,
    max_rounds: Annotated[int | None, MAX_ROUNDS] = None,
    stagnation_window: Annotated[int | None, STAGNATION_WINDOW] = None,
    parallel: Annotated[int | None, typer.Option(help="Actions explored at once.")] = None,
    max_tokens: MaxTokensOpt = None,
    temperature: TemperatureOpt = None,
    require_approval: Annotated[
        bool | None,
        typer.Option(
            "--require-approval/--no-require-approval",
            help="Whether new bests wait for approval (default: as RUN at that round).",
        ),
    ] = None,
    new_run_id: RunIdOpt = None,
    as_json: JsonOpt = False,
    trust_task: Annotated[
        bool,
        typer.Option("--trust-task", help="Run RUN's task file although you have not vouched for it here."),
    ] = False,
) -> None:
    """Start a new run from RUN's state at the end of round --at, with another model or settings afterwards.

    A flag left out keeps RUN's setting (a new --model does not keep RUN's --base-url). The rounds and tokens
    budgets count the inherited rounds and calls. Exits as `run` does."""
    from ksearch.flows import fork as fork_flow
    from ksearch.flows import inspect as inspect_flow
    from ksearch.flows import run as run_flow

    updates: dict[str, Any] = {
        "model": model,
        "base_url": base_url,
        "device": device,
        "max_rounds": max_rounds,
        "stagnation_window": stagnation_window,
        "parallel_cycles": parallel,
        "temperature": temperature,
        "require_approval": require_approval,
        "run_id": new_run_id,
    }
    ws = workspace_of(ctx)
    console = json_mode(as_json)
    parent = inspect_flow.run_row(run_id, ws)
    if max_tokens is not None:
        updates["budget"] = {**parent["config"].get("budget", {}), "max_total_tokens": max_tokens}
    config = fork_flow.create_fork(parent["id"], at, updates=updates, workspace=ws, trust_task=trust_task)
    console.print(
        f"forked [bold]{parent['id']}[/bold] at round {at} as new run [bold]{config.run_id}[/bold] "
        f"(model {config.model}, device {config.device}, {count(config.max_rounds, 'round')}; rounds up to {at} "
        "are the parent's, served from its records)"
    )
    with Progress(config.max_rounds, console=console, inherited=(parent["id"], at)) as progress:
        outcome = run_flow.resume_run(config.run_id, workspace=ws, on_event=progress)
    finish(outcome, ws, as_json)


@app.command()
def mcp(
    ctx: typer.Context,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            help="The OpenAI-compatible server the runs use (no tool argument can name another: the key goes here).",
        ),
    ] = None,
    prompts_only: Annotated[
        bool,
        typer.Option(
            "--prompts-only",
            help=(
                "On a machine without the runs' GPU: runs plan and write here and stop where kernels wait for the "
                "GPU; a server there (its resume_run tool) or `ksearch resume RUN` evaluates them."
            ),
        ),
    ] = False,
) -> None:
    """Serve ksearch to coding agents over MCP (stdio): tasks, runs, pending prompts, replies, steering, eval."""
    try:
        from ksearch.flows.mcp import serve
    except ImportError as exc:
        raise UserError(f"the MCP server needs the `mcp` package ({exc})", hint="pip install 'ksearch[mcp]'") from None
    serve(workspace_of(ctx), base_url=base_url, prompts_only=prompts_only)
