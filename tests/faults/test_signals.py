"""SIGTERM and SIGINT (Ctrl-C): the step in progress finishes and is recorded, the run stops resumable and says how
to go on; a second signal stops at once. Nothing recorded is paid for again on resume."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests.faults.agent_process import Fault
from tests.faults.harness import (
    SIGNAL_EXIT,
    assert_no_orphans,
    check_nothing_paid_twice,
    ksearch,
    llm_rows,
    log_events,
    run_args,
    run_row,
    start_agent,
)
from tests.faults.llm_server import Reply, loopback_llm, scripted
from tests.helpers.scripts import fenced, init_plan, row_kernel

pytestmark = pytest.mark.slow

REPLIES = {"plan:0": init_plan([("a", 0.9)]), "write:c1:1": fenced(row_kernel(1))}


def _signal_on_arrival(
    server,
    agent_pid: list[int],
    key: str,
    *signals: signal.Signals,
    gap_s: float = 0.5,
    sent: list[float] | None = None,
) -> None:
    """Send ``signals`` to the agent (``gap_s`` apart) as the request ``key`` arrives, while it is in flight; the
    monotonic time of each goes into ``sent``."""

    def send(request) -> None:
        if request.key == key and request.repeat == 0:

            def later() -> None:
                for sig in signals:
                    os.kill(agent_pid[0], sig)
                    if sent is not None:
                        sent.append(time.monotonic())
                    time.sleep(gap_s)

            threading.Thread(target=later, daemon=True).start()

    server.on_arrival = send


def test_sigterm_during_an_llm_request_lets_it_finish_and_be_recorded_then_resume_goes_on(tmp_path):
    ws = tmp_path / "ws"
    replies = {**REPLIES, "write:c1:1": Reply(text=REPLIES["write:c1:1"], delay_s=1.5)}
    with loopback_llm(scripted(replies)) as server:
        pid: list[int] = []
        _signal_on_arrival(server, pid, "write:c1:1", signal.SIGTERM)
        agent = start_agent(["--workspace", str(ws), *run_args("s", server)], cwd=tmp_path, output=tmp_path / "a.txt")
        pid.append(agent.pid)
        code = agent.wait(300)
        output = agent.text()
        assert code == SIGNAL_EXIT[signal.SIGTERM], output[-3000:]
        flat = " ".join(output.split())
        assert "SIGTERM: stopping run s once the step in progress is done" in flat
        assert "stopped by SIGTERM before compile" in flat and "ksearch resume s" in flat
        assert "Traceback" not in output
        assert_no_orphans(agent.pid)
        run = run_row(ws, "s")
        assert run["status"] == "interrupted"
        assert "write:c1:1" in llm_rows(ws, "s")  # the reply in flight was recorded
        assert not log_events(ws, "profile.evaluate")

        server.on_arrival = None
        code, output = ksearch(ws, "resume", "s", cwd=tmp_path)
        assert code == 0, output[-3000:]
        assert server.count("write:c1:1") == 1  # not asked again
        accounting = check_nothing_paid_twice(ws, "s", server)
    assert run_row(ws, "s")["status"] == "finished"
    assert accounting.evaluations == 1 and list(accounting.evaluations_started.values()) == [1]


def test_sigint_during_an_evaluation_lets_it_finish_and_be_recorded_then_resume_does_not_redo_it(tmp_path):
    ws = tmp_path / "ws"
    ctrl_c = Fault("profile.evaluate", "profile", worker_running=True, action="signal:SIGINT")
    with loopback_llm(scripted(REPLIES)) as server:
        code, output = ksearch(ws, *run_args("s", server), cwd=tmp_path, fault=ctrl_c)
        assert code == SIGNAL_EXIT[signal.SIGINT], output[-3000:]
        flat = " ".join(output.split())
        assert "SIGINT: stopping run s" in flat and "stopped by SIGINT before finish_cycle" in flat
        assert "Traceback" not in output
        assert run_row(ws, "s")["status"] == "interrupted"
        assert check_nothing_paid_twice(ws, "s", server).evaluations == 1  # the evaluation in progress was kept

        code, output = ksearch(ws, "resume", cwd=tmp_path)
        assert code == 0, output[-3000:]
        accounting = check_nothing_paid_twice(ws, "s", server)
    assert run_row(ws, "s")["status"] == "finished"
    assert accounting.evaluations == 1 and list(accounting.evaluations_started.values()) == [1]  # not evaluated again


def test_a_second_sigint_stops_at_once_and_leaves_the_run_resumable(tmp_path):
    ws = tmp_path / "ws"
    replies = {**REPLIES, "write:c1:1": Reply(text=REPLIES["write:c1:1"], delay_s=60)}  # a provider that hangs
    with loopback_llm(scripted(replies)) as server:
        pid: list[int] = []
        sent: list[float] = []
        _signal_on_arrival(server, pid, "write:c1:1", signal.SIGINT, signal.SIGINT, sent=sent)
        agent = start_agent(["--workspace", str(ws), *run_args("s", server)], cwd=tmp_path, output=tmp_path / "a.txt")
        pid.append(agent.pid)
        code = agent.wait(55)  # start-up and the first round on a loaded machine, then the stop: well under the hang
        ended = time.monotonic()
        output = agent.text()
    # "At once": the exit follows the second signal within seconds, where waiting for the hanging call takes 60 s.
    # Measured from the signal, not from the start, so a slow start-up on a busy machine does not count against it.
    assert len(sent) == 2 and ended - sent[-1] < 20, (sent, ended)
    assert code == SIGNAL_EXIT[signal.SIGINT], output[-3000:]
    flat = " ".join(output.split())
    assert "SIGINT again: stopped at once" in flat and "ksearch resume s" in flat
    assert "Traceback" not in output
    run = run_row(ws, "s")
    assert run["status"] == "interrupted" and "stopped at once" in run["error"]
    assert "write:c1:1" not in llm_rows(ws, "s")  # never answered: asked again on resume
    check_nothing_paid_twice(ws, "s")
