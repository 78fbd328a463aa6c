"""Two processes in one workspace: two runs at once take turns on the database; two drivers of one run cannot."""

from __future__ import annotations

import pytest

from tests.faults.harness import (
    assert_one_line_error,
    check_nothing_paid_twice,
    is_driven,
    ksearch,
    llm_rows,
    run_args,
    run_row,
    start_agent,
)
from tests.faults.llm_server import Reply, loopback_llm, scripted
from tests.helpers.scripts import fenced, init_plan, row_kernel

pytestmark = pytest.mark.slow

PLAN = init_plan([("a", 0.9)])


def test_two_runs_at_once_in_one_new_workspace_both_finish_and_record_everything_once(tmp_path):
    ws = tmp_path / "ws"  # new: both processes create its tables at the same moment
    with loopback_llm(scripted({"plan:0": PLAN, "write:c1:1": fenced(row_kernel(1))})) as server:
        agents = [
            start_agent(
                ["--workspace", str(ws), *run_args(run_id, server)], cwd=tmp_path, output=tmp_path / f"{run_id}.txt"
            )
            for run_id in ("left", "right")
        ]
        codes = [agent.wait(300) for agent in agents]
        for agent, code in zip(agents, codes):
            assert code == 0, agent.text()[-3000:]
            assert "locked" not in agent.text()
        for run_id in ("left", "right"):
            assert run_row(ws, run_id)["status"] == "finished"
            check_nothing_paid_twice(ws, run_id)  # their prompts are alike: the ledger is checked per key below
            assert sorted(llm_rows(ws, run_id)) == ["plan:0:0", "write:c1:1"]
        assert server.count("plan:0") == 2 and server.count("write:c1:1") == 2  # one each


def test_a_second_driver_of_a_running_run_is_refused_with_its_driver_and_pays_for_nothing(tmp_path):
    ws = tmp_path / "ws"
    second: dict[str, object] = {}

    def resume_meanwhile(request) -> None:  # while the first driver waits for the planner's reply
        if request.key == "plan:0" and not second:
            second["result"] = ksearch(ws, "resume", "r", cwd=tmp_path, name="second")
            second["driven"] = is_driven(ws, "r")

    with loopback_llm(scripted({"plan:0": Reply(text=PLAN, delay_s=0.5)})) as server:
        server.on_arrival = resume_meanwhile
        first_code, first_output = ksearch(ws, *run_args("r", server, "--max-tokens", "1000"), cwd=tmp_path)
        assert first_code == 3, first_output[-3000:]  # ended by its token budget: no kernel passed
        code, output = second["result"]
        assert code == 1, output[-3000:]
        assert_one_line_error(output, "run r is being driven by process", "wait until it pauses or ends")
        assert second["driven"] is True
        assert server.count("plan:0") == 1  # the refused driver asked nothing
        check_nothing_paid_twice(ws, "r", server)
    assert run_row(ws, "r")["status"] == "finished"
    assert is_driven(ws, "r") is False
