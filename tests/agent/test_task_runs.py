"""Every task backend through the real search loop on the CPU (scripted replies, Triton interpreter)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ksearch.agent.config import RunConfig
from ksearch.flows import run as runner
from tests.helpers.scripts import fenced, init_plan, write_script

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "tasks" / "data"


@pytest.mark.parametrize(
    ("task", "solution"),
    [
        ("trimul", REPO / "examples" / "trimul_triton.py"),
        (str(REPO / "examples" / "my_op.py"), DATA / "my_op_triton.py"),
        (
            f"kernelbench:{DATA / 'kernelbench' / 'KernelBench' / 'level1' / '1_LeakyReLU.py'}",
            DATA / "kernelbench" / "solutions" / "level1_1_ok.py",
        ),
        pytest.param(
            "flashinfer:gqa_paged_decode_h32_kv4_d128_ps1",
            REPO / "ksearch" / "tasks" / "flashinfer" / "solutions" / "gqa_paged_decode_triton.py",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("flashinfer_bench") is None, reason="flashinfer-bench is not installed"
            ),
        ),
    ],
    ids=["trimul", "userop", "kernelbench", "flashinfer-gqa"],
)
@pytest.mark.usefixtures("in_process_executor")
def test_one_round_search_on_each_task_backend(tmp_path, task, solution):
    script = write_script(
        tmp_path / "script.jsonl",
        [("plan:0:0", init_plan([("a", 0.9)])), ("write:c1:1", fenced(solution.read_text()))],
    )
    cfg = RunConfig(run_id="t", task=task, model=f"replay:{script}", device="cpu", max_rounds=1)
    outcome = runner.start_run(cfg, workspace=tmp_path / "ws")
    assert outcome.status == "finished" and outcome.rounds_used == 1
    assert outcome.best is not None and outcome.best.node_id == "a"
    store = runner.open_store(tmp_path / "ws")
    try:
        [attempt] = store.list_attempts("t")
        assert attempt["verdict"] == "passed", store.get_evaluation(attempt["evaluation_id"]).log
    finally:
        store.close()


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("task", "solution"),
    [
        ("trimul", REPO / "examples" / "trimul_cuda.py"),
        pytest.param(
            "flashinfer:gqa_paged_decode_h32_kv4_d128_ps1?search=2",
            REPO / "ksearch" / "tasks" / "flashinfer" / "solutions" / "gqa_paged_decode_cuda.py",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("flashinfer_bench") is None, reason="flashinfer-bench is not installed"
            ),
        ),
    ],
    ids=["trimul", "flashinfer-gqa"],
)
def test_a_cuda_language_search_round_on_the_gpu(tmp_path, task, solution):
    """``--language cuda`` end to end: the coder's load_inline module is built by nvcc in the worker, checked on every
    test config and timed; the round's attempt is stored as passed with a latency."""
    script = write_script(
        tmp_path / "script.jsonl",
        [("plan:0:0", init_plan([("a", 0.9)])), ("write:c1:1", fenced(solution.read_text()))],
    )
    cfg = RunConfig(run_id="t", task=task, model=f"replay:{script}", device="cuda", language="cuda", max_rounds=1)
    outcome = runner.start_run(cfg, workspace=tmp_path / "ws")
    assert outcome.status == "finished" and outcome.rounds_used == 1
    store = runner.open_store(tmp_path / "ws")
    try:
        [attempt] = store.list_attempts("t")
        evaluation = store.get_evaluation(attempt["evaluation_id"])
        assert attempt["verdict"] == "passed", evaluation.log
        assert evaluation.timed and evaluation.latency_ms and evaluation.latency_ms > 0
        print(f"{task} [cuda]: {evaluation.summary()} ({evaluation.environment.get('stage_seconds', '')})")
    finally:
        store.close()
