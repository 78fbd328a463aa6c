"""Every knob of a run in one typed model: built by the CLI, stored with the run, read by nodes through the context."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ksearch.contracts.identifiers import check_run_id

_DEVICE = re.compile(r"cpu|cuda(:\d+)?")


def device_problem(device: str) -> str | None:
    """Why ``device`` names no device a run or an evaluation can use (None when it names one)."""
    if _DEVICE.fullmatch(device):
        return None
    return f"unknown device {device!r}: use cpu (the Triton interpreter), cuda, cuda:N or auto"


OPTION_FLAGS = {
    "parallel_cycles": "--parallel",
    "run_timeout_s": "--run-timeout",
    "llm_timeout_s": "--llm-timeout",
    "max_total_tokens": "--max-tokens",
    "max_cost_usd": "--max-cost",
    "price_input_per_mtok": "--price-input",
    "price_output_per_mtok": "--price-output",
}
"""Config fields (of ``RunConfig`` and the ``BudgetConfig`` in it) whose flag is not their name in dashes."""


def option_flag(loc: tuple[str | int, ...]) -> str | None:
    """The flag a validation error's location stands for (``max_rounds`` -> ``--max-rounds``); None for an error
    about the options together (a model validator's, whose message names its flags)."""
    if not loc:
        return None
    field = str(loc[-1])
    return OPTION_FLAGS.get(field, "--" + field.replace("_", "-"))


def option_errors(errors: list[dict]) -> list[str]:
    """Pydantic's errors as lines that name the flags the user typed: ``--max-rounds: must be >= 1``."""
    lines = []
    for e in errors:
        message = str(e["msg"]).removeprefix("Value error, ")
        flag = option_flag(tuple(e["loc"]))
        lines.append(f"{flag}: {message}" if flag else message)
    return lines


class BudgetConfig(BaseModel):
    """Hard limits on LLM spend, checked before every call and at every prune."""

    model_config = ConfigDict(extra="forbid")

    max_total_tokens: int | None = Field(default=None, gt=0)
    max_cost_usd: float | None = Field(default=None, gt=0)
    price_input_per_mtok: float | None = Field(default=None, ge=0)
    """USD per million input tokens; needed for cost accounting (prices change, so none are built in)."""
    price_output_per_mtok: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _cost_needs_prices(self) -> BudgetConfig:
        if self.max_cost_usd is not None and (self.price_input_per_mtok is None or self.price_output_per_mtok is None):
            raise ValueError("a money limit (--max-cost) needs --price-input and --price-output (USD per 1M tokens)")
        return self


class Competitor(BaseModel):
    """A best known competing kernel put before the planner (``--compete FILE``), resolved when the run is created:
    a kernel file evaluated on the run's device, or per-shape times as the file gives them."""

    model_config = ConfigDict(extra="forbid")

    name: str
    source: str
    """The file it came from."""
    candidate_id: str | None = None
    """For a kernel file: its candidate, evaluated like any other (its code is shown to the planner)."""
    times_ms: dict[str, float] = Field(default_factory=dict)
    """Per benchmark config (full names), the competitor's figure in ms: the statistic the score uses."""
    where: str = ""
    """How the times were obtained: ``evaluated here: ...`` or what the file says (device, method)."""


class RunConfig(BaseModel):
    """What a run was asked to do. Stored as JSON in the runs table so resume and replay rebuild the same run."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("run_id")
    @classmethod
    def _safe_run_id(cls, value: str) -> str:
        return check_run_id(value)

    run_id: str
    task: str
    task_digest: str | None = None
    """The task's definition when the run was created (``Task.definition_digest``: for an operator file or a
    KernelBench problem, the file's contents). Resume and fork refuse a task that changed since: its new verdicts
    would mix with the run's old ones. None for runs made before it was recorded."""
    language: str = "triton"
    model: str
    """``provider:model``, e.g. ``openai:gpt-5.2``, ``replay:RUN`` / ``replay:path/to/replies.jsonl``, or
    ``interactive`` (a person answers every call: ``ksearch pending`` / ``ksearch respond``)."""
    base_url: str | None = None
    temperature: float | None = None
    device: str = "cpu"
    """``cpu`` runs kernels under the Triton interpreter (correctness only); ``cuda`` runs and times them on a GPU."""
    target_gpu: str | None = None
    """``--target-gpu``, on the CPU only: the GPU (``h100``, ``a100``, ... of ``ksearch.tools.gpu_specs``) the kernels
    are written for. Its limits and peaks are in every prompt and each kernel is compiled for it and checked against
    its limits before it is judged."""
    max_rounds: int = Field(default=20, ge=1)
    """A round is one kernel written and evaluated (K-Search's budget unit)."""
    stagnation_window: int = Field(default=5, ge=1)
    max_attempts_per_cycle: int | None = Field(default=None, ge=1)
    parallel_cycles: int = Field(default=1, ge=1, le=64)
    """How many actions are explored at once (one per free GPU: with N GPUs in ``gpus``, use N)."""
    gpus: str = "all"
    """``--gpus``: the GPUs evaluations lease from (``all``, a count ``2``, or indices ``0,1,3``); ignored on cpu and
    when ``device`` names one GPU (``cuda:N``)."""
    executor: Literal["local", "dask"] = "local"
    """Where evaluations run: ``local`` (this machine's GPUs, one lease per GPU) or ``dask`` (the workers of the
    Dask cluster at ``scheduler``, one task per evaluation asking for one GPU; the agent needs no GPU then)."""
    scheduler: str | None = None
    """``--scheduler``: the Dask scheduler's address (``tcp://host:8786``); needed with ``executor='dask'``. Stored
    with the run, so ``ksearch resume`` reconnects to it (``resume --scheduler`` points the run at a new one)."""
    promotion_rounds: int = Field(default=5, ge=2, le=50)
    """Rounds of the paired, interleaved re-measurement that must confirm a new best on a GPU."""
    max_difficulty: int = Field(default=4, ge=1, le=5)
    explore_every: int = Field(default=4, ge=0, le=100)
    """``--explore-every``: every this-many-th cycle runs the first open action of the least-explored family (a branch
    under the root), whatever its score or difficulty, while another family has had more cycles (0: never)."""
    max_new_nodes: int = Field(default=3, ge=1, le=20)
    max_new_nodes_init: int = Field(default=8, ge=1, le=30)
    max_plan_repairs: int = Field(default=2, ge=0, le=10)
    llm_max_attempts: int = Field(default=5, ge=1)
    llm_timeout_s: float = Field(default=600.0, gt=0)
    compile_timeout_s: float = Field(default=120.0, gt=0)
    run_timeout_s: float = Field(default=300.0, gt=0)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    replay_of: str | None = None
    """Set when this run re-executes another run's recorded replies."""
    seed_from: str | None = None
    """``--seed-from FILE``: a solution to continue from. It is evaluated before planning and attached to the root."""
    seed_candidate_id: str | None = None
    """The seed's candidate id in the store (set by ``start_run`` from ``seed_from``; kept by replays)."""
    compete: list[str] = Field(default_factory=list)
    """``--compete FILE`` (repeatable): best known competing kernels (``.py``) or per-shape times (``.json``, ``.toml``)
    whose gap to the run's best the planner sees per shape."""
    competitors: list[Competitor] = Field(default_factory=list)
    """``compete`` resolved when the run is created (kept by resume, fork and replay)."""
    require_approval: bool = False
    """``--require-approval``: every new best waits for ``ksearch steer RUN approve|reject`` (steering can change
    it)."""
    fork_of: str | None = None
    """Set when this run continues another run's checkpoint (``ksearch fork``)."""
    fork_round: int | None = None
    """The round of ``fork_of`` this run continues from."""
    counters: bool = True
    """``--counters/--no-counters``: on a GPU where Nsight Compute runs, the hardware counters of each cycle's best
    and of the solutions the planner asks about, for the model (``ksearch.tools.counters``; at most ``budget.SHARE``
    of the run's evaluation time). A run on the CPU has none."""
    counter_shapes: int = Field(default=2, ge=1, le=8)
    """``--counter-shapes``: how many benchmark shapes (the longest) the counters profile."""
    skills: bool = True
    """Use the skill library: freeze a snapshot of it at the start, show fitting skills to the planner, and record
    each cycle of an action that applies a skill as evidence on that skill."""
    lift_skills: bool = True
    """Lift a candidate skill from every parent -> child edge that a paired re-measurement shows significantly
    faster (on a GPU; nothing is timed on the CPU). One LLM call (role skill_lifter) per such edge."""
    skills_in_prompt: int = Field(default=5, ge=0, le=20)
    """How many retrieved skills the planner sees per planning step."""
    skill_lift_min_speedup: float = Field(default=1.03, ge=1.0)
    """An edge is lifted only when the lower end of the 95 % interval of its paired speedup reaches this."""
    skill_snapshot: str | None = None
    """The run's frozen skill library (set by ``start_run``; resume and replay use the same one)."""

    @field_validator("device")
    @classmethod
    def _known_device(cls, device: str) -> str:
        problem = device_problem(device)
        if problem:
            raise ValueError(problem)
        return device

    @model_validator(mode="after")
    def _target_on_the_cpu(self) -> RunConfig:
        if self.target_gpu is not None:
            if self.device != "cpu":
                raise ValueError("--target-gpu is for runs on the CPU; on a GPU its own limits apply")
            from ksearch.tools.gpu_specs import gpu_spec

            self.target_gpu = gpu_spec(self.target_gpu).key
        return self

    @model_validator(mode="after")
    def _executor_needs(self) -> RunConfig:
        if self.executor == "dask":
            if not self.scheduler:
                raise ValueError("--executor dask needs --scheduler ADDR (the Dask scheduler, e.g. tcp://host:8786)")
            if self.device.startswith("cuda:"):
                raise ValueError(
                    "with --executor dask the cluster chooses the GPU: use --device cuda, not " + self.device
                )
        elif self.scheduler:
            raise ValueError("--scheduler is for --executor dask; the local executor uses this machine's devices")
        return self
