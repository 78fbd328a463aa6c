"""A fake executor for graph, CLI and flow tests that do not test the evaluator: no candidate code runs anywhere.

When to use which executor:

- ``FakeExecutor`` (the ``fake_executor`` fixture; ``tests/helpers/fake_cli.py`` for a ``ksearch`` subprocess): the
  test checks the graph, the CLI or a flow (which path a run takes, what is stored, printed, resumed, replayed,
  forked) and only needs each candidate's verdict. The verdict comes from the evaluator's own static rules (run in
  the agent's process by the real executor too), then from the test's table, a marker in the test's own candidate
  code, or the kernels the tests share (``DEMO_KERNELS``, ``SHARED_KERNELS``; ``tests/test_in_process_executor.py``
  holds them to the sandboxed evaluator's verdicts). A candidate it has no verdict for is an error, never a guess.
- ``InProcessExecutor`` (``in_process_executor``): the test needs the verdict of a kernel it wrote and that no table
  holds (a task backend's own kernels); it imports the test's kernel in the test's process.
- The real ``LocalExecutor``: the test checks the evaluator (verdicts, timing, containment, trust, hangs, crashes,
  a kill during an evaluation), or proves that a command drives the real evaluator end to end; each command family
  keeps one: ``run`` (``tests/agent/test_search_run.py::test_full_run_with_scripted_model``,
  ``tests/cli/test_demo.py``), ``eval`` (``tests/cli/test_scripts.py``, ``tests/cli/test_small_items.py``), ``fork``
  (``test_small_items.py::test_a_forks_inherited_rounds_are_marked_as_the_parents``), ``resume`` after a kill
  (``tests/flows/test_interactive_run.py``, ``tests/agent/test_kill_resume.py``, ``tests/faults/``), ``skills``
  (``tests/flows/test_skills_flows.py``), ``mcp`` (``tests/flows/test_mcp.py``).
"""

from __future__ import annotations

import ast
import platform
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import version

from ksearch.contracts.counters import CounterReport
from ksearch.contracts.evaluation import Comparison, Evaluation, Mismatch, Verdict
from ksearch.tasks.base import Task
from ksearch.tools.evaluator import EvalRequest, static_verdict
from ksearch.tools.executors.base import Busy
from ksearch.tools.fingerprint import DeviceInfo, probe_device
from tests.helpers.scripts import ROW_KERNEL, WRONG_KERNEL, demo_replies


@dataclass(frozen=True)
class FakeOutcome:
    """What the fake says of one candidate."""

    verdict: Verdict
    configs_passed: int | None = None
    """Test configs passed before the verdict (None: all of them when it passed, none otherwise)."""


MARKER = re.compile(r"^# fake-verdict: (?P<verdict>\w+)(?: passed=(?P<passed>\d+))?$", re.M)
"""A line a test may put in its own candidate code: ``# fake-verdict: incorrect passed=2``."""


def _demo_kernels() -> dict[str, FakeOutcome]:
    """The scripted demo's kernels (``examples/softmax-demo.jsonl``) by their code: the first is non-finite past
    its first chunk (4 of 8 configs pass), the last does not parse, the others compute the softmax."""
    verdicts = {"write:c1:1": FakeOutcome(Verdict.INCORRECT, 4), "write:c2:2": FakeOutcome(Verdict.COMPILE_ERROR, 0)}
    kernels = {}
    for key, reply in demo_replies().items():
        if key.startswith("write:"):
            code = reply.split("```python\n", 1)[1].split("```", 1)[0]
            kernels[code.strip()] = verdicts.get(key, FakeOutcome(Verdict.PASSED))
    return kernels


DEMO_KERNELS = _demo_kernels()
SHARED_KERNELS: dict[str, FakeOutcome] = {
    "e / (tl.sum(e, axis=0) + 1.0)": FakeOutcome(Verdict.INCORRECT, 0),  # WRONG_KERNEL's bug
    "e / tl.sum(e, axis=0)": FakeOutcome(Verdict.PASSED),  # ROW_KERNEL's softmax
}
"""``tests/helpers/scripts``' row kernel and its wrong twin, by a line of their code (the wrong one first: it
contains the right one's line with a change)."""
assert all(line in kernel for line, kernel in zip(SHARED_KERNELS, (WRONG_KERNEL, ROW_KERNEL), strict=True))


def outcome_of(code: str, table: Mapping[str, FakeOutcome | Verdict]) -> FakeOutcome:
    """The fake's answer for ``code``: the test's table (the first key found in the code), a ``# fake-verdict:``
    line, the demo's and the shared kernels, a module that does not parse (a compile error, as the worker reports);
    else an error: the fake never guesses."""
    for key, outcome in table.items():
        if key.strip() in code:
            return outcome if isinstance(outcome, FakeOutcome) else FakeOutcome(outcome)
    marked = MARKER.search(code)
    if marked:
        passed = marked.group("passed")
        return FakeOutcome(Verdict(marked.group("verdict")), int(passed) if passed else None)
    if code.strip() in DEMO_KERNELS:
        return DEMO_KERNELS[code.strip()]
    for line, outcome in SHARED_KERNELS.items():
        if line in code:
            return outcome
    try:
        ast.parse(code)
    except SyntaxError:
        return FakeOutcome(Verdict.COMPILE_ERROR, 0)
    raise AssertionError(
        "FakeExecutor has no verdict for this candidate: give the fixture a table entry, put a '# fake-verdict:' "
        f"line in the test's kernel, or use the real executor. Its code begins:\n{code[:400]}"
    )


def cpu_device_info() -> DeviceInfo:
    """What ``probe_device('cpu')`` answers, without starting a process (``tests/test_in_process_executor.py`` holds
    the two equal): the evaluation cache key is the real executor's, so a run's cached evaluations serve either."""
    return DeviceInfo(device="cpu", python=platform.python_version(), torch=version("torch"), triton=version("triton"))


@dataclass
class FakeExecutor:
    """An ``Executor`` whose verdicts come from ``outcome_of``, in the evaluator's shapes (the task's test configs
    counted, the first failing config named); nothing run, nothing timed."""

    table: dict[str, FakeOutcome | Verdict] = field(default_factory=dict)
    """Verdicts by a line (or the whole) of the candidate's code, looked up before the markers and the shared
    kernels."""
    devices: dict[str, DeviceInfo] = field(default_factory=dict)
    """The device each name stands for; by default the CPU's own and, for a GPU, ``probe_device``'s answer."""
    evaluations: list[EvalRequest] = field(default_factory=list)
    """Every request evaluated, in order (a test may check what the run asked for)."""
    busy: list[Busy] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def device_info(self, device: str) -> DeviceInfo:
        if device not in self.devices:
            self.devices[device] = cpu_device_info() if device == "cpu" else probe_device(device)
        return self.devices[device]

    def evaluate(self, request: EvalRequest) -> Evaluation:
        from ksearch.tasks.registry import resolve_task

        if request.timing:
            raise AssertionError("FakeExecutor evaluates untimed requests only: a timed one needs the real executor")
        started = time.time()
        task = resolve_task(request.task)
        evaluation = static_verdict(request, task) or self._judged(request, task)
        with self._lock:
            self.evaluations.append(request)
            self.busy.append(Busy("evaluate", request.device, started, time.time()))
        return evaluation

    def _judged(self, request: EvalRequest, task: Task) -> Evaluation:
        outcome = outcome_of(request.candidate.code, self.table)
        configs = task.test_configs(request.device)
        total = 0 if outcome.verdict == Verdict.COMPILE_ERROR else len(configs)  # the worker counts once loaded
        passed = (
            total if outcome.configs_passed is None and outcome.verdict == Verdict.PASSED else outcome.configs_passed
        )
        passed = min(passed or 0, total)
        mismatch = None
        if outcome.verdict == Verdict.INCORRECT:
            failing = configs[passed].name
            mismatch = Mismatch(config=failing, message=f"{failing}: output differs from the reference (fake)")
        log = (
            ""
            if outcome.verdict == Verdict.PASSED
            else f"{outcome.verdict.value}: (fake) " + (mismatch.message if mismatch else "the test's table says so")
        )
        return Evaluation(
            verdict=outcome.verdict,
            device=request.device,
            configs_passed=passed,
            configs_total=total,
            mismatch=mismatch,
            log=log,
            environment={"executor": "fake (tests)"},
        )

    def compare(self, incumbent: EvalRequest, challenger: EvalRequest, *, rounds: int = 5) -> Comparison:
        raise AssertionError("FakeExecutor does not compare: a promotion's re-measurement needs the real executor")

    def counters(self, request: EvalRequest, shapes: list[str]) -> CounterReport:
        raise AssertionError("FakeExecutor reads no hardware counters: use the real executor")

    def close(self) -> None:
        pass


def install(executor: FakeExecutor, setattr_: Callable[[object, str, object], None]) -> None:
    """Make every run, resume and skills flow of this process evaluate with ``executor`` (``setattr_``: pytest's
    ``monkeypatch.setattr`` in a test, plain ``setattr`` in ``tests/helpers/fake_cli.py``'s process)."""
    from ksearch.flows import services
    from ksearch.flows import skills as skills_flow

    setattr_(services, "open_executor", lambda config: executor)
    setattr_(skills_flow, "LocalExecutor", lambda: executor)
