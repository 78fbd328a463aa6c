"""The Dask executor on a real two-worker cluster (``ksearch worker`` processes, Triton interpreter): the same
verdicts as the local executor, in the same sandbox, with hard limits that really stop work."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Verdict
from ksearch.tools.evaluator.parent.request import EvalRequest
from ksearch.tools.executors import LocalExecutor
from ksearch.tools.executors import dask as dask_executor
from ksearch.tools.executors.dask import DaskExecutor
from ksearch.tools.fingerprint import probe_device
from tests.helpers.dask_cluster import (
    FAKE_KEY,
    REPO,
    dask_cluster,
    environ_of,
    sandbox_processes,
)
from tests.helpers.scripts import WRONG_KERNEL, row_kernel

pytest.importorskip("distributed")

pytestmark = pytest.mark.slow


def request(code: str, **limits: float) -> EvalRequest:
    candidate = Candidate(task="softmax", language="triton", code=code, entry_point="kernel")
    return EvalRequest(candidate=candidate, device="cpu", **limits)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with dask_cluster(tmp_path_factory.mktemp("dask")) as running:
        yield running


def test_dask_and_local_executors_give_the_same_verdicts_and_the_same_evaluation_key(cluster):
    cases = [
        row_kernel(1),
        WRONG_KERNEL.format(sleep=0.0, variant=2),
        "import torch\n\ndef kernel(x):\n    return x +\n",
    ]
    local_verdicts = []
    with DaskExecutor(cluster.address) as remote, LocalExecutor() as local:
        assert remote.device_info("cpu").eval_key("softmax") == probe_device("cpu").eval_key("softmax")
        for code in cases:
            there, here = remote.evaluate(request(code)), local.evaluate(request(code))
            local_verdicts.append(here.verdict)
            assert (there.verdict, there.configs_passed, there.configs_total) == (
                here.verdict,
                here.configs_passed,
                here.configs_total,
            ), (there.summary(), here.summary())
            assert (there.mismatch.config if there.mismatch else None) == (
                here.mismatch.config if here.mismatch else None
            )
            assert there.environment["dask_worker"] in cluster.worker_pids()
        assert [b.kind for b in remote.busy] == ["evaluate"] * 3
        assert all(b.where in cluster.worker_pids() and b.ended > b.started for b in remote.busy)
    assert local_verdicts == [Verdict.PASSED, Verdict.INCORRECT, Verdict.COMPILE_ERROR]


def test_no_api_key_reaches_a_worker_or_its_sandbox(cluster):
    with DaskExecutor(cluster.address) as remote:
        assert remote.evaluate(request(row_kernel(3))).verdict == Verdict.PASSED
        for pid in cluster.worker_pids().values():
            assert "OPENAI_API_KEY" not in environ_of(pid)  # ksearch worker dropped it before the worker started
            sandboxed = sandbox_processes(pid)
            for child in sandboxed:
                env = environ_of(child)
                assert FAKE_KEY not in env.values() and "OPENAI_API_KEY" not in env
        assert any(sandbox_processes(pid) for pid in cluster.worker_pids().values())  # a checker was found


def test_a_task_past_its_hard_limit_is_a_timeout_and_its_worker_is_restarted(cluster, monkeypatch):
    monkeypatch.setattr(dask_executor, "hard_limit_s", lambda _request: 4.0)
    before = cluster.worker_pids()
    with DaskExecutor(cluster.address) as remote:
        started = time.monotonic()
        evaluation = remote.evaluate(request(row_kernel(4, sleep=120.0), run_timeout_s=600.0))
        assert evaluation.verdict == Verdict.TIMEOUT and "restarted" in evaluation.log
        assert time.monotonic() - started < 60
        killed = [cluster.client.get_events("ksearch-evaluation")[-1][1]["worker"]]
    cluster.wait_for_workers(2)
    deadline = time.monotonic() + 60
    while before[killed[0]] in _live(before.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert before[killed[0]] not in _live(before.values())  # the worker process that ran it is gone...
    deadline = time.monotonic() + 20
    while sandbox_processes(before[killed[0]]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sandbox_processes(before[killed[0]]) == []  # ...and the sleeping candidate with it


def test_a_worker_killed_mid_evaluation_has_the_evaluation_retried_elsewhere(cluster):
    cluster.wait_for_workers(2)
    seen = len(cluster.starts())
    with DaskExecutor(cluster.address) as remote:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(remote.evaluate, request(row_kernel(5, sleep=5.0)))
            first = _next_start(cluster, seen)
            time.sleep(1.0)
            os.kill(first["pid"], signal.SIGKILL)
            evaluation = pending.result(timeout=120)
    assert evaluation.verdict == Verdict.PASSED
    attempts = [s for s in cluster.starts()[seen:] if s["key"] == first["key"]]
    assert len(attempts) == 2 and attempts[1]["pid"] != first["pid"]
    assert evaluation.environment["dask_worker"] == attempts[1]["worker"]


def test_repeated_worker_deaths_end_as_a_crashed_evaluation(tmp_path):
    with (
        dask_cluster(tmp_path / "fragile", workers=1, allowed_failures=0) as fragile,
        DaskExecutor(fragile.address) as remote,
    ):
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(remote.evaluate, request(row_kernel(6, sleep=30.0)))
            os.kill(_next_start(fragile, 0)["pid"], signal.SIGKILL)
            evaluation = pending.result(timeout=120)
    assert evaluation.verdict == Verdict.CRASHED
    assert "died" in evaluation.log


def _next_start(cluster, after: int, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while len(cluster.starts()) <= after:
        assert time.monotonic() < deadline, "no evaluation task started"
        time.sleep(0.1)
    return cluster.starts()[after]


def _live(pids) -> set[int]:
    """The pids still running (a zombie its nanny has not reaped yet counts as gone)."""
    alive = set()
    for pid in pids:
        try:
            state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            alive.add(pid)
    return alive


@pytest.mark.gpu
def test_trimul_through_a_one_worker_gpu_cluster_gives_the_local_verdict(tmp_path):
    """On a GPU: the same TriMul kernel through a one-worker Dask cluster (``ksearch worker --gpu 0``) and through
    the local executor: the same verdict and evaluation key, both timed, and a paired comparison runs there too."""
    code = (REPO / "examples" / "trimul_triton.py").read_text()

    def trimul(text: str, device: str) -> EvalRequest:
        candidate = Candidate(task="trimul", language="triton", code=text, entry_point="custom_kernel")
        return EvalRequest(candidate=candidate, device=device)

    with LocalExecutor() as local:  # first, and closed, so the two sessions never share the GPU's memory
        here = local.evaluate(trimul(code, "cuda:0"))
    with dask_cluster(tmp_path / "gpu", gpus=[0]) as gpu_cluster, DaskExecutor(gpu_cluster.address) as remote:
        info = remote.device_info("cuda")
        assert info.is_gpu and info.eval_key("trimul") == probe_device("cuda:0").eval_key("trimul")
        there = remote.evaluate(trimul(code, "cuda"))
        assert there.verdict == here.verdict == Verdict.PASSED, (there.summary(), here.summary())
        assert there.timed and here.timed and there.configs_passed == here.configs_passed
        assert there.device == here.device  # the GPU's name
        assert [t.config for t in there.timings] == [t.config for t in here.timings]
        print(f"trimul: dask {there.latency_ms:.4f} ms, local {here.latency_ms:.4f} ms on {here.device}")
        comparison = remote.compare(trimul(code, "cuda"), trimul(code + "\n# the same kernel\n", "cuda"), rounds=3)
        assert comparison.rounds == 3 and 0.8 < comparison.speedup < 1.25
