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

from typing import Any, ClassVar

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langgraph.types import interrupt

from ksearch.errors import UserError
from ksearch.llm.pauses import DEVICE_ANSWER, Answer, Prompt, ReplyFormat, Waiting, answer_for
from ksearch.llm.traits import ModelTraits
from ksearch.store import Store

__all__ = [
    "DEVICE_ANSWER",
    "INTERACTIVE_MODEL",
    "Answer",
    "InteractiveChatModel",
    "Prompt",
    "ReplyFormat",
    "Waiting",
    "answer_for",
    "ask",
    "resume_map",
    "wait_for_device",
    "waiting_prompts",
]

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
