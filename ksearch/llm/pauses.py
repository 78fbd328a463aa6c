"""What a paused run waits for, as data: the question (``Prompt``), its answer (``Answer``) and a pause seen from
outside the graph (``Waiting``), with the store lookups that say whether it is answered.

Light on purpose (pydantic and the store, no LangChain or LangGraph): ``ksearch show`` lists a run's pauses from its
row without loading the graph. Pausing and resuming the graph is ``ksearch.llm.interactive``.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ksearch.store import Store
from ksearch.store.steering import find_decision


class ReplyFormat(BaseModel):
    """What a reply must look like, told to whoever answers (the prompt says it too)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["json", "code", "text", "approval", "device"]
    description: str
    json_schema: dict[str, Any] | None = None
    """The JSON schema of the object asked for (``kind == "json"`` with a typed model)."""


class Prompt(BaseModel):
    """The value a paused run carries: one question waiting for an answer. Stored in the checkpoint as a dict."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["llm", "approval", "device"] = "llm"
    key: str
    """The LLM call key (``plan:0:0``, ``write:c1:2#repair1``), for an approval ``approve:STEP:CANDIDATE``, for a
    kernel waiting for its device (a run driven with ``prompts_only``) ``device:evaluate:CANDIDATE``."""
    role: str
    """``planner``, ``coder``, for approvals ``person``, for device pauses ``device``."""
    attempt: int = 0
    """0 for a first ask, k for the k-th repair of a reply that could not be used."""
    system: str | None = None
    prompt: str
    reply_format: ReplyFormat
    asked_at: float = Field(default_factory=time.time)
    details: dict[str, Any] = Field(default_factory=dict)
    """Structured facts for approvals (node, candidate, step, the promotion's reason)."""


class Answer(BaseModel):
    """The resume value: which question it answers and the answer (a reply text, or approve/reject)."""

    model_config = ConfigDict(extra="forbid")

    key: str
    value: str


DEVICE_ANSWER = "the device is here"
"""What a process that can evaluate answers a device pause with: the paused node runs again and evaluates."""


class Waiting(BaseModel):
    """One pause of a run: the interrupt's id (what ``Command(resume={id: ...})`` names) and its prompt."""

    interrupt_id: str
    prompt: Prompt
    answered: bool = False
    """An answer is recorded in the store: the run takes it as soon as it is driven again."""


def answer_for(store: Store, run_id: str, prompt: Prompt, *, device_here: bool = False) -> Answer | None:
    """The recorded answer to ``prompt``: the reply recorded under its call key, or the approve/reject act; a
    device pause is answered only by a process that has the device (``device_here``)."""
    if prompt.kind == "device":
        return Answer(key=prompt.key, value=DEVICE_ANSWER) if device_here else None
    if prompt.kind == "approval":
        found = find_decision(store, run_id, int(prompt.details["step"]), str(prompt.details["candidate_id"]))
        return Answer(key=prompt.key, value=found["act"]) if found else None
    call = store.find_llm_call(run_id, prompt.key)
    return Answer(key=prompt.key, value=call["reply"]) if call else None
