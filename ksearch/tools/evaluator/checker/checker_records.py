"""What the trusted checker keeps and raises: its record of one evaluation, the failure that ends a judgment, the
output-layout check, and the environment it reports."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import Any

from ksearch.contracts.evaluation import Mismatch, Rejection, Verdict
from ksearch.contracts.exchange import Handoff


class CheckFailed(Exception):
    """Ends the judgment of one output with a verdict (or, ``harness``, with no verdict about the candidate)."""

    def __init__(
        self, verdict: Verdict, error: str, *, mismatch: Mismatch | None = None, rule: str = "", harness: bool = False
    ) -> None:
        super().__init__(error)
        self.verdict, self.error, self.mismatch = verdict, error, mismatch
        self.rejection = Rejection(rule=rule, evidence=error) if rule else None
        self.harness = harness
        """The checker could not judge (its device memory ran out): no verdict about the candidate."""


TEST_KINDS = ("test", "ghost")
"""Handoffs of a correctness config's inputs (the session's salt, input set 0): a test and the ghost replay."""


@dataclass(frozen=True)
class InputClaim:
    """The seeds an output's inputs were made from: a handoff's, or those of an audit the checker prepares when it
    issues the audit's activation seed (``Checker.prepare_audit``), before the audited call."""

    kind: str
    config_index: int
    prepare_seed: int
    input_seed: int
    activation_seed: int | None = None

    @classmethod
    def of(cls, h: Handoff) -> InputClaim:
        return cls(h.kind, h.config_index, h.prepare_seed, h.input_seed, h.activation_seed)


def significant_strides(shape: tuple[int, ...], strides: list[int]) -> list[tuple[int, int]]:
    return [(i, s) for i, (n, s) in enumerate(zip(shape, strides, strict=True)) if n > 1]


@dataclass
class EvaluationRecord:
    """What the checker has seen of one evaluation."""

    task: Any
    salt: int
    bench_salt: int
    tests_passed: set[int] = field(default_factory=set)
    bench_checked: dict[int, int] = field(default_factory=dict)
    bench_input_bytes: dict[int, int] = field(default_factory=dict)
    """Per benchmark config, the size of its inputs as regenerated here (the parent's clone allowance)."""
    bench_generation_ms: dict[int, float] = field(default_factory=dict)
    """Per benchmark config, the median time ``make_inputs`` took here (the parent's allowance for the worker's)."""
    bench_digest_ms: dict[int, float] = field(default_factory=dict)
    """Per benchmark config, the median time the input digest took here."""
    issued: set[tuple[int, int]] = field(default_factory=set)
    """(benchmark config, seed) of every fresh seed issued (``issue_seed``): the only fresh seeds it judges."""
    whole_audits: set[int] = field(default_factory=set)
    """Benchmark configs with an audit checked on the whole output (the first of each always is: ``Checker``)."""
    outputs_checked: int = 0
    audits: int = 0
    """Audits (timed calls on re-randomised activations) judged; ``audits_prepared`` of them on an expectation
    prepared when their seed was issued (``Checker.prepare_audit``)."""
    audits_prepared: int = 0
    failure: CheckFailed | None = None
    work_policy: Any = None
    """The task's ``WorkPolicy`` for this evaluation (None: nothing observed, e.g. the harness's own baselines)."""
    ghost_judged: bool = False
    memory_given_back: bool = False
    """The allocator's free blocks were given back once every correctness output was judged (``Checker.settle``)."""


def check_layout(
    task: Any, config: Any, name: str, outputs: list[Any], expecteds: list[Any], expected: Any, h: Handoff
) -> None:
    """An output whose strides differ from the task's where they matter (dimensions longer than one) is incorrect."""
    wanted = task.output_strides(config, expected)
    if wanted is None or len(outputs) != len(expecteds) or len(h.strides) != len(outputs):
        return
    wanted_list = wanted if isinstance(wanted, list) else [wanted]
    for position, (tensor, have, want) in enumerate(zip(outputs, h.strides, wanted_list, strict=False)):
        shape = tuple(tensor.shape)
        if len(have) == len(shape) == len(want) and (
            significant_strides(shape, have) != significant_strides(shape, list(want))
        ):
            message = (
                f"{name}: output {position} has strides {tuple(have)}, expected {tuple(want)} "
                "(return a contiguous tensor)"
            )
            raise CheckFailed(Verdict.INCORRECT, message, mismatch=Mismatch(config=name, message=message))


def checker_environment(device: str, *, peak: bool = False) -> dict[str, str]:
    """Versions and device; with ``peak``, the most device memory the checker held since the evaluation began."""
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "device_name": "cpu"}
    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index or 0
        major, minor = torch.cuda.get_device_capability(index)
        env.update(
            device_name=torch.cuda.get_device_name(index),
            compute_capability=f"{major}.{minor}",
            cuda=str(torch.version.cuda),
            gpu_uuid=_gpu_uuid(index),
        )
        if peak:
            env["checker_peak_gpu_mib"] = str(torch.cuda.max_memory_reserved(index) >> 20)
    return env


def _gpu_uuid(index: int) -> str:
    """The GPU's UUID as the driver names it (``GPU-...``, as ``nvidia-smi`` shows it): one GPU has one name whatever
    ``CUDA_VISIBLE_DEVICES`` numbers it in each process; empty where torch does not say (a record, never worth a
    failed evaluation)."""
    import torch

    try:
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        return f"GPU-{uuid}" if uuid is not None else ""
    except Exception:  # noqa: BLE001 - see above
        return ""


@dataclass
class PreparedAudit:
    """An audit's expectation computed before its handoff: used only by a handoff of the same evaluation that claims
    the same seeds (any other is judged from scratch, as before)."""

    record: EvaluationRecord
    claim: InputClaim
    digest: str
    expected: Any
    sample: Any
    whole: bool
    """The whole reference (only where the audit must be whole: a config's first, or sampling off; never drawn while
    preparing): recorded as the config's whole audit when the handoff uses it."""
