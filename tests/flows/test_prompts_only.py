"""A GPU run answered on a machine without its GPU (`resume --prompts-only`): planning and writing go on there, every
kernel waits for the GPU as a pause, and the machine with the GPU evaluates each one exactly once; the run takes
the same path as when one process does everything.

The "GPU machine" here is an executor that reports an H100 and evaluates on the CPU interpreter (this machine has
no GPU); what is tested is the split of the work, which never looks at the figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksearch.agent.config import RunConfig
from ksearch.errors import UserError
from ksearch.flows import interactive
from ksearch.flows import run as runner
from ksearch.tools.evaluator.parent.request import EvalRequest
from ksearch.tools.fingerprint import DeviceInfo
from tests.helpers.in_process_executor import InProcessExecutor
from tests.helpers.scripts import DEMO, demo_replies, fenced, init_plan, row_kernel

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
H100 = DeviceInfo(
    device="cuda:0",
    python="3.11",
    torch="2.13.0",
    triton="3.6.0",
    gpu="NVIDIA H100 80GB HBM3",
    sms="132",
    memory_gb="79.2",
    capability="9.0",
    cuda="12.8",
    l2_mb="50.0",
)


class StandInGpu:
    """The executor of the machine with the GPU: says it is an H100, evaluates on the CPU interpreter (in this
    process: what is tested is where and how often a kernel is evaluated, not the evaluator)."""

    def __init__(self) -> None:
        self.inner = InProcessExecutor()
        self.busy = self.inner.busy
        self.evaluated: list[str] = []

    def device_info(self, device: str) -> DeviceInfo:
        return H100

    def evaluate(self, request: EvalRequest):  # noqa: ANN201 - the evaluator's Evaluation
        self.evaluated.append(request.candidate.id)
        return self.inner.evaluate(request.model_copy(update={"device": "cpu", "timing": False, "timing_method": None}))

    def compare(self, incumbent: EvalRequest, challenger: EvalRequest, *, rounds: int = 5):  # noqa: ANN201
        raise AssertionError("untimed candidates are never compared")

    def counters(self, request: EvalRequest, shapes: list[str]):  # noqa: ANN201
        raise AssertionError("untimed candidates get no hardware counters")

    def close(self) -> None:
        self.inner.close()


def config(run_id: str, model: str, **overrides) -> RunConfig:
    settings = {"max_rounds": 6, "stagnation_window": 2, **overrides}
    return RunConfig(run_id=run_id, task="softmax", model=model, device="cuda:0", **settings)


def attempts(ws: Path, run_id: str) -> list[tuple]:
    store = runner.open_store(ws)
    try:
        return [(a["cycle_id"], a["attempt"], a["verdict"], a["candidate_id"]) for a in store.list_attempts(run_id)]
    finally:
        store.close()


def verdicts(ws: Path) -> list[str]:
    store = runner.open_store(ws)
    try:
        return [row["verdict"] for row in store.db["evaluations"].rows]
    finally:
        store.close()


def test_a_gpu_run_is_written_without_its_gpu_and_each_kernel_evaluated_once_where_the_gpu_is(tmp_path):
    ws, replies, gpu = tmp_path / "ws", demo_replies(), StandInGpu()
    try:
        first = runner.start_run(config("split", "interactive"), workspace=ws, executor=gpu)  # on the GPU machine
        assert [w.prompt.key for w in first.pending] == ["plan:0:0"]
        device_pauses, coder_prompts, steps = [], [], 0
        while interactive.pending("split", workspace=ws).status != "finished":
            steps += 1
            assert steps < 40
            view = interactive.pending("split", workspace=ws)
            questions = [w for w in view.prompts if not w.answered and w.prompt.kind == "llm"]
            if questions:  # the person's machine: answer, and drive on up to the next evaluation
                before = len(verdicts(ws))
                for w in questions:
                    coder_prompts += [w.prompt.prompt] if w.prompt.role == "coder" else []
                    reply = replies[w.prompt.key]
                    if steps == 1:  # the first through respond itself
                        interactive.respond("split", reply, workspace=ws, prompts_only=True)
                        continue
                    interactive.respond("split", reply, key=w.prompt.key, workspace=ws, drive=False)
                    runner.resume_run("split", workspace=ws, prompts_only=True)
                # nothing ran there: only the static checks' verdicts (no code runs for them) can be recorded there
                assert set(verdicts(ws)[before:]) <= {"compile_error", "rejected"}
                continue
            waiting = [w for w in view.prompts if w.prompt.kind == "device"]
            assert waiting and all(w.prompt.key.startswith("device:evaluate:") for w in waiting)
            device_pauses += [w.prompt.key for w in waiting]
            with pytest.raises(UserError, match="waits for its device, not for a reply"):
                interactive.respond("split", "a reply", workspace=ws)
            count = len(gpu.evaluated)
            runner.resume_run("split", workspace=ws, executor=gpu)  # the GPU machine evaluates and drives on
            assert len(gpu.evaluated) > count
    finally:
        gpu.close()

    assert device_pauses and coder_prompts
    assert all("H100" in prompt for prompt in coder_prompts)  # the recorded device, written where there is none
    assert len(gpu.evaluated) == len(set(gpu.evaluated))  # every kernel evaluated once, where the GPU is
    # The same replies in one process take the same path (its evaluations come from the store: the same key).
    scripted = runner.start_run(config("scripted", f"replay:{DEMO}"), workspace=ws, executor=StandInGpu())
    assert scripted.status == "finished"
    assert attempts(ws, "split") == attempts(ws, "scripted")


def test_parallel_cycles_pause_for_the_gpu_together_and_a_run_never_driven_there_says_what_to_do(tmp_path):
    ws, gpu = tmp_path / "ws", StandInGpu()
    try:
        runner.start_run(config("par", "interactive", max_rounds=2, parallel_cycles=2), workspace=ws, executor=gpu)
        interactive.respond("par", init_plan([("a", 0.9), ("b", 0.8)]), workspace=ws, prompts_only=True)
        interactive.respond("par", fenced(row_kernel(1)), key="write:c1:1", workspace=ws, prompts_only=True)
        half = interactive.pending("par", workspace=ws).prompts
        assert [(w.prompt.kind, w.prompt.key.split(":")[0]) for w in half if not w.answered] == [
            ("device", "device"),
            ("llm", "write"),
        ]
        interactive.respond("par", fenced(row_kernel(2)), key="write:c2:1", workspace=ws, prompts_only=True)
        both = interactive.pending("par", workspace=ws).prompts
        assert [w.prompt.kind for w in both] == ["device", "device"] and not gpu.evaluated
        outcome = runner.resume_run("par", workspace=ws, executor=gpu)
        assert outcome.status == "finished" and len(gpu.evaluated) == 2
        assert sorted(a[:3] for a in attempts(ws, "par")) == [("c1", 1, "passed"), ("c2", 1, "passed")]

        store = runner.open_store(ws)
        try:
            store.update_run("par", device_info=None, status="waiting")  # as a run made before devices were recorded
        finally:
            store.close()
        with pytest.raises(UserError, match="no recorded device") as caught:
            runner.resume_run("par", workspace=ws, prompts_only=True)
        assert "ksearch resume par" in (caught.value.hint or "")
    finally:
        gpu.close()
