"""Commands that drive searches: ``run``, ``resume`` and ``replay`` (the ``run`` flow does the work)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape

from ksearch.cli._common import (
    BaselineOpt,
    JsonOpt,
    KernelBenchRootOpt,
    LatestRunIdArg,
    SchedulerOpt,
    count,
    json_mode,
    pick_run,
    workspace_of,
)
from ksearch.cli.errors import fail
from ksearch.cli.options import (
    BaseUrlOpt,
    DeviceOpt,
    MaxRoundsOpt,
    MaxTokensOpt,
    ModelOpt,
    RunIdOpt,
    RunTimeoutOpt,
    StagnationWindowOpt,
    TemperatureOpt,
)
from ksearch.cli.outcomes import finish
from ksearch.cli.progress import Progress

if TYPE_CHECKING:
    from rich.console import Console

    from ksearch.agent.config import RunConfig
    from ksearch.flows.run import RunOutcome

app = typer.Typer()


@app.command()
def run(
    ctx: typer.Context,
    task: Annotated[str, typer.Argument(help="Task name; list them with `ksearch tasks`.")],
    model: ModelOpt,
    base_url: BaseUrlOpt = None,
    language: Annotated[str, typer.Option(help="Kernel language.")] = "triton",
    device: DeviceOpt = "auto",
    max_rounds: MaxRoundsOpt = 20,
    stagnation_window: StagnationWindowOpt = 5,
    max_attempts_per_cycle: Annotated[int | None, typer.Option(help="Cap on rounds per cycle.")] = None,
    parallel: Annotated[
        int | None,
        typer.Option(
            help=(
                "Actions explored at once [default: one per GPU in --gpus, or with --executor dask one per "
                "evaluation slot of the cluster; 1 on cpu]."
            )
        ),
    ] = None,
    gpus: Annotated[
        str, typer.Option(help="GPUs to lease evaluations on: all, a count (2) or indices (0,1,3); ignored on cpu.")
    ] = "all",
    executor: Annotated[
        str,
        typer.Option(
            help=(
                "Where evaluations run: local (this machine) or dask (the workers of a Dask cluster: --scheduler; "
                "this machine needs no GPU)."
            )
        ),
    ] = "local",
    scheduler: SchedulerOpt = None,
    max_difficulty: Annotated[int, typer.Option(help="Defer actions harder than this (1-5).")] = 4,
    explore_every: Annotated[
        int,
        typer.Option(
            help="Every Nth cycle runs the first open action of the least-explored family (a branch under the root), "
            "whatever its score or difficulty (0: never)."
        ),
    ] = 4,
    max_tokens: MaxTokensOpt = None,
    max_cost: Annotated[
        float | None, typer.Option(help="Stop when the run has cost this many USD (needs prices).")
    ] = None,
    price_input: Annotated[float | None, typer.Option(help="USD per 1M input tokens, for cost accounting.")] = None,
    price_output: Annotated[float | None, typer.Option(help="USD per 1M output tokens, for cost accounting.")] = None,
    temperature: TemperatureOpt = None,
    run_id: RunIdOpt = None,
    run_timeout: RunTimeoutOpt = 300.0,
    llm_timeout: Annotated[
        float, typer.Option(help="Seconds one LLM request may take before it is abandoned and retried.")
    ] = 600.0,
    llm_max_attempts: Annotated[
        int,
        typer.Option(
            help="Tries per LLM request on rate limits, timeouts and server errors (with exponential back-off)."
        ),
    ] = 5,
    kernelbench_root: KernelBenchRootOpt = None,
    baseline: BaselineOpt = "eager",
    seed_from: Annotated[
        Path | None,
        typer.Option(
            "--seed-from", help="Continue from this solution file: it is evaluated first and the first cycles edit it."
        ),
    ] = None,
    compete: Annotated[
        list[Path] | None,
        typer.Option(
            "--compete",
            help="A best known competing kernel (a solution file, evaluated here) or per-shape times (.json/.toml); "
            "the planner sees the gap to it per shape. Repeatable.",
        ),
    ] = None,
    require_approval: Annotated[
        bool,
        typer.Option(
            "--require-approval",
            help="Pause before each new best is promoted until `ksearch steer RUN approve|reject`.",
        ),
    ] = False,
    skills: Annotated[
        bool,
        typer.Option(
            "--skills/--no-skills",
            help=(
                "Show the planner fitting skills from a frozen snapshot of the library and record trials of the ones "
                "it applies."
            ),
        ),
    ] = True,
    lift_skills: Annotated[
        bool,
        typer.Option(
            "--lift-skills/--no-lift-skills",
            help="Lift a candidate skill from every significantly faster parent -> child edge (paired; GPU only).",
        ),
    ] = True,
    target_gpu: Annotated[
        str | None,
        typer.Option(
            "--target-gpu",
            help=(
                "On the CPU: write kernels for this GPU (h100, h200, b200, a100, ...): its limits and peaks go into "
                "every prompt and each Triton kernel is compiled for it and checked against its limits."
            ),
        ),
    ] = None,
    counters: Annotated[
        bool,
        typer.Option(
            "--counters/--no-counters",
            help="On a GPU where Nsight Compute (ncu) runs: hardware counters of each cycle's best and of the "
            "solutions the planner asks about, for the model (at most 15 percent of the run's evaluation time).",
        ),
    ] = True,
    counter_shapes: Annotated[
        int,
        typer.Option(
            "--counter-shapes", min=1, max=8, help="How many benchmark shapes (the longest) the counters profile."
        ),
    ] = 2,
    as_json: JsonOpt = False,
) -> None:
    """Search for a fast, correct kernel for TASK.

    Exits 0 when a kernel passed (or the run waits for an answer), 3 when the run ended with none, 1 on an error."""
    from ksearch.flows import inspect as inspect_flow
    from ksearch.flows import run as runner
    from ksearch.flows.placement import placement
    from ksearch.flows.run_config import run_config

    device, parallel = placement(device, parallel, executor=executor, scheduler=scheduler, gpus=gpus)
    task_name = task
    # an operator file's reference is checked here; with dask on the CPU, since this machine may have no GPU
    task = inspect_flow.canonical_task(task, kernelbench_root, device if executor == "local" else "cpu")
    try:
        config = run_config(
            task,
            model,
            run_id=run_id,
            named_after=task_name,
            language=language,
            base_url=base_url,
            temperature=temperature,
            device=device,
            max_rounds=max_rounds,
            stagnation_window=stagnation_window,
            max_attempts_per_cycle=max_attempts_per_cycle,
            parallel_cycles=parallel,
            gpus=gpus,
            executor=executor,
            scheduler=scheduler,
            max_difficulty=max_difficulty,
            explore_every=explore_every,
            run_timeout_s=run_timeout,
            llm_timeout_s=llm_timeout,
            llm_max_attempts=llm_max_attempts,
            budget={  # a BudgetConfig, validated with the rest so that every bad flag is named at once
                "max_total_tokens": max_tokens,
                "max_cost_usd": max_cost,
                "price_input_per_mtok": price_input,
                "price_output_per_mtok": price_output,
            },
            seed_from=str(seed_from) if seed_from is not None else None,
            compete=[str(p) for p in compete or []],
            require_approval=require_approval,
            skills=skills,
            lift_skills=lift_skills,
            target_gpu=target_gpu,
            counters=counters,
            counter_shapes=counter_shapes,
        )
    except ValidationError as exc:
        fail(exc)
    where = f" on the Dask cluster at {escape(scheduler or '')}" if executor == "dask" else ""
    banner = [
        f"run [bold]{config.run_id}[/bold]: task {escape(task)}, model {escape(model)}, device {device}{where}, "
        f"{count(max_rounds, 'round')}, {count(config.parallel_cycles, 'cycle')} at once"
    ]
    if device == "cpu":
        aim = f"; written and checked for the {config.target_gpu}'s limits" if config.target_gpu else ""
        banner.append(
            "[yellow]device cpu: kernels run under the Triton interpreter, checked for correctness only (not "
            f"timed){aim}[/yellow]"
        )
    console = json_mode(as_json)
    with Progress(config.max_rounds, banner=banner, console=console) as progress:
        outcome = runner.start_run(config, workspace=workspace_of(ctx), on_event=progress)
    speedup = _kernelbench_speedup(outcome, config, baseline, workspace_of(ctx), console)
    finish(outcome, workspace_of(ctx), as_json, extra={"kernelbench_speedup": speedup} if speedup else {})


@app.command()
def demo(ctx: typer.Context, run_id: RunIdOpt = None, as_json: JsonOpt = False) -> None:
    """The offline demo: six rounds of softmax on the CPU from scripted replies shipped with ksearch (no API key, no
    GPU; the replies were written by hand, not by a model). Runs from any folder; exits as `run` does."""
    from ksearch.flows import demo as demo_flow

    run(
        ctx,
        task=demo_flow.TASK,
        model=f"replay:{demo_flow.REPLIES}",
        device=demo_flow.DEVICE,
        max_rounds=demo_flow.ROUNDS,
        stagnation_window=demo_flow.STAGNATION_WINDOW,
        run_id=run_id,
        as_json=as_json,
    )


@app.command()
def resume(
    ctx: typer.Context,
    run_id: LatestRunIdArg = None,
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler",
            help=(
                "For a run made with --executor dask: go on with the Dask scheduler at this address (the run "
                "remembers it)."
            ),
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            help=(
                "The OpenAI-compatible server to use (a server stored in the workspace is used only when you vouched "
                "for it on this machine, by starting the run or by naming it here; loopback included)."
            ),
        ),
    ] = None,
    trust_task: Annotated[
        bool,
        typer.Option(
            "--trust-task",
            help=(
                "Run the run's task file although you have not vouched for it on this machine as it is now (a "
                "received workspace can name any file; it is loaded in a process without your key)."
            ),
        ),
    ] = False,
    prompts_only: Annotated[
        bool,
        typer.Option(
            "--prompts-only",
            help=(
                "On a machine without the run's GPU: plan and write here (interactive prompts too); each kernel "
                "waits for `ksearch resume RUN` on the GPU machine."
            ),
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Continue a run from its last checkpoint (after a crash, a kill or Ctrl-C); without RUN, the latest unfinished
    run.

    Exits as `run` does: 0 when a kernel passed (or the run waits), 3 when it ended with none, 1 on an error."""
    from ksearch.flows import inspect as inspect_flow
    from ksearch.flows import run as runner

    console = json_mode(as_json)
    run_row = inspect_flow.run_row(pick_run(ctx, run_id, unfinished=True), workspace_of(ctx))
    max_rounds = run_row["config"].get("max_rounds", 0)
    with Progress(max_rounds, announce_resume=True, console=console) as progress:
        outcome = runner.resume_run(
            run_row["id"],
            workspace=workspace_of(ctx),
            on_event=progress,
            scheduler=scheduler,
            base_url=base_url,
            trust_task=trust_task,
            prompts_only=prompts_only,
        )
    finish(outcome, workspace_of(ctx), as_json)


@app.command()
def replay(
    ctx: typer.Context,
    run_id: LatestRunIdArg = None,
    device: Annotated[str | None, typer.Option(help="Re-evaluate on this device (default: the recorded one).")] = None,
    trust_task: Annotated[
        bool,
        typer.Option("--trust-task", help="Run the run's task file although you have not vouched for it here."),
    ] = False,
    new_run_id: RunIdOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-execute a past run with its recorded LLM replies, re-evaluating every kernel on this machine (exits as
    `run` does)."""
    from ksearch.flows import run as runner

    console = json_mode(as_json)
    config = runner.replay_config(
        pick_run(ctx, run_id), workspace=workspace_of(ctx), device=device, trust_task=trust_task, new_id=new_run_id
    )
    banner = [f"replaying [bold]{config.replay_of}[/bold] as new run [bold]{config.run_id}[/bold] on {config.device}"]
    with Progress(config.max_rounds, banner=banner, console=console) as progress:  # once the new id and task are good
        outcome = runner.start_run(config, workspace=workspace_of(ctx), on_event=progress)
    finish(outcome, workspace_of(ctx), as_json)


def _kernelbench_speedup(
    outcome: RunOutcome, config: RunConfig, mode: str, ws: Path, console: Console
) -> dict[str, Any] | None:
    """For KernelBench tasks on a GPU: the best kernel's speedup over the (cached) PyTorch baseline, said on
    ``console`` and returned for ``--json``."""
    from ksearch.flows import inspect as inspect_flow
    from ksearch.flows.baselines import kernelbench_speedup

    if not config.task.startswith("kernelbench:") or outcome.best is None or config.device == "cpu":
        return None
    if config.executor != "local":  # the baseline is measured on this machine's GPU, which a dask agent may lack
        return None
    evaluation = inspect_flow.evaluation(outcome.best.evaluation_id, ws)
    console.print(f"measuring the PyTorch {mode} baseline (cached per problem and GPU)...")
    base, ratio = kernelbench_speedup(config.task, config.device, evaluation, mode=mode, workspace=ws)
    if ratio is None:
        console.print(f"[yellow]no speedup: baseline {base.verdict}[/yellow] {escape(base.log[:200])}")
        return {"baseline": mode, "baseline_verdict": base.verdict, "speedup": None}
    console.print(
        f"speedup over PyTorch {mode}: [bold]{ratio:.3f}x[/bold] ({base.latency_ms:.4f} ms -> "
        f"{evaluation.latency_ms:.4f} ms)"
    )
    return {"baseline": mode, "baseline_ms": base.latency_ms, "latency_ms": evaluation.latency_ms, "speedup": ratio}
