"""Chat models that serve recorded replies: deterministic re-runs of a past search, and the test double.

A replayed run must take the same path as the recorded one, so replies are matched to calls by ``call_key`` when the
caller passes one (parallel branches may ask in a different order), and by order otherwise.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, ClassVar

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import BaseModel, Field, PrivateAttr, ValidationError, field_validator

from ksearch.errors import ReplayExhaustedError, UserError
from ksearch.llm.traits import ModelTraits


class ReplayEntry(BaseModel):
    """One recorded reply."""

    reply: str
    """The model's text, served verbatim."""
    call_key: str | None = None
    """Served only to the call with this key (or in order once no keyed call claims it)."""
    input_tokens: int = 0
    """Reported as usage so token accounting of a replay matches the recording; 0 when unknown."""
    output_tokens: int = 0
    """As ``input_tokens``."""
    note: str | None = None
    """Free text for whoever edits a JSONL script; ignored."""


class ReplayChatModel(BaseChatModel):
    """Serves :class:`ReplayEntry` replies; raises :class:`ReplayExhaustedError` when none is left.

    Pass ``call_key=`` to ``invoke`` to pick the entry recorded for that call; without it, the next unused entry in
    order is served. Thread-safe, since LangGraph runs parallel branches in threads.
    """

    entries: list[ReplayEntry] = Field(default_factory=list)
    """The replies, in recording order. Plain strings are accepted and become unkeyed entries."""
    model_name: str = "replay"
    """Reported as the model's name in records."""
    llm_traits: ClassVar[ModelTraits] = ModelTraits(serves_recorded_replies=True)

    _used: set[int] = PrivateAttr(default_factory=set)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @field_validator("entries", mode="before")
    @classmethod
    def _strings_to_entries(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [ReplayEntry(reply=v) if isinstance(v, str) else v for v in value]
        return value

    @property
    def _llm_type(self) -> str:
        return "replay"

    @property
    def remaining(self) -> int:
        """How many entries have not been served yet."""
        with self._lock:
            return len(self.entries) - len(self._used)

    def _take(self, call_key: str | None) -> ReplayEntry:
        with self._lock:
            unused = [i for i in range(len(self.entries)) if i not in self._used]
            if call_key is None:
                chosen = unused[0] if unused else None
            else:
                # A keyed entry answers only its own call (a replay that diverges must not get another call's
                # reply); unkeyed entries fill in, in order.
                chosen = next((i for i in unused if self.entries[i].call_key == call_key), None)
                if chosen is None:
                    chosen = next((i for i in unused if self.entries[i].call_key is None), None)
            if chosen is None:
                left = (
                    f"all {len(self.entries)} recorded replies were used"
                    if not unused
                    else f"{len(unused)} of {len(self.entries)} recorded replies unused, none for this call"
                )
                raise ReplayExhaustedError(f"the recording has no reply for call {call_key or '(unkeyed)'} ({left})")
            self._used.add(chosen)
            return self.entries[chosen]

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        entry = self._take(kwargs.get("call_key"))
        self._on_served(messages, kwargs.get("call_key"))
        usage = {
            "input_tokens": entry.input_tokens,
            "output_tokens": entry.output_tokens,
            "total_tokens": entry.input_tokens + entry.output_tokens,
        }
        message = AIMessage(
            content=entry.reply, usage_metadata=usage, response_metadata={"model_name": self.model_name}
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _on_served(self, messages: list[BaseMessage], call_key: str | None) -> None:
        """Hook for subclasses that watch the conversation."""


class ScriptedChatModel(ReplayChatModel):
    """The test double: a :class:`ReplayChatModel` that also keeps what it was asked.

    ``prompts[i]`` is the text of the last message of call i (the user prompt), ``call_keys[i]`` its key, and
    ``messages[i]`` the full conversation.
    """

    model_name: str = "scripted"
    prompts: list[str] = Field(default_factory=list)
    call_keys: list[str | None] = Field(default_factory=list)
    messages: list[list[BaseMessage]] = Field(default_factory=list)

    def _on_served(self, messages: list[BaseMessage], call_key: str | None) -> None:
        with self._lock:  # parallel cycles: the three lists stay index-aligned
            self.prompts.append(str(messages[-1].text) if messages else "")
            self.call_keys.append(call_key)
            self.messages.append(list(messages))


def load_replay_entries(source: str) -> list[ReplayEntry]:
    """Read a JSONL script: one ``{"reply": ..., "call_key": ..., "note": ...}`` per line.

    Blank lines and lines starting with ``//`` are skipped, so hand-written scripts can carry comments.
    """
    path = Path(source)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        demo = path.name == "softmax-demo.jsonl"  # the README's demo, run where no checkout is (a wheel install)
        raise UserError(
            f"cannot read replay file {source}: {exc.strerror or exc}",
            hint="the offline demo's replies ship with ksearch: run `ksearch demo` (from any folder)"
            if demo
            else "pass a JSONL file of replies (replay:path/to/replies.jsonl) or a run id from `ksearch runs`",
        ) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        lineno = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise UserError(
            f"{source}:{lineno}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {column})",
            hint='a replay file holds JSON lines in UTF-8, one {"reply": ..., "call_key": ...} per line',
        ) from exc
    entries: list[ReplayEntry] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise UserError(f"{source}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
        if not isinstance(data, dict):
            raise UserError(f"{source}:{lineno}: expected a JSON object with a 'reply' key, got {type(data).__name__}")
        try:
            entries.append(ReplayEntry.model_validate(data))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}" for e in exc.errors())
            raise UserError(f"{source}:{lineno}: bad replay entry ({problems})") from exc
    return entries
