"""A misbehaving OpenAI-compatible server: malformed bodies, replies without code, 429, 500 forever, a stall.

The server is real HTTP on the loopback (see llm_server.py) and ksearch reaches it through langchain-openai as it
would reach vLLM. The runs are kept short by a token budget (each reply counts 1,200 tokens): the run ends cleanly
('budget') once the calls under test are made, without evaluating a kernel.
"""

from __future__ import annotations

import pytest

from tests.faults.harness import (
    assert_one_line_error,
    check_nothing_paid_twice,
    ksearch,
    llm_rows,
    rows,
    run_args,
    run_row,
)
from tests.faults.llm_server import Reply, loopback_llm, scripted
from tests.helpers.scripts import init_plan

pytestmark = pytest.mark.slow

PLAN = init_plan([("a", 0.9)])
PLAN_KEY = "plan:0:0"
"""The store's key of the first planner call (the server names it plan:0)."""
ONE_CALL = ("--max-tokens", "1000")
"""Budget for the planner's call alone: the coder is never asked."""

TRANSIENT = {
    "429 then success": ([Reply(status=429, text="rate limited", headers={"Retry-After": "0"}), PLAN], ()),
    "malformed JSON body then success": (
        [Reply(body=b'{"id": "chatcmpl-1", "object": "chat.completion", "choi'), PLAN],
        (),
    ),
    "stall past the timeout then success": ([Reply(text=PLAN, delay_s=4.0), PLAN], ("--llm-timeout", "1")),
}


@pytest.mark.parametrize("fault", TRANSIENT, ids=list(TRANSIENT))
def test_transient_failures_are_retried_and_the_call_is_recorded_once(tmp_path, fault):
    replies, flags = TRANSIENT[fault]
    ws = tmp_path / "ws"
    with loopback_llm(scripted({"plan:0": replies})) as server:
        code, output = ksearch(ws, *run_args("t", server, *ONE_CALL, *flags), cwd=tmp_path)
        assert code == 3, output[-3000:]  # ended by its budget: no kernel passed
        assert server.count("plan:0") == 2  # the failed request and its retry
        check_nothing_paid_twice(ws, "t", server)
    calls = llm_rows(ws, "t")
    assert list(calls) == [PLAN_KEY] and calls[PLAN_KEY]["retries"] == 1
    run = run_row(ws, "t")
    assert run["status"] == "finished" and run["done_reason"].startswith("LLM budget spent")


def test_a_planner_reply_that_is_not_json_is_repaired_and_both_calls_are_recorded(tmp_path):
    ws = tmp_path / "ws"
    broken = 'Here is the plan: {"kernel_summary": "softmax", "ops": [{"op": "insert", '
    with loopback_llm(scripted({"plan:0": broken, "plan:0#repair": PLAN})) as server:
        code, output = ksearch(ws, *run_args("t", server, "--max-tokens", "2000"), cwd=tmp_path)
        assert code == 3, output[-3000:]  # ended by its budget: no kernel passed
        check_nothing_paid_twice(ws, "t", server)
    calls = llm_rows(ws, "t")
    assert sorted(calls) == [PLAN_KEY, f"{PLAN_KEY}#repair1"]
    assert calls[PLAN_KEY]["error"] and not calls[f"{PLAN_KEY}#repair1"]["error"]
    assert run_row(ws, "t")["status"] == "finished"


def test_a_coder_reply_without_code_is_asked_again_then_recorded_as_no_code(tmp_path):
    ws = tmp_path / "ws"
    prose = "I would write a row-wise kernel with one program per row and a max-subtracted exponent."
    replies = {"plan:0": PLAN, "write:c1:1": prose, "write:c1:1#repair": "Sorry, here it is in words: " + prose}
    with loopback_llm(scripted(replies)) as server:
        code, output = ksearch(ws, *run_args("t", server, "--max-tokens", "3000"), cwd=tmp_path)
        assert code == 3, output[-3000:]  # ended by its budget: no kernel passed
        check_nothing_paid_twice(ws, "t", server)
        assert sorted(server.keys()) == sorted(replies)  # each asked once
    assert sorted(llm_rows(ws, "t")) == [PLAN_KEY, "write:c1:1", "write:c1:1#repair1"]
    attempts = rows(ws, "select cycle_id, attempt, verdict, evaluation_id from attempts where run_id = 't'")
    assert [(a["cycle_id"], a["attempt"], a["verdict"], a["evaluation_id"]) for a in attempts] == [
        ("c1", 1, "no_code", None)
    ]
    assert run_row(ws, "t")["status"] == "finished"


def test_500_forever_stops_the_run_resumably_and_resume_pays_only_for_the_missing_call(tmp_path):
    ws = tmp_path / "ws"
    with loopback_llm(scripted({"plan:0": Reply(status=500, text="upstream exploded")})) as server:
        code, output = ksearch(ws, *run_args("t", server, *ONE_CALL, "--llm-max-attempts", "2"), cwd=tmp_path)
        assert code == 1, output[-3000:]
        assert_one_line_error(output, "failed 2 times for plan:0", "upstream exploded", "ksearch resume t")
        assert server.count("plan:0") == 2
        run = run_row(ws, "t")
        assert run["status"] == "interrupted" and "failed 2 times" in run["error"]
        assert llm_rows(ws, "t") == {}  # nothing was answered, nothing recorded

        server.respond = scripted({"plan:0": PLAN})  # the provider is back
        code, output = ksearch(ws, "resume", cwd=tmp_path)  # no RUN: the latest unfinished run
        assert code == 3, output[-3000:]  # ended by its budget: no kernel passed
        assert "using the latest unfinished run: t" in output
        assert server.count("plan:0") == 3
        check_nothing_paid_twice(ws, "t", server)
    assert list(llm_rows(ws, "t")) == [PLAN_KEY]
    assert run_row(ws, "t")["status"] == "finished"
