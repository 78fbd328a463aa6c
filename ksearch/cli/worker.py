"""``ksearch worker``: a Dask worker for one GPU (or the CPU interpreter) of a search's cluster."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from ksearch import settings
from ksearch.cli._common import out

app = typer.Typer()

WorkerSchedulerOpt = Annotated[
    str,
    typer.Option(
        "--scheduler", envvar=settings.SCHEDULER.name, help="The Dask scheduler's address, e.g. tcp://host:8786."
    ),
]


@app.command()
def worker(
    scheduler: WorkerSchedulerOpt,
    gpu: Annotated[
        int | None,
        typer.Option(
            help=(
                "Own GPU N, as torch numbers the GPUs visible here (the worker sees only it; resource GPU=1); "
                "without it, CPU evaluations (resource INTERPRETER=1)."
            )
        ),
    ] = None,
    nthreads: Annotated[
        int, typer.Option(min=1, help="Threads of the Dask worker (evaluations stay one at a time).")
    ] = 1,
    name: Annotated[
        str | None, typer.Option(help="Worker name in the cluster (default: HOST-gpuN, or HOST-cpu-PID).")
    ] = None,
    death_timeout: Annotated[
        float | None,
        typer.Option(
            help=(
                "Wait this many seconds for an unreachable scheduler, at start and once joined (default: refuse at "
                "once at start; once joined, keep trying)."
            )
        ),
    ] = None,
) -> None:
    """Serve evaluations to searches run with --executor dask --scheduler ADDR, until Ctrl-C or SIGTERM."""
    from ksearch.flows import worker as worker_flow

    spec = worker_flow.WorkerSpec(
        scheduler=scheduler, gpu=gpu, nthreads=nthreads, name=name, death_timeout_s=death_timeout
    )

    def started(info: worker_flow.WorkerStarted) -> None:
        what = f"GPU {gpu}: {info.device.gpu}" if gpu is not None else "CPU evaluations (Triton interpreter)"
        out.print(
            f"worker [bold]{escape(info.name)}[/bold] at {info.address}, joined {escape(scheduler)}: {escape(what)}"
        )

    worker_flow.serve_worker(spec, on_started=started)
    out.print("worker stopped")
