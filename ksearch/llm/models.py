"""Model construction: the chat model a run's settings name, a provider's, the replay of recorded replies, or the
interactive stand-in for a person."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from langchain_core.language_models import BaseChatModel

from ksearch.errors import RunNotFoundError, UserError
from ksearch.llm.interactive import INTERACTIVE_MODEL, InteractiveChatModel
from ksearch.llm.providers import make_chat_model
from ksearch.llm.replay import ReplayChatModel, ReplayEntry, load_replay_entries
from ksearch.store import Store


class ModelSettings(Protocol):
    """The model settings of a run's config (``RunConfig`` has them): all :func:`build_model` reads of it."""

    @property
    def model(self) -> str: ...

    @property
    def base_url(self) -> str | None: ...

    @property
    def temperature(self) -> float | None: ...

    @property
    def llm_timeout_s(self) -> float: ...


def build_model(config: ModelSettings, store: Store) -> BaseChatModel:
    """A LangChain chat model for the config; ``replay:`` takes a JSONL file or a recorded run id; ``interactive``
    stands for a person (the LLM layer pauses the graph instead of calling it)."""
    if config.model == INTERACTIVE_MODEL:
        return InteractiveChatModel()
    if config.model.startswith("replay:"):
        source = config.model.removeprefix("replay:")
        if Path(source).is_file() or source.endswith((".jsonl", ".json")) or "/" in source:
            entries = load_replay_entries(source)
        else:
            try:
                recorded = store.get_run(source)["id"]
            except RunNotFoundError as exc:
                raise UserError(
                    f"replay:{source} names neither a replies file nor a run in this workspace",
                    hint="pass a JSONL file of replies (replay:path/to/replies.jsonl) or a run id from `ksearch runs`",
                ) from exc
            calls = store.list_llm_calls(recorded)
            if not calls:
                raise UserError(f"run {recorded} has no recorded LLM calls to replay")
            entries = [
                ReplayEntry(
                    reply=c["reply"],
                    call_key=c["call_key"],
                    input_tokens=c["input_tokens"] or 0,
                    output_tokens=c["output_tokens"] or 0,
                )
                for c in calls
            ]
        return ReplayChatModel(entries=entries, model_name=config.model)
    return make_chat_model(
        config.model, base_url=config.base_url, temperature=config.temperature, timeout_s=config.llm_timeout_s
    )
