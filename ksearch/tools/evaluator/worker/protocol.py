"""What the timing runner, the worker's other modes and the modules that hold ``main.Worker``'s methods
(``correctness``, ``handoffs``) use of the worker, as a protocol, so that they need not import the module that
imports them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from ksearch.contracts.evaluation import Mismatch, Rejection, ShapeProfile, Verdict, YardstickReading
    from ksearch.contracts.exchange import CompareSamples, HandoffReply, WorkerRequest, WorkerResult
    from ksearch.contracts.work import WorkTrace
    from ksearch.tasks.base import Task, TaskConfig, WorkPolicy
    from ksearch.tools.evaluator.shared.staging import StagingWriter
    from ksearch.tools.evaluator.worker.channel import Channel
    from ksearch.tools.evaluator.worker.guard import Guard

_T = TypeVar("_T")


class WorkerProtocol(Protocol):
    request: WorkerRequest
    channel: Channel
    task: Task
    device: str
    phase: str
    configs_passed: int
    configs_total: int
    yardstick_readings: list[YardstickReading]
    comparison: list[CompareSamples]
    guard: Guard | None
    staging: StagingWriter | None
    spin_cycles_per_ms: float | None
    device_bytes: int | None
    profiles: list[ShapeProfile]
    notes: list[str]
    stages: dict[str, float]
    work_policy: WorkPolicy | None

    def prepare_device(self) -> None: ...
    def install_support_modules(self) -> None: ...
    def load_candidate(self, path_text: str = "", module_name: str = ...) -> Any: ...
    def prepare(self, module: Any, config: TaskConfig) -> Callable[..., Any]: ...
    def salted(self, config: TaskConfig, salt: int | None = None) -> TaskConfig: ...
    def check_config(self, fn: Callable[..., Any], config: TaskConfig, index: int = 0) -> None: ...
    def check_inputs_unchanged(
        self, config: TaskConfig, inputs: list[Any], snapshot: list[Any], buffers: list[Any] = ...
    ) -> None: ...
    def poison_free_memory(self, inputs: list[Any]) -> None: ...
    def stage(self, config: TaskConfig, output: Any) -> list[int] | None: ...
    def check_staged(self, config: TaskConfig, output: Any, offsets: list[int] | None) -> None: ...
    def handoff(
        self,
        kind: str,
        index: int,
        prepared: TaskConfig,
        input_seed: int,
        activation_seed: int | None,
        digest: str,
        output: Any,
        offsets: list[int] | None,
        *,
        window: int | None = None,
        work: WorkTrace | None = None,
    ) -> None: ...
    def settle(self, *, spin: bool = False, meanwhile: Callable[[], _T] | None = None) -> _T | None: ...
    def ask(self, fields: dict[str, object], *, spin: bool = False) -> HandoffReply: ...
    def _quiet_device(self) -> None: ...
    def receive_inputs(self, reply: HandoffReply) -> list[tuple[int, Any]]: ...
    @staticmethod
    def _answered(reply: HandoffReply) -> None: ...
    def verify(self, where: str) -> None: ...
    def synchronize(self) -> None: ...
    def enter(self, phase: str) -> None: ...
    def mark(self, stage: str) -> None: ...
    def result(
        self, verdict: Verdict, *, error: str = "", mismatch: Mismatch | None = None, rejection: Rejection | None = None
    ) -> WorkerResult: ...
