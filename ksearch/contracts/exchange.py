"""The records the evaluator's processes exchange.

Three processes take part in an evaluation: the parent (the agent, or ``ksearch eval``), one fresh worker that runs
the untrusted candidate, and a long-lived trusted checker that computes the reference and judges outputs. The
parent relays every message between the worker and the checker, so each process only reads lines it expects:

- parent -> worker: ``WorkerRequest`` (one line on the worker's stdin once the candidate file is in place);
- worker -> parent: phase names on a status pipe; ``Handoff`` lines (an output is ready in the shared staging
  buffer) on its message pipe; at the end a ``WorkerResult`` file;
- parent -> checker: ``CheckerCommand`` lines (begin an evaluation, a relayed ``Handoff`` or settle, finish, shut
  down);
- checker -> parent: ``HandoffReply`` (relayed to the worker) and ``CheckResult`` lines on its stdout.

Kept apart from the processes so each side imports the same definitions without importing the other: the worker
never imports the checker's reference code and the checker never imports the candidate.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ksearch.contracts.evaluation import (
    KernelResources,
    Mismatch,
    Rejection,
    ShapeProfile,
    Timing,
    TunedChoice,
    Verdict,
    YardstickReading,
)
from ksearch.contracts.work import WorkTrace

FLUSH_BYTES = 256 * 1024 * 1024
"""Bytes written to evict the L2 cache before a timed call (larger than any current GPU's L2)."""


class StagingHandle(BaseModel):
    """Where the worker copies an output for the checker: GPU memory owned by the checker (CUDA IPC), or a shared
    host-memory file when the device is the CPU or CUDA IPC is unavailable."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["cuda_ipc", "shm"]
    nbytes: int
    generation: int = 0
    """Bumped every time the checker replaces the buffer with a larger one."""
    ipc: str = ""
    """cuda_ipc: the driver's IPC handle of the allocation and the buffer's offset in it (``shared.cuda_ipc``)."""
    shm_name: str = ""
    """shm: the name of the ``multiprocessing.shared_memory`` block (a checker without a staging folder)."""
    shm_path: str = ""
    """shm: the file in the session's staging folder (``/dev/shm/ksearch-staging-*``), which is all of the machine's
    ``/dev/shm`` a candidate's private one holds."""


class WorkerRequest(BaseModel):
    """What the parent asks of one worker process."""

    model_config = ConfigDict(extra="forbid")

    task: str
    device: str
    entry_point: str
    candidate_path: str
    result_path: str
    mode: Literal["evaluate", "compare", "scout", "resources", "profile", "counters", "staging"] = "evaluate"
    """evaluate: correctness on every test config, then (when ``timing``) timing with ``timing_method``; compare: two
    candidates timed interleaved (``challenger_path``); scout: the candidate's Triton kernels compiled ahead of the
    evaluate worker into ``triton_cache_dir`` (public seeds, no staging, nothing judged); resources: on the CPU, the
    candidate's kernels compiled for ``target_gpu`` and their figures reported (``ksearch.tools.evaluator.worker.aot``);
    profile: a process beside the worker that waits for the parent's go (sent once the worker has exited), then
    profiles one call per benchmark config (``ksearch.tools.evaluator.parent.profile_process``); counters: under Nsight
    Compute, one call per config of ``counter_configs`` inside an NVTX range each (``ksearch.tools.counters``); staging:
    open ``staging`` and check the checker's bytes there, nothing else (no candidate is loaded: the parent's trusted
    confirmation that a worker's "cannot open the checker's buffer" is the machine's, not the candidate's)."""
    timing: bool = False
    timing_method: str = "robust"
    salt: int = 0
    """The session's secret salt for correctness configs, combined with each config's public seed
    (``seeds.salted_seed``)."""
    bench_salt: int = 0
    """The evaluation's own secret salt for timed inputs."""
    staging: StagingHandle | None = None
    """Where outputs go for the checker; None checks nothing (direct use in tests, compare mode)."""
    flush_l2: bool = True
    challenger_path: str = ""
    rounds: int = 5
    time_cap_s: float = 2.0
    min_samples: int = 10
    target_rel_se: float = 0.01
    flush_bytes: int = FLUSH_BYTES
    allow_threads: bool = False
    """Only for the harness's own baselines (torch.compile keeps worker threads): skip the thread rule."""
    observe_work: bool = True
    """Trace and ghost-replay the candidate as its task's ``WorkPolicy`` says (off for the harness's baselines)."""
    triton_cache_dir: str = ""
    """Triton's cache for the candidate (and, in a subfolder, Inductor's): shared by one evaluation's worker, its
    compile scout and its profiling process, by nobody else (empty: the worker's private caches)."""
    support_dir: str = ""
    """A folder put first on the candidate's import path, holding the modules its task provides (e.g. GPU MODE's
    ``task`` module with ``input_t``/``output_t``)."""
    yardstick_rounds: int = 0
    """After timing, per benchmark config, this many rounds of a bare GPU MODE loop against the timing method in this
    process (a diagnostic: ``ksearch eval --yardstick``)."""
    target_gpu: str = ""
    """resources mode: the GPU (``ksearch.tools.gpu_specs`` key) the kernels are compiled for."""
    profile: bool = False
    """After timing, profile one call per benchmark config in this process
    (``ksearch.tools.evaluator.profiler.kernel_profile``; where a profiling process does it instead, this is off)."""
    cache_autotuning: bool = False
    """Triton's autotuner keeps each key's timings in ``triton_cache_dir`` (``knobs.autotuning.cache``), so that the
    evaluation's profiling process, which shares that cache, launches the configs the worker chose without tuning
    again. Set for the worker and the profiling process only, never for the compile scout (whose autotuner times
    nothing and would leave made-up timings there)."""
    quick_test_tuning: bool = True
    """On the correctness configs, Triton's autotuner times each config briefly and forgets its choices before timing
    (``ksearch.tools.evaluator.worker.tuning``); the timed configs are tuned by Triton's own benchmark."""
    audit_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    """The chance each later repeat of a timing loop is re-randomised and audited (``KSEARCH_AUDIT_RATE``); None: the
    methods' own (``ksearch.tools.timing.primitives.AUDIT_RATE``)."""
    winnowed_tuning: bool = True
    """On the timed configs, Triton's autotuner gives its full benchmark only to the configs within a margin of the
    fastest on a short one (``ksearch.tools.evaluator.worker.tuning.winnowed_tuning``); off, it fully benchmarks every
    one."""
    counter_configs: list[str] = Field(default_factory=list)
    """counters mode: the benchmark configs to call once each, in this order (NVTX range ``ksearch_counters_<i>``)."""
    low_memory: bool = False
    """The GPU has little free memory: drop each correctness call's inputs and give the allocator's free blocks back
    before handing its output off (the checker judges while this worker waits)."""


PROFILE_GO = "go"
"""The ``op`` of the line that starts a profiling process's calls (``WorkerRequest.mode`` ``profile``); anything else,
or the end of its input, ends it without a call."""


class Handoff(BaseModel):
    """The worker's claim that an output of the candidate is in the staging buffer (the checker verifies it)."""

    model_config = ConfigDict(extra="forbid")

    op: Literal["handoff"] = "handoff"
    kind: Literal["test", "bench", "audit", "ghost"]
    """test: a correctness config; bench: a timed call's output; audit: a call on freshly re-randomised inputs after
    a timing loop (catches outputs replayed from an earlier call); ghost: the first correctness config again with
    every custom launch a no-op (``work_observed``), whose output must not match."""
    config_index: int
    config: str
    prepare_seed: int
    """The seed of the config the candidate's callable was prepared with (the task's weights, if any)."""
    input_seed: int
    """The seed the inputs of this call were generated with: ``prepare_seed + 13 * input set index``."""
    activation_seed: int | None = None
    """audit: the task's activation inputs were re-generated in place with this seed (the others from input_seed)."""
    digest: str
    """Digest of the inputs the candidate was given (``seeds.input_digest``)."""
    shapes: list[list[int]]
    dtypes: list[str]
    strides: list[list[int]] = Field(default_factory=list)
    """Strides of each output tensor as the candidate returned it (the staged copy is contiguous)."""
    offsets: list[int] = Field(default_factory=list)
    """Byte offset of each output tensor in the staging buffer."""
    generation: int = 0
    work: WorkTrace | None = None
    """test and ghost, where the task has a ``WorkPolicy``: what the call ran (the worker's record, judged by the
    checker). A ghost record that ``raised`` comes with no output."""
    window: int | None = None
    """In timing: how many timed windows of this config's method run the harness had closed when it handed this
    output off (the audited window's number). The parent holds it to the windows it saw: windows a candidate added by
    writing on the channel shift every later number, and a handoff goes through the checker, which a candidate
    cannot forge."""


class StagedInput(BaseModel):
    """One input of a set the checker made and left in the staging buffer for the worker (issue 59: audit inputs are
    made where the candidate cannot see them first): a tensor's bytes, contiguous at ``offset``, or a plain value."""

    model_config = ConfigDict(extra="forbid")

    position: int
    offset: int | None = None
    """A tensor: the byte offset of its contiguous values in the staging buffer (None: a plain value)."""
    shape: list[int] = Field(default_factory=list)
    dtype: str = ""
    value: int | float | str | None = None
    """A plain input (an int, a float, a string or None), as ``make_inputs`` returned it."""


class HandoffReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    op: Literal["reply"] = "reply"
    ok: bool
    message: str = ""
    staging: StagingHandle | None = None
    """Set when the checker grew the staging buffer: the worker opens it and sends the handoff again."""
    low_memory: bool = False
    """begin: the checker runs this evaluation in low-memory mode."""
    seed: int | None = None
    """seed: the seed the checker drew."""
    preparing: bool = False
    """seed (activation): the checker is computing this audit's reference now, from the seeds alone; the worker asks
    for the verdicts so far (``settle``, answered once that is done) before the audited call, so that none of it runs
    on the device while the candidate does."""
    inputs: list[StagedInput] | None = None
    """seed: the inputs the seed makes, made by the checker and left in the staging buffer (``input``: the whole set;
    ``activation``: the activations): the worker copies them in instead of running the task's generator, where the
    candidate could see them before the audited call. None: the set cannot be handed over (an input that is neither
    a contiguous tensor nor a plain value); the worker makes it."""
    digest: str | None = None
    """seed, with ``inputs``: the digest of the call's whole input set once they are in place."""


class ConfigSamples(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: str
    method: str
    samples_ms: list[float]
    windows_left_out: int = 0
    """Windows of the config's loop whose samples are not in ``samples_ms`` (the parent's ``scored_samples``)."""


class CompareSamples(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: str
    incumbent_ms: list[float]
    """One median per round."""
    challenger_ms: list[float]


class WorkerResult(BaseModel):
    """What the worker reports. The parent takes failures and samples from it; correctness comes from the checker."""

    model_config = ConfigDict(extra="forbid")

    verdict: Verdict
    phase: str
    configs_passed: int = 0
    """Configs the candidate ran on without an error or a broken rule (not yet judged against the reference)."""
    configs_total: int = 0
    mismatch: Mismatch | None = None
    rejection: Rejection | None = None
    timings: list[Timing] = Field(default_factory=list)
    error: str = ""
    """The candidate's exception with its traceback, or a one-line reason."""
    environment: dict[str, str] = Field(default_factory=dict)
    samples: list[ConfigSamples] = Field(default_factory=list)
    """The worker's own copy of its samples: diagnostics only. The score is computed from the samples the parent
    received window by window while they were taken (``ksearch.tools.evaluator.parent.ledger``)."""
    comparison: list[CompareSamples] = Field(default_factory=list)
    stage_seconds: dict[str, float] = Field(default_factory=dict)
    """Wall time of the worker's own stages (load, correctness, timing)."""
    yardstick: list[YardstickReading] = Field(default_factory=list)
    resources: list[KernelResources] = Field(default_factory=list)
    """The figures of the candidate's compiled kernels: diagnostics, and on the CPU with a target GPU the figures
    the parent holds against its limits (``ksearch.tools.evaluator.worker.aot``)."""
    profile: list[ShapeProfile] = Field(default_factory=list)
    """One profiled call per benchmark config, after timing: diagnostics only."""
    tuning: list[TunedChoice] = Field(default_factory=list)
    """Per timed config, the config each autotuned kernel kept there: diagnostics only."""
    notes: list[str] = Field(default_factory=list)
    """Diagnostics for the evaluation's log (a kernel that failed to compile for the target GPU, say)."""


class CheckerCommand(BaseModel):
    """One line from the parent to the checker."""

    model_config = ConfigDict(extra="forbid")

    op: Literal["begin", "handoff", "settle", "finish", "staging", "seed", "shutdown"]
    """settle: the verdict on every output handed off so far (correctness outputs are judged after their answer);
    seed: a fresh seed for a timed call's inputs, drawn by the checker at the moment the worker needs it."""
    evaluation: str = ""
    task: str = ""
    device: str = ""
    salt: int = 0
    bench_salt: int = 0
    timed: bool = False
    """finish: whether the evaluation timed the candidate (then every benchmark config needs a checked output)."""
    correctness: bool = True
    """finish: whether the evaluation ran the correctness configs (then each needs a checked output; a paired
    comparison runs none: it times two candidates that passed them, and its timed outputs are checked)."""
    handoff: Handoff | None = None
    min_bytes: int = 0
    """staging: the buffer must hold at least this many bytes."""
    shm: bool = False
    """staging: use shared host memory from now on (the worker could not open a CUDA IPC buffer)."""
    renew: bool = False
    """staging: new random bytes at the buffer's start, where a worker checks them (an earlier one may have written
    over them)."""
    low_memory: bool = False
    """begin: low-memory mode whatever the free memory (the checker also enters it by itself when little is free)."""
    observe_work: bool = True
    """begin: judge the traces and the ghost replay the task's ``WorkPolicy`` asks for (off for the harness's
    baselines, which are PyTorch by definition)."""
    sampled_audits: bool = True
    """begin: judge an audit's output (a timed call on re-randomised activations) at positions the checker draws, where
    the task computes its reference there for less (``Task.expected_sample``); False: the whole output, always."""
    config_index: int = 0
    """seed: the benchmark config the seed is for."""
    kind: Literal["input", "activation"] = "input"
    """seed: a whole fresh input set, or new values for the activation inputs of a set (re-randomised in place)."""
    input_seed: int | None = None
    """seed (activation): the seed of the input set whose activations the new values replace."""
    prepared_audits: bool = True
    """begin: compute an audit's reference when its activation seed is issued (``Checker.prepare_audit``), while the
    worker makes the same inputs, instead of after the audited call; False: after, as before."""


class SeedRequest(BaseModel):
    """worker -> parent -> checker: a seed for a timed call's fresh inputs, drawn when they are about to be made, so
    nothing in the worker's process could know it in advance (it is not derived from the request's salt)."""

    model_config = ConfigDict(extra="forbid")

    op: Literal["seed"] = "seed"
    config_index: int
    kind: Literal["input", "activation"]
    input_seed: int | None = None
    """activation: the seed of the input set to be re-randomised (the checker may prepare the audit's reference)."""


class CheckResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    op: Literal["result"] = "result"
    verdict: Verdict
    configs_passed: int = 0
    configs_total: int = 0
    outputs_checked: int = 0
    failed_check: bool = False
    """The verdict comes from an output the checker judged wrong (not from an output it never received)."""
    mismatch: Mismatch | None = None
    rejection: Rejection | None = None
    error: str = ""
    harness_error: str = ""
    """The checker could not judge an output (its device memory ran out): not the candidate's fault; the evaluator
    retries the evaluation and stops with ``HarnessError`` if it fails again."""
    environment: dict[str, str] = Field(default_factory=dict)
    bench_input_bytes: dict[int, int] = Field(default_factory=dict)
    """Per benchmark config index: the bytes of its inputs as the checker regenerated them."""
    bench_generation_ms: dict[int, float] = Field(default_factory=dict)
    """Per benchmark config index: the median time the checker took to make its inputs (the same ``make_inputs`` the
    worker runs between timed calls; the parent's allowance for that work)."""
    bench_digest_ms: dict[int, float] = Field(default_factory=dict)
    """Per benchmark config index: the median time the checker took to digest its inputs (the worker digests the
    same inputs when it audits a call or re-randomises a set)."""
