"""The records the evaluator's processes exchange: the parent's request to a candidate worker, the worker's report,
the outputs it saved for the trusted checker, and the checker's request and verdict.

Kept apart from the processes themselves so each side imports the same definitions without importing the other
(the worker must never import the checker's reference code, and the checker must never import the candidate).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ksearch.contracts.evaluation import Mismatch, Rejection, Timing, Verdict

FLUSH_BYTES = 256 * 1024 * 1024
"""Bytes written to evict the L2 cache before a timed call (larger than any current GPU's L2)."""


class WorkerRequest(BaseModel):
    """What the parent asks of one worker process (written as JSON next to the candidate)."""

    model_config = ConfigDict(extra="forbid")

    task: str
    device: str
    entry_point: str
    candidate_path: str
    result_path: str
    timing: bool = False
    """With mode 'correctness' (the first evaluator's single pass): ignored; timing is its own pass."""
    status_fd: int | None = None
    """Pipe to the parent; the worker writes each phase name on it so the parent applies the right time limit."""
    mode: Literal["correctness", "timing", "compare"] = "correctness"
    salt: int = 0
    """The evaluation's secret salt, combined with each config's public seed (see ``seeds.salted_seed``)."""
    outputs_dir: str = ""
    """Where outputs are saved for the checker; '' saves nothing (for direct use in tests)."""
    timing_method: str = "robust"
    flush_l2: bool = True
    recheck_bytes: int = 1 << 30
    """Bytes of timed outputs kept per config for the checker (beyond it, a random sample of them)."""
    challenger_path: str = ""
    """mode 'compare': the challenger's file (the incumbent is ``candidate_path``)."""
    rounds: int = 5
    time_cap_s: float = 2.0
    min_samples: int = 10
    target_rel_se: float = 0.01
    flush_bytes: int = FLUSH_BYTES
    allow_threads: bool = False
    """Only for the harness's own baselines (torch.compile keeps worker threads): skip the thread rule."""


class ConfigSamples(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: str
    method: str
    samples_ms: list[float]


class CompareSamples(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: str
    incumbent_ms: list[float]
    """One median per round."""
    challenger_ms: list[float]


class OutputRecord(BaseModel):
    """One output the worker saved for the checker (a claim of the untrusted worker: the checker verifies it)."""

    model_config = ConfigDict(extra="forbid")

    config_index: int
    config: str
    prepare_seed: int
    """The seed of the config the candidate's callable was prepared with (the task's weights, if any)."""
    input_seed: int
    """The seed the inputs of this call were generated with: ``prepare_seed + 13 * input set index``."""
    digest: str
    file: str
    stride: list[list[int]] = Field(default_factory=list)
    """Strides of each output tensor as the candidate returned it."""


class WorkerResult(BaseModel):
    """What the worker reports. The parent takes failures and samples from it; correctness comes from the checker."""

    model_config = ConfigDict(extra="forbid")

    verdict: Verdict
    phase: str
    configs_passed: int = 0
    """Configs the candidate ran on without an error or a broken rule (not yet checked against the reference)."""
    configs_total: int = 0
    mismatch: Mismatch | None = None
    rejection: Rejection | None = None
    timings: list[Timing] = Field(default_factory=list)
    error: str = ""
    """The candidate's exception with its traceback, or a one-line reason."""
    environment: dict[str, str] = Field(default_factory=dict)
    records: list[OutputRecord] = Field(default_factory=list)
    samples: list[ConfigSamples] = Field(default_factory=list)
    comparison: list[CompareSamples] = Field(default_factory=list)


class CheckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str
    device: str
    salt: int
    kind: Literal["test", "bench"]
    worker_result_path: str
    outputs_dir: str


class CheckResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    verdict: Verdict
    configs_passed: int = 0
    configs_total: int = 0
    outputs_checked: int = 0
    mismatch: Mismatch | None = None
    rejection: Rejection | None = None
    error: str = ""
    environment: dict[str, str] = Field(default_factory=dict)
