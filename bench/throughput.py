"""Throughput of a search on one device: candidates per hour and the device's busy fraction, by executor (local,
dask) and by the number of cycles run at once (``--parallel``), with a scripted model that answers after a
realistic delay (issue 11).

The model is an OpenAI-compatible server on this machine (``tests/faults/llm_server.py``) that answers every call
after ``--delay`` seconds, as a hosted model would: the planner's first reply opens 8 actions, later ones open 3
more, and every coder reply is the same kernel (``examples/trimul_triton.py`` for TriMul, the softmax row kernel
of the tests on the CPU) with a distinct comment, so each candidate is evaluated for real (a new hash, no cache
hit). The search itself is unchanged: its own stagnation rule (``--stagnation-window``), replanning and promotions.

Per configuration, a fresh workspace and a fresh executor (so every run starts its evaluator sessions cold, as a
real run does); the ``dask`` backend runs against a scheduler in this process and one ``ksearch worker`` process
(``--gpu 0`` on a GPU), started once. Measured:

- candidates per hour: evaluations completed / wall time of the run (first plan to end) * 3600;
- device busy fraction: the union of the intervals the device spent evaluating and comparing candidates, measured
  where the work ran (``Executor.busy``), over the wall time; and the same union over the steady part of the run,
  from the start of the first evaluation to the end of the last (the run's first plan and first kernel, two LLM
  calls in which no candidate exists yet, are outside it; a short run is dominated by them).

Usage (repository root):

    # GPU, one command (about 25 min with these defaults; each configuration's wall time is printed as it ends):
    PYTHONPATH=$PWD python3 bench/throughput.py --device cuda --task trimul --json $OUT/throughput.json
    # split it when a command may last at most 10 minutes:
    PYTHONPATH=$PWD python3 bench/throughput.py --device cuda --backends local --parallel 1 --json $OUT/local-1.json
    # two GPUs of one host (issue 12): one GPU (--gpus 1, a count: the first) against both, four cycles per GPU,
    # local executor and a Dask worker per GPU (bench/RESULTS.md, "Throughput"):
    PYTHONPATH=$PWD python3 bench/throughput.py --device cuda --task trimul --delay 20 --backends local --gpus 1 \
        --parallel 4 --minutes 3 --json $OUT/g1.json
    PYTHONPATH=$PWD python3 bench/throughput.py --device cuda --task trimul --delay 20 --backends local --gpus 0,1 \
        --parallel 8 --minutes 3 --json $OUT/g2.json
    # CPU smoke (Triton interpreter, correctness only; about 3 minutes):
    PYTHONPATH=$PWD python3 bench/throughput.py --device cpu --delay 2 --rounds 6

On the CPU the local executor runs parallel evaluations side by side on the cores (there is no GPU to lease), and
the dask worker one at a time, like a GPU: only the dask numbers model one device there.

``--gpus SPEC`` (``all``, a count, or indices ``0,1``) spreads the run over those GPUs: the local executor leases
them from the run's GPU pool (``--gpus`` of ``ksearch run``), the dask backend starts one ``ksearch worker --gpu N``
per GPU. Each row then also says how many GPUs timed a candidate and how many pairs of evaluations were timed on one
GPU at once (``same_gpu_overlaps``, which must be 0), read from the run's store: the checker names each
evaluation's GPU by its UUID and the parent records when its worker was timing (``timed_epoch_s``). Without
``--gpus``, GPU 0 alone (``cuda:0``), as before.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ksearch.agent.config import RunConfig
from ksearch.errors import KsearchError
from ksearch.flows import driving
from ksearch.flows import run as runner
from ksearch.flows.workspace import DB_NAME
from ksearch.logs import configure_logging
from ksearch.tools.executors import Busy, DaskExecutor, Executor, LocalExecutor
from tests.faults.llm_server import Reply, Request, loopback_llm
from tests.helpers.scripts import fenced, init_plan, row_kernel

_PLAN = re.compile(r"^plan:(\d+)")


def kernel_source(task: str) -> str:
    if task == "trimul":
        return (REPO / "examples" / "trimul_triton.py").read_text(encoding="utf-8")
    if task == "softmax":
        return row_kernel(0)
    raise SystemExit(f"bench/throughput.py: no scripted kernel for task {task!r} (softmax or trimul)")


def responder(kernel: str, delay_s: float) -> Any:
    """Every call answered after ``delay_s``: plans that keep actions open, and one distinct candidate per write."""

    def respond(request: Request) -> Reply:
        if request.key.startswith("write:"):
            code = f"{kernel.rstrip()}\n\n# bench candidate {request.key} #{request.repeat}\n"
            return Reply(text=fenced(code), delay_s=delay_s)
        number = int(_PLAN.match(request.key)[1]) if _PLAN.match(request.key) else request.index
        if number == 0:
            return Reply(text=init_plan([(f"a{i}", round(0.9 - 0.05 * i, 2)) for i in range(8)]), delay_s=delay_s)
        ops = [
            {
                "op": "insert",
                "parent_id": "root",
                "node": {
                    "id": f"p{number}x{i}",
                    "action": {"title": f"Variant {number}.{i}", "difficulty": 2, "score": 0.8},
                },
            }
            for i in range(3)  # RunConfig.max_new_nodes
        ]
        return Reply(text=json.dumps({"ops": ops}), delay_s=delay_s)

    return respond


@contextmanager
def dask_cluster(device: str, folder: Path, gpus: list[int] | None = None) -> Iterator[str]:
    """A scheduler in this process and one ``ksearch worker`` process per GPU of ``gpus`` (default GPU 0; on the
    CPU one worker for the interpreter)."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=0, processes=False, protocol="tcp", host="127.0.0.1", scheduler_port=0, dashboard_address=":0"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    owned: list[int | None] = [None] if device == "cpu" else list(gpus or [0])
    workers: list[tuple[subprocess.Popen[bytes], Any]] = []
    for gpu in owned:
        suffix = "cpu" if gpu is None else f"gpu{gpu}"
        argv = [
            sys.executable,
            "-m",
            "ksearch.cli",
            "--workspace",
            str(folder / f"worker-ws-{suffix}"),
            "worker",
            "--scheduler",
            cluster.scheduler_address,
            *(["--gpu", str(gpu)] if gpu is not None else []),
        ]
        log = open(folder / f"worker-{suffix}.log", "wb")  # noqa: SIM115 - closed below
        workers.append((subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    client = Client(cluster.scheduler_address, set_as_default=False)
    try:
        client.wait_for_workers(len(workers), timeout=300)
        yield cluster.scheduler_address
    finally:
        client.close()
        for worker, _ in workers:
            worker.send_signal(signal.SIGTERM)
        for worker, log in workers:
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                worker.kill()
            log.close()
        cluster.close()


def same_gpu_overlaps(spans: list[tuple[str, float, float]]) -> int:
    """Pairs of ``(gpu, start, end)`` spans on one GPU that overlap in time (touching ends do not)."""
    count = 0
    by_gpu: dict[str, list[tuple[float, float]]] = {}
    for gpu, start, end in spans:
        by_gpu.setdefault(gpu, []).append((start, end))
    for intervals in by_gpu.values():
        intervals.sort()
        for i, (_, end) in enumerate(intervals):
            for start, _ in intervals[i + 1 :]:
                if start >= end:
                    break
                count += 1
    return count


def timed_spans(store_path: Path) -> list[tuple[str, float, float]]:
    """``(gpu, start, end)`` of every timed evaluation in a run's store: the GPU by the checker's UUID (else the
    device the evaluation leased), the span from the parent's record of the worker's timing phase."""
    import sqlite_utils

    from ksearch.contracts.evaluation import Evaluation

    if not store_path.exists():
        return []
    database = sqlite_utils.Database(store_path)
    try:
        reports = [row["report"] for row in database["evaluations"].rows_where(select="report")]
    finally:
        database.close()
    spans = []
    for report in reports:
        environment = Evaluation.model_validate_json(report).environment
        span = environment.get("timed_epoch_s")
        if not span:
            continue
        start, end = (float(x) for x in span.split("-"))
        spans.append((environment.get("gpu_uuid") or environment.get("leased_device", "?"), start, end))
    return spans


def busy_seconds(intervals: list[Busy], start: float, end: float) -> float:
    """Length of the union of the intervals, clipped to [start, end]."""
    spans = sorted((max(b.started, start), min(b.ended, end)) for b in intervals if b.ended > start and b.started < end)
    total, cursor = 0.0, start
    for lo, hi in spans:
        lo = max(lo, cursor)
        if hi > lo:
            total += hi - lo
            cursor = hi
    return total


def measure(
    args: argparse.Namespace,
    backend: str,
    parallel: int,
    executor: Executor,
    scheduler: str | None,
    base_url: str,
    folder: Path,
) -> dict[str, Any]:
    one_gpu = args.gpus is None
    device = ("cuda:0" if backend == "local" and one_gpu else "cuda") if args.device == "cuda" else "cpu"
    config = RunConfig(
        run_id=f"{backend}-p{parallel}",
        task=args.task,
        model="openai:bench",
        base_url=base_url,
        device=device,
        max_rounds=args.rounds,
        stagnation_window=args.stagnation_window,
        parallel_cycles=parallel,
        skills=False,
        lift_skills=False,
        executor=backend,
        scheduler=scheduler,
        gpus=args.gpus or "all",
    )
    done = {"rounds": 0}

    def on_event(event: str, data: dict[str, Any]) -> None:
        if event == "round":
            done["rounds"] += 1
            print(
                f"  {backend} p={parallel} round {done['rounds']:>3}: {data['verdict']} "
                f"({time.monotonic() - began:.0f} s)",
                file=sys.stderr,
                flush=True,
            )

    timer = (
        threading.Timer(args.minutes * 60, driving.request_stop, args=("bench time limit",)) if args.minutes else None
    )
    stopped = None
    began = time.monotonic()
    start = time.time()
    if timer is not None:
        timer.start()
    try:
        outcome = runner.start_run(config, workspace=folder / config.run_id, on_event=on_event, executor=executor)
        rounds = outcome.rounds_used
    except KsearchError as exc:
        stopped, rounds = str(exc), done["rounds"]
    finally:
        if timer is not None:
            timer.cancel()
    end = time.time()
    print(f"  {backend} p={parallel}: run ended ({time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)
    wall = end - start
    evaluations = [b for b in executor.busy if b.kind == "evaluate" and b.started >= start - 1]
    compares = [b for b in executor.busy if b.kind == "compare" and b.started >= start - 1]
    work = [*evaluations, *compares]
    busy = busy_seconds(work, start, end)
    first = min((b.started for b in work), default=end)
    last = max((b.ended for b in work), default=end)
    steady = max(last - first, 1e-9)
    spans = timed_spans(folder / config.run_id / DB_NAME)
    gpu_ids = sorted({gpu for gpu, _, _ in spans})  # a UUID from the checker, else the leased device's name
    return {
        "backend": backend,
        "parallel": parallel,
        "rounds": rounds,
        "evaluations": len(evaluations),
        "comparisons": len(compares),
        "wall_s": round(wall, 1),
        "candidates_per_hour": round(len(evaluations) / wall * 3600, 1),
        "busy_fraction": round(busy / wall, 3),
        "steady_s": round(steady, 1),
        "steady_busy_fraction": round(busy_seconds(work, first, last) / steady, 3),
        "mean_evaluation_s": round(sum(b.ended - b.started for b in evaluations) / max(1, len(evaluations)), 2),
        "gpus": args.gpus or ("0" if args.device == "cuda" else ""),
        "timed_evaluations": len(spans),
        "gpus_timing": len(gpu_ids),
        "gpu_ids": gpu_ids,
        "same_gpu_overlaps": same_gpu_overlaps(spans),
        "stopped": stopped,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--task", default=None, help="trimul (default on cuda) or softmax (default on cpu)")
    parser.add_argument("--delay", type=float, default=None, help="seconds per LLM call (default 20 on cuda, 2 on cpu)")
    parser.add_argument("--rounds", type=int, default=12, help="rounds (candidates) per configuration")
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--backends", nargs="+", choices=["local", "dask"], default=["local", "dask"])
    parser.add_argument("--stagnation-window", type=int, default=5)
    parser.add_argument(
        "--gpus", default=None, help="GPUs to spread the run over (all, a count, or indices 0,1; default: GPU 0 alone)"
    )
    parser.add_argument("--minutes", type=float, default=None, help="stop each configuration after this long")
    parser.add_argument(
        "--json", type=Path, default=None, help="write the results here (also $OUT/bench_throughput.json)"
    )
    parser.add_argument("--keep", type=Path, default=None, help="keep the workspaces in this folder")
    args = parser.parse_args()
    args.task = args.task or ("trimul" if args.device == "cuda" else "softmax")
    args.delay = args.delay if args.delay is not None else (20.0 if args.device == "cuda" else 2.0)
    if args.device == "cpu":
        if args.gpus is not None:
            raise SystemExit("bench/throughput.py: --gpus needs --device cuda")
        os.environ.setdefault("TRITON_INTERPRET", "1")
    elif not LocalExecutor().device_info("cuda:0").is_gpu:
        raise SystemExit("bench/throughput.py: no CUDA GPU visible; use --device cpu for the smoke run")
    kernel = kernel_source(args.task)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="ksearch-throughput-"))
    folder.mkdir(parents=True, exist_ok=True)
    configure_logging(folder / "ksearch.log")  # the runs' log events, for a look afterwards (--keep)
    results: list[dict[str, Any]] = []
    with loopback_llm(responder(kernel, args.delay)) as server:
        for backend in args.backends:
            with _backend(backend, args.device, folder, gpu_indices(args.gpus)) as scheduler:
                for parallel in args.parallel:
                    executor: Executor = DaskExecutor(scheduler) if scheduler else LocalExecutor()
                    try:
                        info = executor.device_info(
                            "cpu" if args.device == "cpu" else ("cuda" if scheduler else "cuda:0")
                        )
                        row = measure(args, backend, parallel, executor, scheduler, server.base_url, folder)
                    finally:
                        executor.close()
                    row["device"] = info.gpu or "cpu-interpreter"
                    results.append(row)
                    print(_line(row), flush=True)
                    _write(args, results)  # after every configuration: a command cut off keeps what it measured
    print(json.dumps(_write(args, results), indent=2))


def _write(args: argparse.Namespace, results: list[dict[str, Any]]) -> dict[str, Any]:
    report = {
        "bench": "throughput",
        "task": args.task,
        "device": args.device,
        "llm_delay_s": args.delay,
        "rounds": args.rounds,
        "stagnation_window": args.stagnation_window,
        "host": socket.gethostname(),
        "results": results,
    }
    for path in [args.json, Path(os.environ["OUT"]) / "bench_throughput.json" if os.environ.get("OUT") else None]:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(report, indent=2) + "\n")
    return report


@contextmanager
def _backend(backend: str, device: str, folder: Path, gpus: list[int] | None) -> Iterator[str | None]:
    if backend == "local":
        yield None
        return
    with dask_cluster(device, folder, gpus) as address:
        yield address


def gpu_indices(spec: str | None) -> list[int] | None:
    """The GPU indices of a ``--gpus`` value (probed in a subprocess, as ``ksearch run`` does); None without one."""
    if spec is None:
        return None
    from ksearch.tools.gpu_pool import parse_spec, probe_gpus

    return parse_spec(spec, probe_gpus())


def _line(row: dict[str, Any]) -> str:
    stopped = f" (stopped: {row['stopped']})" if row["stopped"] else ""
    return (
        f"{row['backend']:>5} parallel {row['parallel']}: {row['evaluations']} candidates in {row['wall_s']:.0f} s = "
        f"{row['candidates_per_hour']:.0f}/h, device busy {100 * row['busy_fraction']:.0f}% "
        f"({100 * row['steady_busy_fraction']:.0f}% from the first evaluation to the last), "
        f"{row['mean_evaluation_s']:.1f} s per evaluation; {row['timed_evaluations']} timed on "
        f"{row['gpus_timing']} GPU(s), {row['same_gpu_overlaps']} timed at once on one GPU{stopped}"
    )


if __name__ == "__main__":
    main()
