"""People (or outside agents) in the loop: the interactive model and the pauses that wait for them.

``--model interactive`` names no model at all: at each LLM call the LLM layer pauses the graph with LangGraph's
``interrupt()``, whose value is a :class:`Prompt` (role, call key, the rendered system and user prompt, the reply
format expected). Nothing runs while a run waits; the checkpoint holds the prompt. ``ksearch respond`` records the
reply as that call's row in ``llm_calls`` *first*, then resumes the graph; the interrupted node runs again from its
top, and the LLM layer finds the recorded call by its key, exactly as a resumed node finds a model's recorded call.
So a reply is never lost once ``respond`` returned, and it is parsed, validated and repaired like a model's.

The same mechanism asks for a promotion's approval (``prune``) when steering requires it.

A node may pause more than once (a repair prompt after a bad reply, several promotions). LangGraph hands a resumed
node its answers in the order the node's ``interrupt()`` calls happen, so an answer already taken from the store
comes back again from the first ``interrupt()`` of the re-run: :func:`ask` skips answers meant for another key.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Literal

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langgraph.types import interrupt
from pydantic import BaseModel, ConfigDict, Field

from ksearch.errors import UserError
from ksearch.llm.traits import ModelTraits
from ksearch.store import Store
from ksearch.store.steering import find_decision

INTERACTIVE_MODEL = "interactive"
"""The ``--model`` value that makes a person answer every call."""


class InteractiveChatModel(BaseChatModel):
    """Stands for the person answering. It is never invoked: the LLM layer pauses the graph instead."""

    model_name: str = INTERACTIVE_MODEL
    llm_traits: ClassVar[ModelTraits] = ModelTraits(answered_by_person=True)

    @property
    def _llm_type(self) -> str:
        return INTERACTIVE_MODEL

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise UserError(
            "the interactive model has no replies of its own: it is answered with `ksearch respond` while a run waits"
        )


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


def ask(prompt: Prompt) -> str:
    """Pause the graph until ``prompt`` is answered; returns the answer. Must run inside a graph node.

    Answers for other keys (given to earlier pauses of the same node, whose answers the node found in the store on
    this run) are skipped; the first ``interrupt()`` without an answer pauses the graph.
    """
    payload = prompt.model_dump(mode="json")
    while True:
        resumed = interrupt(payload)
        try:
            answer = Answer.model_validate(resumed)
        except ValueError:
            continue  # not one of ours (a bare resume value): ask again
        if answer.key == prompt.key:
            return answer.value


def approval_key(step: int, candidate_id: str) -> str:
    return f"approve:{step}:{candidate_id}"


DEVICE_ANSWER = "the device is here"
"""What a process that can evaluate answers a device pause with: the paused node runs again and evaluates."""


def wait_for_device(key: str, what: str, device: str) -> None:
    """Pause the graph until a process that has ``device`` drives the run (``key``: ``device:evaluate:CANDIDATE``).

    A run driven with ``prompts_only`` (a machine without the run's GPU) stops here instead of evaluating: its prompts
    are written and answered where the person is, its kernels evaluated where the GPU is. Only a process that can
    evaluate answers the pause (``resume_map(..., device_here=True)``); it then finds its own evaluator in the node."""
    ask(
        Prompt(
            kind="device",
            key=key,
            role="device",
            prompt=f"{what} waits for {device}: `ksearch resume RUN` on a machine that has it evaluates it",
            reply_format=ReplyFormat(kind="device", description=f"no reply: resume the run where {device} is"),
        )
    )


# ---- a paused run, seen from outside the graph ------------------------------------------------------------------


class Waiting(BaseModel):
    """One pause of a run: the interrupt's id (what ``Command(resume={id: ...})`` names) and its prompt."""

    interrupt_id: str
    prompt: Prompt
    answered: bool = False
    """An answer is recorded in the store: the run takes it as soon as it is driven again."""


def waiting_prompts(snapshot: Any, store: Store, run_id: str) -> list[Waiting]:
    """The pauses of a run from its latest checkpoint (``graph.get_state(cfg)``; subgraphs' pauses included), each
    marked answered when the store already holds its answer (a device pause never is). Nothing of the graph runs."""
    out = []
    for intr in getattr(snapshot, "interrupts", ()) or ():
        try:
            prompt = Prompt.model_validate(intr.value)
        except ValueError:
            continue
        out.append(Waiting(interrupt_id=intr.id, prompt=prompt, answered=answer_for(store, run_id, prompt) is not None))
    return sorted(out, key=lambda w: w.prompt.key)


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


def resume_map(
    waiting: list[Waiting], store: Store, run_id: str, *, device_here: bool = False
) -> dict[str, dict[str, str]]:
    """``{interrupt id: answer}`` for every pause whose answer is recorded (and every device pause, when the caller
    has the device): what ``Command(resume=...)`` takes."""
    out = {}
    for w in waiting:
        answer = answer_for(store, run_id, w.prompt, device_here=device_here)
        if answer is not None:
            out[w.interrupt_id] = answer.model_dump()
    return out
