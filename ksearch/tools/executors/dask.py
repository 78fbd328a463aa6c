"""The Dask executor: evaluations as tasks on a Dask distributed cluster, one GPU per task.

The agent (which may have no GPU: a laptop, a login node) connects to a scheduler; ``ksearch worker --gpu N`` starts
one Dask worker per GPU, offering the resource ``GPU=1`` (``INTERPRETER=1`` without a GPU). Each evaluation is one
task asking for one unit of that resource, so a GPU runs one evaluation at a time, wherever it is. On the worker the
task goes through the same sandboxed checker and candidate processes as a local evaluation
(``ksearch.tools.executors.dask_worker``); candidate code never runs in the Dask worker's own process, and the
sandbox's environment is rebuilt from an allowlist there as here, so no API key reaches it.

Faults:

- a worker that dies mid-evaluation (SIGKILL, a lost node): the scheduler runs the task again on another worker; the
  agent gets one answer and stores it once (evaluations are keyed by candidate and evaluation key). A task whose
  workers died more than the scheduler's ``allowed-failures`` times (3 by default) comes back as a ``crashed``
  evaluation that says so;
- a task that runs past its hard limit (the sandbox's own limits, twice, plus the checker's start and a margin,
  timed from when a worker started it, not from submission): cancelled, its worker restarted (which kills its
  sandbox), and a ``timeout`` evaluation;
- no worker offering the resource for ``worker_wait_s``, or the scheduler lost: ``HarnessError``; the run stops,
  resumable, with nothing lost.

One salt per executor, sent with every task, so every worker checks the run's candidates on the same inputs.
``distributed`` is imported here only, lazily: ksearch works without the ``dask`` extra until this executor is used.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
import uuid
from typing import Any, Self

from ksearch.contracts.counters import CounterReport, CounterStatus
from ksearch.contracts.evaluation import Comparison, Evaluation, Verdict
from ksearch.errors import MissingExtraError, UserError
from ksearch.tools.evaluator.parent.evaluate import HarnessError
from ksearch.tools.evaluator.parent.request import HARNESS_VERSION, EvalRequest
from ksearch.tools.evaluator.parent.session import CHECKER_START_S
from ksearch.tools.executors.base import Busy
from ksearch.tools.executors.dask_common import (
    EVENT_TOPIC,
    GPU_RESOURCE,
    INTERPRETER_RESOURCE,
    TASK_PREFIX,
    device_kind,
    resource_for,
)
from ksearch.tools.fingerprint import DeviceInfo

INSTALL_HINT = "pip install 'ksearch[dask]' (on the agent's machine and on every worker)"
WORKER_HINT = (
    "start workers with: ksearch worker --scheduler {address} --gpu N (one per GPU; without --gpu, CPU evaluations)"
)
MARGIN_S = 60.0
"""Added to a task's hard limit: result transfer, a busy event loop."""
POLL_S = 1.0
"""How often a waiting evaluation looks at its task (a finished one is answered at once)."""


def import_distributed() -> Any:
    """The ``distributed`` module, or ``MissingExtraError`` naming the extra to install."""
    try:
        import distributed
    except ImportError as exc:
        raise MissingExtraError(
            f"--executor dask needs Dask distributed, which is not installed ({exc})", hint=INSTALL_HINT
        ) from exc
    return distributed


def hard_limit_s(request: EvalRequest) -> float:
    """The longest one attempt of a task may run on a worker: a fresh checker's start, then the sandbox's compile
    and run limits twice (``evaluate`` retries once on a fresh checker), and a margin."""
    return CHECKER_START_S + 2 * (request.compile_timeout_s + request.run_timeout_s) + MARGIN_S


def connect(address: str, *, timeout_s: float = 30.0) -> Any:
    """A client of the scheduler at ``address``; ``UserError`` with what to check when it cannot be reached."""
    distributed = import_distributed()
    try:
        # direct_to_workers=False: results come through the scheduler, so one tunnelled port is all the agent needs
        return distributed.Client(address, timeout=timeout_s, set_as_default=False, direct_to_workers=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise UserError(
            f"cannot reach the Dask scheduler at {address}: {exc}",
            hint="start one with `dask scheduler` on a machine the workers reach; from a laptop, tunnel its port "
            "first (ssh -N -L 8786:SCHEDULER_HOST:8786 LOGIN_HOST) and use --scheduler tcp://localhost:8786",
        ) from exc


def cluster_slots(address: str) -> dict[str, int]:
    """Evaluation slots of the cluster now, by device: ``{"cuda": units of GPU, "cpu": units of INTERPRETER}``
    that its workers offer."""
    client = connect(address)
    try:
        return {device_kind(resource): count for resource, count in _slots(client).items()}
    finally:
        client.close()


def _slots(client: Any) -> dict[str, int]:
    totals = {GPU_RESOURCE: 0, INTERPRETER_RESOURCE: 0}
    for worker in client.scheduler_info(n_workers=-1).get("workers", {}).values():
        for name, amount in (worker.get("resources") or {}).items():
            if name in totals:
                totals[name] += int(amount)
    return totals


class DaskExecutor:
    """Evaluations as tasks on the Dask cluster at ``scheduler``."""

    def __init__(
        self, scheduler: str, *, salt: int | None = None, worker_wait_s: float = 300.0, connect_timeout_s: float = 30.0
    ) -> None:
        self._distributed = import_distributed()
        from ksearch.tools.executors.dask_worker import (
            SessionsPlugin,
            compare_task,
            describe,
            evaluate_task,
        )

        self._describe, self._evaluate_task, self._compare_task = describe, evaluate_task, compare_task
        self.scheduler = scheduler
        self.salt = salt if salt is not None else secrets.randbits(62)
        """One salt for every task of the executor, so every worker checks a run's candidates on the same inputs."""
        self.worker_wait_s = worker_wait_s
        """How long an evaluation (or the start of a run) waits for a worker offering its resource to exist."""
        self.busy: list[Busy] = []
        self._started: dict[str, tuple[float, str]] = {}
        """Task key -> (monotonic time its latest attempt started, that worker's address), from the workers' events."""
        self._mine: set[str] = set()
        """Keys of this executor's tasks in flight."""
        self._lock = threading.Lock()
        self._workers_seen: tuple[float, dict[str, dict[str, float]]] = (0.0, {})
        self.client = connect(scheduler, timeout_s=connect_timeout_s)
        try:
            self.client.subscribe_topic(EVENT_TOPIC, self._on_event)
            self.client.register_plugin(SessionsPlugin(), name=SessionsPlugin.name)
        except BaseException:
            self.client.close()
            raise

    # -- the executor's interface -----------------------------------------------------------------------------------
    def device_info(self, device: str) -> DeviceInfo:
        """The device of the cluster's workers of that kind (every one asked: they must be the same model, since
        evaluations are cached per GPU model), after checking they run this harness version."""
        resource = resource_for(device)
        workers = self._wait_for_workers(resource, time.monotonic() + self.worker_wait_s)
        answers: dict[str, dict[str, Any]] = self.client.run(self._describe, device, workers=workers)
        for address, answer in answers.items():
            if answer["harness"] != HARNESS_VERSION:
                raise UserError(
                    f"Dask worker {address} ({answer['host']}) runs evaluator {answer['harness']} with ksearch "
                    f"{answer['ksearch']}; this agent runs {HARNESS_VERSION}",
                    hint="install the same ksearch on the agent's machine and on every worker",
                )
        infos = {address: DeviceInfo.model_validate(answer["info"]) for address, answer in answers.items()}
        models = {info.gpu or "cpu-interpreter" for info in infos.values()}
        if len(models) > 1:
            raise UserError(
                f"the Dask cluster at {self.scheduler} mixes devices ({', '.join(sorted(models))}): evaluations are "
                "cached and compared per GPU model",
                hint="run one scheduler (and one search) per GPU model",
            )
        return next(iter(infos.values()))

    def evaluate(self, request: EvalRequest) -> Evaluation:
        future = self._submit(self._evaluate_task, request, self.salt, device=request.device)
        try:
            result = self._wait(future, hard_limit_s(request), request.device)
        except self._distributed.KilledWorker as exc:
            return Evaluation(
                verdict=Verdict.CRASHED,
                device=request.device,
                log=f"every Dask worker that ran this evaluation died before it ended ({exc.allowed_failures + 1} "
                f"tries; the last on {getattr(exc.last_worker, 'address', exc.last_worker)}): the candidate may "
                "exhaust the node's memory, or the nodes are failing",
            )
        except _TaskTimeout as exc:
            return Evaluation(verdict=Verdict.TIMEOUT, device=request.device, log=str(exc))
        evaluation, where = result
        self._record("evaluate", where)
        return evaluation

    def compare(self, incumbent: EvalRequest, challenger: EvalRequest, *, rounds: int = 5) -> Comparison:
        future = self._submit(self._compare_task, incumbent, challenger, rounds, self.salt, device=incumbent.device)
        try:
            comparison, where = self._wait(future, hard_limit_s(incumbent), incumbent.device)
        except (self._distributed.KilledWorker, _TaskTimeout) as exc:
            from ksearch.tools.evaluator.parent.compare import ComparisonError

            raise ComparisonError(f"compare() on the Dask cluster failed: {exc}") from exc
        self._record("compare", where)
        return comparison

    def counters(self, request: EvalRequest, shapes: list[str]) -> CounterReport:
        """Not collected through the cluster yet: said plainly (``ksearch eval --counters`` on a node collects them)."""
        return CounterReport(
            status=CounterStatus.OFF,
            detail="the Dask executor does not collect hardware counters yet; `ksearch eval TASK FILE --counters` on a "
            "GPU node does",
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a scheduler already gone: closed enough
            self.client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- tasks -------------------------------------------------------------------------------------------------------
    def _submit(self, function: Any, *args: Any, device: str) -> Any:
        key = f"{TASK_PREFIX}{function.__name__.removesuffix('_task')}-{uuid.uuid4().hex}"
        with self._lock:
            self._mine.add(key)
        return self.client.submit(function, *args, key=key, resources={resource_for(device): 1}, pure=False, retries=0)

    def _wait(self, future: Any, limit_s: float, device: str) -> Any:
        """The task's result. Waits for a worker as long as one offering the resource exists (or appears within
        ``worker_wait_s``); once a worker runs the task, at most ``limit_s`` per attempt."""
        resource = resource_for(device)
        key = future.key
        no_worker_since: float | None = None
        try:
            while True:
                try:
                    return future.result(timeout=POLL_S)
                except TimeoutError:
                    pass
                except self._distributed.client.FutureCancelledError as exc:
                    raise HarnessError(
                        f"the Dask cluster at {self.scheduler} dropped evaluation task {key}: {exc}",
                        hint="check the scheduler; the run is resumable: ksearch resume RUN",
                    ) from exc
                now = time.monotonic()
                with self._lock:
                    started = self._started.get(key)
                if started is not None:
                    no_worker_since = None
                    if now - started[0] > limit_s:
                        if started[1] not in self._workers(fresh=True):  # that attempt died with its worker: the
                            with self._lock:  # task waits for another one, which will announce itself
                                self._started.pop(key, None)
                            continue
                        self._abandon(future, started[1])
                        raise _TaskTimeout(
                            f"no answer from Dask worker {started[1]} within {limit_s:.0f} s of starting the "
                            "evaluation (past the sandbox's own limits): the task was cancelled and the worker "
                            "restarted"
                        )
                    continue
                if self._offered(resource) > 0:
                    no_worker_since = None
                    continue
                no_worker_since = no_worker_since or now
                if now - no_worker_since > self.worker_wait_s:
                    future.cancel()
                    raise HarnessError(
                        f"no worker of the Dask cluster at {self.scheduler} has offered {resource}=1 for "
                        f"{self.worker_wait_s:.0f} s, so evaluation task {key} cannot run",
                        hint=WORKER_HINT.format(address=self.scheduler) + "; then: ksearch resume RUN",
                    )
        finally:
            future.release()
            with self._lock:
                self._started.pop(key, None)
                self._mine.discard(key)

    def _abandon(self, future: Any, worker: str) -> None:
        """Cancel a task that overran and restart its worker: the only way to stop a thread of a Dask worker, and
        its death takes the evaluation's sandboxed processes with it."""
        future.cancel()
        with contextlib.suppress(Exception):  # a worker without a nanny cannot be restarted; its sandbox limits hold
            self.client.restart_workers([worker], raise_for_error=False)

    def _on_event(self, event: Any) -> None:
        """A worker started a task (of any client of the cluster): note ours, for the hard limit."""
        _timestamp, message = event
        if not isinstance(message, dict):
            return
        key = str(message.get("key", ""))
        with self._lock:
            if key in self._mine:
                self._started[key] = (time.monotonic(), str(message.get("worker", "")))

    def _offered(self, resource: str) -> int:
        """Units of ``resource`` the cluster's workers offer now."""
        return sum(int(resources.get(resource, 0)) for resources in self._workers().values())

    def _workers(self, *, fresh: bool = False) -> dict[str, dict[str, float]]:
        """The cluster's workers and the resources each offers (asked of the scheduler at most every 5 s)."""
        seen_at, workers = self._workers_seen
        if fresh or time.monotonic() - seen_at > 5.0:
            info = self.client.scheduler_info(n_workers=-1).get("workers", {})
            workers = {address: dict(w.get("resources") or {}) for address, w in info.items()}
            self._workers_seen = (time.monotonic(), workers)
        return workers

    def _wait_for_workers(self, resource: str, deadline: float) -> list[str]:
        while True:
            workers = [
                address
                for address, info in self.client.scheduler_info(n_workers=-1).get("workers", {}).items()
                if (info.get("resources") or {}).get(resource, 0) >= 1
            ]
            if workers:
                return workers
            if time.monotonic() > deadline:
                raise UserError(
                    f"no worker of the Dask cluster at {self.scheduler} offers {resource}=1 "
                    f"(waited {self.worker_wait_s:.0f} s)",
                    hint=WORKER_HINT.format(address=self.scheduler),
                )
            time.sleep(1.0)

    def _record(self, kind: str, where: dict[str, Any]) -> None:
        ended = time.time()
        self.busy.append(Busy(kind, str(where.get("worker", "")), ended - float(where.get("seconds", 0.0)), ended))


class _TaskTimeout(Exception):
    """A task ran past its hard limit on a worker."""
