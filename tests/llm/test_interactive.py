"""The interactive model in a real LangGraph graph: the LLM layer pauses, a recorded reply resumes it, a bad reply
gets the same repair prompt a model's would, and answers meant for an earlier pause of the node are skipped."""

from __future__ import annotations

import json

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from pydantic import BaseModel

from ksearch.llm.client import LLMClient
from ksearch.llm.interactive import INTERACTIVE_MODEL, Answer, InteractiveChatModel, Prompt
from ksearch.llm.recorder import MemoryRecorder
from ksearch.llm.usage import RecordedCall


class Plan(BaseModel):
    steps: list[str]


class State(BaseModel):
    result: list[str] | None = None


def build(client: LLMClient):
    def ask_planner(state: State) -> dict:
        parsed, _calls = client.complete_json("planner", "plan:0:0", "Give the steps as JSON.", model_cls=Plan)
        return {"result": parsed.steps}

    g = StateGraph(State)
    g.add_node("ask", ask_planner)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g.compile(checkpointer=InMemorySaver())


def pending(graph, cfg) -> list[tuple[str, Prompt]]:
    return [(i.id, Prompt.model_validate(i.value)) for i in graph.get_state(cfg).interrupts]


def record(recorder: MemoryRecorder, prompt: Prompt, reply: str) -> None:
    """What `ksearch respond` does: the reply becomes the call's record before the graph resumes."""
    recorder.record(
        RecordedCall(
            call_key=prompt.key,
            role=prompt.role,
            model=INTERACTIVE_MODEL,
            prompt=prompt.prompt,
            reply=reply,
            attempt=prompt.attempt,
        )
    )


def test_a_bad_reply_gets_the_repair_prompt_and_a_good_one_finishes():
    recorder = MemoryRecorder()
    graph = build(LLMClient(InteractiveChatModel(), recorder))
    cfg = {"configurable": {"thread_id": "t"}}

    graph.invoke(State(), cfg)
    [(first_id, first)] = pending(graph, cfg)
    assert (first.key, first.role, first.attempt, first.kind) == ("plan:0:0", "planner", 0, "llm")
    assert first.prompt == "Give the steps as JSON." and first.reply_format.kind == "json"
    assert first.reply_format.json_schema["title"] == "Plan"

    record(recorder, first, "no JSON here, sorry")
    graph.invoke(Command(resume={first_id: Answer(key=first.key, value="ignored").model_dump()}), cfg)
    [(repair_id, repair)] = pending(graph, cfg)
    assert repair.key == "plan:0:0#repair1" and repair.attempt == 1
    assert "no JSON here, sorry" in repair.prompt and "no JSON object" in repair.prompt
    assert recorder.calls["plan:0:0"].error.startswith("the reply contains no JSON object")  # noted when parsed

    # The first interrupt() of the re-run gets the (stale) answer to plan:0:0: it is skipped, not taken as the repair.
    record(recorder, repair, json.dumps({"steps": ["tile", "fuse"]}))
    out = graph.invoke(Command(resume={repair_id: Answer(key=repair.key, value="ignored").model_dump()}), cfg)
    assert out["result"] == ["tile", "fuse"]
    assert pending(graph, cfg) == []
    assert all(c.input_tokens == 0 and c.output_tokens == 0 for c in recorder.calls.values())


def test_an_answer_given_only_as_the_resume_value_is_recorded():
    """A LangGraph-native client may resume with the reply itself; the LLM layer records it like any call."""
    recorder = MemoryRecorder()
    graph = build(LLMClient(InteractiveChatModel(), recorder))
    cfg = {"configurable": {"thread_id": "t"}}
    graph.invoke(State(), cfg)
    [(intr_id, prompt)] = pending(graph, cfg)
    out = graph.invoke(Command(resume={intr_id: {"key": prompt.key, "value": '{"steps": ["a"]}'}}), cfg)
    assert out["result"] == ["a"]
    call = recorder.calls["plan:0:0"]
    assert call.model == INTERACTIVE_MODEL and call.reply == '{"steps": ["a"]}' and call.error is None
