"""An executor that evaluates in the test's own process, for graph, CLI and flow tests that do not test the evaluator.

A real evaluation starts a trusted checker and a sandboxed worker (each imports torch: seconds of CPU on a 2-core
machine) and a run probes its device in a subprocess. ``InProcessExecutor`` gives the same verdicts on the CPU for
the kernels those tests use: the evaluator's static rules first (``static_verdict``), then the candidate imported here
and called on every test config, its output's form checked as the worker does and its values against the task's
reference by the task's own ``check``. It never times or compares and reads no hardware counters (the CPU does none
of these), and it runs only kernels the tests wrote: untrusted code never runs in the agent's process outside tests.
Tests of the evaluator itself (verdicts, hangs, crashes, isolation) keep the real ``LocalExecutor``.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from ksearch.contracts.counters import CounterReport
from ksearch.contracts.evaluation import Comparison, Evaluation, Mismatch, Verdict
from ksearch.tools.evaluator import EvalRequest, static_verdict
from ksearch.tools.evaluator.worker.guard import CandidateFailure, check_output_form, is_compile_error
from ksearch.tools.executors.base import Busy
from ksearch.tools.fingerprint import DeviceInfo, probe_device

_PROBED: dict[str, DeviceInfo] = {}
"""One device probe per device and test process (the answer does not change between tests)."""


class InProcessExecutor:
    """Evaluations in this process, one at a time (parallel cycles share the Triton interpreter)."""

    def __init__(self) -> None:
        self.busy: list[Busy] = []
        self.evaluations: list[EvalRequest] = []
        """Every request it evaluated, in order (a test may check what the run asked for)."""
        self._lock = threading.Lock()

    def device_info(self, device: str) -> DeviceInfo:
        if device not in _PROBED:
            _PROBED[device] = probe_device(device)
        return _PROBED[device]

    def evaluate(self, request: EvalRequest) -> Evaluation:
        from ksearch.tasks.registry import resolve_task

        if request.device != "cpu" or request.timing:
            raise AssertionError("InProcessExecutor evaluates untimed CPU requests only: use the real executor")
        with self._lock:
            started = time.time()
            self.evaluations.append(request)
            task = resolve_task(request.task)
            evaluation = static_verdict(request, task) or _run(request, task)
            self.busy.append(Busy("evaluate", request.device, started, time.time()))
        return evaluation.model_copy(update={"duration_s": round(time.time() - started, 3)})

    def compare(self, incumbent: EvalRequest, challenger: EvalRequest, *, rounds: int = 5) -> Comparison:
        raise AssertionError("InProcessExecutor does not time: a comparison needs the real executor on a GPU")

    def counters(self, request: EvalRequest, shapes: list[str]) -> CounterReport:
        """What the real executor answers on the CPU: no hardware counters (its own code says why)."""
        from ksearch.tools.counters.collect import collect_counters

        if request.device != "cpu":
            raise AssertionError("InProcessExecutor evaluates on the CPU only: use the real executor")
        return collect_counters(request, shapes)

    def close(self) -> None:
        pass


def _run(request: EvalRequest, task: Any) -> Evaluation:
    configs = task.test_configs(request.device)
    passed = 0

    def verdict(kind: Verdict, log: str, mismatch: Mismatch | None = None) -> Evaluation:
        return Evaluation(
            verdict=kind,
            device=request.device,
            configs_passed=passed,
            configs_total=len(configs),
            mismatch=mismatch,
            log=log,
            environment={"executor": "in-process (tests)"},
        )

    with tempfile.TemporaryDirectory(prefix="ksearch-inprocess-") as folder:
        try:
            module = _load(request, task, Path(folder))
        except Exception:  # noqa: BLE001 - the candidate's import failing is its verdict
            configs = []  # as the worker reports: it counts the configs once the candidate is loaded
            return verdict(Verdict.COMPILE_ERROR, f"compile_error: {traceback.format_exc(limit=-3)}")
        for config in configs:
            try:
                fn = task.prepare(module, config, request.device)
                inputs = task.make_inputs(config, request.device)
                expected = task.expected(config, copy.deepcopy(inputs))
                output = fn(*task.call_args(inputs, config))
                check_output_form(task, request.device, config.name, output)
            except CandidateFailure as failure:
                return verdict(failure.verdict, f"{failure.verdict.value}: {failure.error}", failure.mismatch)
            except Exception as exc:  # noqa: BLE001 - anything the candidate raises is its verdict
                kind = Verdict.COMPILE_ERROR if is_compile_error(exc) else Verdict.RUNTIME_ERROR
                return verdict(kind, f"{kind.value}: {traceback.format_exc(limit=-3)}")
            mismatch = task.check(config, output, expected)
            if mismatch is not None:
                return verdict(Verdict.INCORRECT, f"incorrect: {mismatch.message}", mismatch)
            passed += 1
    return verdict(Verdict.PASSED, "")


def _load(request: EvalRequest, task: Any, folder: Path) -> Any:
    """The candidate as a module of its own, with the task's support modules importable beside it."""
    for name, source in task.support_modules().items():
        (folder / f"{name}.py").write_text(source, encoding="utf-8")
    path = folder / "candidate.py"
    path.write_text(request.candidate.code, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"ksearch_test_candidate_{id(path)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(folder))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    entry = request.candidate.entry_point
    if not callable(getattr(module, entry, None)):
        raise AttributeError(f"candidate.py defines no function {entry!r} (the entry point)")
    return module
