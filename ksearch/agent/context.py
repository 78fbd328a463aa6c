"""What nodes need besides the state: the run's config and its live services. Never checkpointed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ksearch.agent.config import RunConfig
from ksearch.contracts.candidate import Candidate
from ksearch.contracts.counters import CounterReport
from ksearch.contracts.evaluation import Evaluation
from ksearch.llm.client import LLMClient
from ksearch.skills.evidence import SkillView
from ksearch.skills.records import SkillContext
from ksearch.store import Store
from ksearch.tasks.base import Task
from ksearch.tools.evaluator import EvalRequest
from ksearch.tools.fingerprint import DeviceInfo
from ksearch.tools.gpu_pool import GpuPool


@dataclass
class SearchContext:
    config: RunConfig
    store: Store
    task: Task
    llm: LLMClient
    evaluate: Callable[[EvalRequest], Evaluation]
    """Runs one candidate in a sandboxed worker; injectable so tests can wrap it."""
    eval_key: str
    """Cache key of evaluations on this machine: task, device, harness and software versions."""
    device_description: str
    """For prompts: the device the kernels run on (name, SMs, memory) or the CPU interpreter's caveat."""
    gpu_pool: GpuPool | None = None
    """GPUs leased one evaluation at a time (None on the CPU, and with the Dask executor, whose scheduler gives each
    evaluation a GPU of the cluster): profile and promotion time on a leased device."""
    compare: Callable[..., Any] | None = None
    counters: Callable[[EvalRequest, list[str]], CounterReport] | None = None
    """``counters(request, shapes)``: Nsight Compute's counters of the request's candidate on those benchmark shapes,
    read by the executor's trusted collector; None where the executor has none."""
    """``compare(incumbent, challenger, *, rounds)``: the paired re-measurement promotion needs; None = single rule."""
    confirm_bests: bool = False
    """Confirm every timed candidate in leaderboard mode (``confirm``) before it becomes the best (on a GPU)."""
    skill_context: SkillContext | None = None
    """The run's task family, language and architecture: the hard-filter key of skill retrieval."""
    skills: list[SkillView] = field(default_factory=list)
    """The run's frozen skill library (``config.skill_snapshot``), loaded once; never the live library."""
    close: Callable[[], None] | None = None
    """Stops the evaluator's processes (checkers, pre-started workers) when the run ends."""
    device_info: DeviceInfo | None = None
    """The device the run evaluates on, as probed there (or, with ``prompts_only``, as recorded when it was)."""
    prompts_only: bool = False
    """This process writes prompts only: ``evaluate`` and ``compare`` pause until a process with the device drives
    the run (``ksearch.agent.device_pause``); every other process answers those pauses by evaluating."""
    stop_reason: str | None = None
    """Set (to "SIGINT", "SIGTERM", ...) to stop the run at the next node boundary; the node in progress finishes."""

    def shutdown(self) -> None:
        if self.close is not None:
            self.close()

    @property
    def run_id(self) -> str:
        return self.config.run_id

    def eval_request(self, candidate: Candidate, device: str) -> EvalRequest:
        """An evaluation of ``candidate`` for this run on ``device`` (timed unless it is the CPU interpreter)."""
        cfg = self.config
        return EvalRequest(
            candidate=candidate,
            task=cfg.task,
            device=device,
            compile_timeout_s=cfg.compile_timeout_s,
            run_timeout_s=cfg.run_timeout_s,
            timing=device != "cpu",
            target_gpu=cfg.target_gpu if device == "cpu" else None,
        )

    @contextmanager
    def device_lease(self) -> Iterator[str]:
        """A GPU of the pool held for one evaluation, or the configured device when there is no pool."""
        if self.gpu_pool is None:
            yield self.config.device
            return
        with self.gpu_pool.lease() as device:
            yield device

    def evaluate_candidate(self, candidate: Candidate) -> Evaluation:
        """Evaluate ``candidate`` on a leased device, so two kernels are never timed on one GPU at once."""
        with self.device_lease() as device:
            return self.evaluate(self.eval_request(candidate, device))
