"""Faults of a search whose evaluations run on a Dask cluster (``--executor dask``): two ``ksearch worker``
processes on this machine (Triton interpreter), a scheduler in the test process, the agent in a process of its own.

- a Dask worker SIGKILLed in the middle of an evaluation: the scheduler runs it again on a worker, the run finishes,
  and every evaluation is stored once;
- the agent SIGKILLed while its evaluation runs on the cluster: ``ksearch resume`` finishes the run and pays for
  nothing recorded twice.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import pytest

from tests.faults.harness import (
    assert_no_orphans,
    check_nothing_paid_twice,
    ksearch,
    rows,
    run_args,
    run_row,
    start_agent,
)
from tests.faults.llm_server import loopback_llm, scripted
from tests.helpers.dask_cluster import dask_cluster
from tests.helpers.scripts import fenced, init_plan, row_kernel

pytest.importorskip("distributed")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with dask_cluster(tmp_path_factory.mktemp("dask")) as running:
        yield running


def _on_next_start(cluster, act, *, delay_s: float) -> tuple[threading.Thread, dict]:
    """Run ``act(start)`` ``delay_s`` after the next evaluation task starts on the cluster (in a thread)."""
    seen = len(cluster.starts())
    found: dict = {}

    def watch() -> None:
        deadline = time.monotonic() + 240
        while len(cluster.starts()) <= seen and time.monotonic() < deadline:
            time.sleep(0.05)
        if len(cluster.starts()) > seen:
            found.update(cluster.starts()[seen])
            time.sleep(delay_s)
            act(found)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread, found


def test_a_worker_killed_mid_evaluation_is_retried_elsewhere_and_every_evaluation_is_stored_once(cluster, tmp_path):
    cluster.wait_for_workers(2)
    ws = tmp_path / "ws"
    replies = {
        "plan:0": init_plan([("a", 0.9), ("b", 0.8)]),
        "write:c1:1": fenced(row_kernel(1, sleep=4.0)),  # each worker process sleeps once in its first call
        "write:c2:1": fenced(row_kernel(2, sleep=4.0)),
    }
    before = len(cluster.starts())
    watcher, killed = _on_next_start(cluster, lambda start: os.kill(start["pid"], signal.SIGKILL), delay_s=1.0)
    with loopback_llm(scripted(replies)) as server:
        args = run_args("d", server, "--executor", "dask", "--scheduler", cluster.address, "--parallel", "2", rounds=2)
        code, output = ksearch(ws, *args, cwd=tmp_path)
        watcher.join(10)
        assert code == 0, output[-3000:] + cluster.log_text()
        assert run_row(ws, "d")["status"] == "finished"
        accounting = check_nothing_paid_twice(ws, "d", server)
    assert killed, "no evaluation started on the cluster"
    assert accounting.evaluations == 2
    assert [a["verdict"] for a in rows(ws, "select verdict from attempts where run_id = 'd'")] == ["passed", "passed"]
    starts = Counter(s["key"] for s in cluster.starts()[before:])
    assert starts[killed["key"]] == 2 and sum(starts.values()) == 3  # the killed one ran again, the other once
    assert_no_orphans(killed["pid"])  # the killed worker's checker and candidate died with it


def test_the_agent_killed_while_its_evaluation_runs_on_the_cluster_resumes_without_paying_twice(cluster, tmp_path):
    cluster.wait_for_workers(2)
    ws = tmp_path / "ws"
    replies = {"plan:0": init_plan([("a", 0.9)]), "write:c1:1": fenced(row_kernel(3, sleep=3.0))}
    with loopback_llm(scripted(replies)) as server:
        args = run_args("k", server, "--executor", "dask", "--scheduler", cluster.address)
        agent = start_agent(["--workspace", str(ws), *args], cwd=tmp_path, output=tmp_path / "killed.txt")
        watcher, started = _on_next_start(cluster, lambda _start: agent.send(signal.SIGKILL), delay_s=0.5)
        assert agent.wait(300) == -signal.SIGKILL, agent.text()[-3000:]
        watcher.join(10)
        assert started, "the evaluation never started on the cluster"
        assert rows(ws, "select id from evaluations") == []  # killed before its evaluation came back

        code, output = ksearch(ws, "resume", "k", cwd=tmp_path)
        assert code == 0, output[-3000:]
        assert run_row(ws, "k")["status"] == "finished"
        accounting = check_nothing_paid_twice(ws, "k", server)
    assert accounting.evaluations == 1
    assert server.count("plan:0") == 1 and server.count("write:c1:1") == 1
