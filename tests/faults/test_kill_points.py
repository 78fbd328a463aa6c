"""SIGKILL at every node boundary and inside every node, then `ksearch resume`: nothing paid for is lost or paid twice.

One run (softmax on the CPU, three rounds, its model a loopback OpenAI-compatible server) is killed again and again,
each time at the next point of the list below, and resumed after every kill, until a resume is left to finish it.
Kill points are deterministic: the agent kills itself when it logs the named event, when a store write inside the
named node returns, or once its evaluation worker runs; "in flight" kills are done by the LLM server when the
request arrives (see agent_process.py and llm_server.py). After every kill the store is checked; at the end, the run
must be exactly the run an uninterrupted agent makes.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

import pytest

from tests.faults.agent_process import Fault
from tests.faults.harness import (
    assert_no_orphans,
    check_nothing_paid_twice,
    is_driven,
    ksearch,
    rows,
    run_row,
    start_agent,
)
from tests.faults.llm_server import loopback_llm, scripted
from tests.helpers.scripts import WRONG_KERNEL, fenced, init_plan, row_kernel

pytestmark = pytest.mark.slow

RUN_ID = "chain"
REPLIES = {
    "plan:0": init_plan([("a", 0.9)]),
    "write:c1:1": fenced(WRONG_KERNEL.format(sleep=0.0, variant=1)),
    "write:c1:2": fenced(row_kernel(2)),
    "write:c1:3": fenced(row_kernel(3)),
}


@dataclass(frozen=True)
class KillPoint:
    label: str
    fault: Fault | None = None
    in_flight: str | None = None
    """Kill when the request for this call arrives at the LLM server (sent, never answered)."""


def _start(node: str) -> KillPoint:
    return KillPoint(f"start of {node}", Fault("node.start", node))


def _end(node: str) -> KillPoint:
    return KillPoint(f"end of {node} (before its checkpoint)", Fault("node.end", node))


def _after(node: str, store_call: str) -> KillPoint:
    return KillPoint(f"inside {node}: after Store.{store_call}", Fault("node.start", node, store_call=store_call))


# In the order the run reaches them; each resume goes on to the next one.
KILL_POINTS = [
    _start("setup"),
    _after("setup", "update_run"),
    _end("setup"),
    _start("plan"),
    KillPoint("inside plan: LLM request in flight", in_flight="plan:0"),
    _end("plan"),
    _start("edit_tree"),
    _after("edit_tree", "record_snapshot"),
    _end("edit_tree"),
    _start("write_kernel"),
    KillPoint("inside write_kernel: LLM request in flight", in_flight="write:c1:1"),
    _after("write_kernel", "record_llm_call"),
    _end("write_kernel"),
    _start("compile"),
    _after("compile", "get_candidate"),
    _end("compile"),
    _start("profile"),
    KillPoint("inside profile: evaluation worker running", Fault("profile.evaluate", "profile", worker_running=True)),
    _after("profile", "record_evaluation"),
    _end("profile"),
    _start("finish_cycle"),
    _end("finish_cycle"),
    _start("prune"),
    _after("prune", "record_snapshot"),
    _end("prune"),
    _start("learn_skills"),
    _end("learn_skills"),
]


def test_sigkill_at_every_node_boundary_and_inside_every_node(tmp_path):
    ws = tmp_path / "ws"
    start = [
        "run",
        "softmax",
        "--model",
        "openai:fault-test",
        "--device",
        "cpu",
        "--max-rounds",
        "3",
        "--stagnation-window",
        "2",
        "--run-id",
        RUN_ID,
        "--llm-max-attempts",
        "2",
    ]
    outcomes = []
    with loopback_llm(scripted(REPLIES)) as server:
        argv = [*start, "--base-url", server.base_url]
        for i, point in enumerate(KILL_POINTS):
            server.kill_when = (lambda r, key=point.in_flight: r.key == key) if point.in_flight else None
            agent = start_agent(
                ["--workspace", str(ws), *argv], cwd=tmp_path, output=tmp_path / f"step{i}.txt", fault=point.fault
            )
            server.agent_pid = agent.pid
            code = agent.wait(300)
            assert code == -signal.SIGKILL, f"kill point {point.label!r} was never reached:\n{agent.text()[-3000:]}"
            assert_no_orphans(agent.pid)
            # As a crash leaves it: status still 'running', no process holds it, nothing recorded twice.
            assert run_row(ws, RUN_ID)["status"] == "running"
            assert is_driven(ws, RUN_ID) is False
            check_nothing_paid_twice(ws, RUN_ID, server)
            outcomes.append(point.label)
            argv = ["resume", RUN_ID]

        code, output = ksearch(ws, "resume", RUN_ID, cwd=tmp_path)
        assert code == 0, output[-3000:]
        assert "best kernel" in output
        accounting = check_nothing_paid_twice(ws, RUN_ID, server)

    assert outcomes == [p.label for p in KILL_POINTS]
    run = run_row(ws, RUN_ID)
    assert run["status"] == "finished" and run["rounds_used"] == 3 and run["best_candidate_id"]
    attempts = rows(
        ws, "select cycle_id, attempt, verdict from attempts where run_id = ? order by round_index", (RUN_ID,)
    )
    assert [(a["cycle_id"], a["attempt"], a["verdict"]) for a in attempts] == [
        ("c1", 1, "incorrect"),
        ("c1", 2, "passed"),
        ("c1", 3, "passed"),
    ]
    # Every call recorded once; only the two requests killed in flight were ever sent twice.
    assert accounting.llm_rows == len(REPLIES)
    assert sorted(server.keys()) == sorted([*REPLIES, "plan:0", "write:c1:1"])
    # Every evaluation recorded once; only the one killed while its worker ran was started twice.
    assert accounting.evaluations == 3
    assert sorted(accounting.evaluations_started.values()) == [1, 1, 2]
