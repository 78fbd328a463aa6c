"""The one way nodes talk to a model: idempotent by call key, budgeted, retried, recorded, and JSON-repairing.

Graph nodes re-run after a resume (at-least-once), so every call carries a ``call_key`` and a recorded call is
returned instead of paid for twice. Structured output is asked for as plain text and validated here, not through
``with_structured_output``, so that every failed attempt keeps its raw reply and token counts (langgraph-notes,
finding 8), and so that it works the same with every provider.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, overload

import structlog
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel

from ksearch.errors import BudgetExceededError, KsearchError, ModelReplyError, ProviderError
from ksearch.llm.interactive import INTERACTIVE_MODEL, Prompt, ReplyFormat, ask
from ksearch.llm.parsing import json_reply_format, parse_json_reply, repair_prompt
from ksearch.llm.provider_errors import (
    is_malformed_response,
    is_model_error,
    is_transient,
    permanent_error,
    retry_after_s,
    status_code,
)
from ksearch.llm.recorder import CallRecorder
from ksearch.llm.traits import traits_of
from ksearch.llm.usage import Budget, RecordedCall, Usage

M = TypeVar("M", bound=BaseModel)

log = structlog.get_logger(__name__)

CallNotice = Callable[[str, dict[str, Any]], None]
"""Receives ``("llm_request", fields)`` before a provider's model is asked and ``("llm_retry", fields)`` after each
failed try that is retried, so that whoever drives the run can say what it waits for (``ksearch.cli.progress``)."""


def endpoint_of(model: BaseChatModel) -> str | None:
    """The URL a provider's model sends its requests to, when the integration exposes it (OpenAI-compatible ones do)."""
    for attr in ("openai_api_base", "base_url", "api_base"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


def error_chain(exc: BaseException) -> str:
    """``exc`` with the causes under it, each new message once: 'APIConnectionError: Connection error. (caused by
    ConnectError: [Errno 111] Connection refused)'. An SDK's own message often hides the cause ("Connection error.")."""
    seen = {_first_line(exc)}
    causes = []
    inner = exc.__cause__ or exc.__context__
    while inner is not None and len(causes) < 4:
        if _first_line(inner) and _first_line(inner) not in seen:
            seen.add(_first_line(inner))
            causes.append(f"{type(inner).__name__}: {_first_line(inner)}")
        inner = inner.__cause__ or inner.__context__
    text = f"{type(exc).__name__}: {_first_line(exc)}"
    return text + (f" (caused by {'; '.join(causes)})" if causes else "")


def _first_line(exc: BaseException) -> str:
    """An exception's message on one line (an HTTP client's adds a second, a link to read about the status)."""
    lines = str(exc).strip().splitlines()
    return lines[0].strip() if lines else ""


def _model_name(model: BaseChatModel) -> str:
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


class LLMClient:
    """Calls a chat model on behalf of graph nodes.

    ``usage_so_far`` returns what the run has spent (the run store sums its calls); by default the client's own
    tally of calls made through it is used.
    """

    def __init__(
        self,
        model: BaseChatModel,
        recorder: CallRecorder,
        budget: Budget | None = None,
        usage_so_far: Callable[[], Usage] | None = None,
        *,
        model_name: str | None = None,
        max_attempts: int = 5,
        base_delay_s: float = 1.0,
        max_delay_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        endpoint: str | None = None,
        on_notice: CallNotice | None = None,
    ) -> None:
        self.model = model
        self.endpoint = endpoint or endpoint_of(model)
        """Where requests go (``--base-url``, or the integration's own URL), named in retries and failures."""
        self.on_notice = on_notice
        self.recorder = recorder
        self.budget = budget or Budget()
        self.model_name = model_name or _model_name(model)
        self.max_attempts = max(1, max_attempts)
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self.usage = Usage()
        """Calls paid for through this client (cached hits excluded)."""
        self._usage_so_far = usage_so_far or (lambda: self.usage)
        self._sleep = sleep
        self._lock = threading.Lock()

    # -- plain text ----------------------------------------------------------------------------------------------

    def complete(
        self,
        role: str,
        call_key: str,
        prompt: str,
        *,
        system: str | None = None,
        reply_format: ReplyFormat | None = None,
    ) -> RecordedCall:
        """The reply to ``prompt``; a call already recorded under ``call_key`` is returned without a request.

        ``reply_format`` tells a person answering an interactive run what the caller will parse (plain text if None).
        """
        found = self.recorder.find(call_key)
        if found is not None:
            return found
        call = self._request(role, call_key, prompt, system=system, attempt=0, reply_format=reply_format)
        self._record(call)
        return call

    # -- JSON ------------------------------------------------------------------------------------------------------

    @overload
    def complete_json(
        self,
        role: str,
        call_key: str,
        prompt: str,
        model_cls: type[M],
        validate: Callable[[dict[str, Any]], list[str]] | None = None,
        max_repairs: int = 2,
        *,
        system: str | None = None,
    ) -> tuple[M, list[RecordedCall]]: ...

    @overload
    def complete_json(
        self,
        role: str,
        call_key: str,
        prompt: str,
        model_cls: None = None,
        validate: Callable[[dict[str, Any]], list[str]] | None = None,
        max_repairs: int = 2,
        *,
        system: str | None = None,
    ) -> tuple[dict[str, Any], list[RecordedCall]]: ...

    def complete_json(
        self,
        role: str,
        call_key: str,
        prompt: str,
        model_cls: type[BaseModel] | None = None,
        validate: Callable[[dict[str, Any]], list[str]] | None = None,
        max_repairs: int = 2,
        *,
        system: str | None = None,
    ) -> tuple[Any, list[RecordedCall]]:
        """Ask for a JSON object, validate it, and re-ask with the errors up to ``max_repairs`` times.

        Returns the parsed value (a ``model_cls`` instance, or the dict) and every call made, failed ones included.
        Raises :class:`ModelReplyError` (with ``.calls`` set) when no attempt gives a usable object.
        """
        calls: list[RecordedCall] = []
        current_prompt = prompt
        reply_format = json_reply_format(model_cls)
        for k in range(max_repairs + 1):
            key = call_key if k == 0 else f"{call_key}#repair{k}"
            call = self.recorder.find(key)
            if call is None:
                call = self._request(role, key, current_prompt, system=system, attempt=k, reply_format=reply_format)
                parsed, errors = parse_json_reply(call.reply, model_cls, validate)
                call.error = "\n".join(errors) if errors else None
                self._record(call)
            else:  # resumed: re-parse the stored reply, which gives the same verdict as before
                parsed, errors = parse_json_reply(call.reply, model_cls, validate)
                if errors and call.error is None:  # a person's reply, recorded by `respond` before it was parsed
                    call.error = "\n".join(errors)
                    self.recorder.note_error(key, call.error)
            calls.append(call)
            if not errors:
                return parsed, calls
            current_prompt = repair_prompt(prompt, call.reply, errors)
        error = ModelReplyError(
            f"the {role} reply for {call_key} was still unusable after {len(calls)} attempts: {calls[-1].error}",
            attempts=len(calls),
            last_reply=calls[-1].reply,
        )
        error.calls = calls  # type: ignore[attr-defined]
        raise error

    # -- internals -----------------------------------------------------------------------------------------------

    def _record(self, call: RecordedCall) -> None:
        self.recorder.record(call)
        with self._lock:
            self.usage.add(call)

    def budget_exceeded(self) -> str | None:
        """The first budget limit the run's usage has reached, as a sentence, or None."""
        return self.budget.exceeded(self._usage_so_far())

    def _check_budget(self) -> None:
        reason = self.budget_exceeded()
        if reason is not None:
            raise BudgetExceededError(f"not calling the model: {reason}")

    def _request(
        self,
        role: str,
        call_key: str,
        prompt: str,
        *,
        system: str | None,
        attempt: int,
        reply_format: ReplyFormat | None = None,
    ) -> RecordedCall:
        """One logical request with retries on transient errors; the result is not yet recorded."""
        self._check_budget()
        traits = traits_of(self.model)
        if traits.answered_by_person:
            return self._ask_person(role, call_key, prompt, system=system, attempt=attempt, reply_format=reply_format)
        messages: list[BaseMessage] = [SystemMessage(system)] if system else []
        messages.append(HumanMessage(prompt))
        replayed = traits.serves_recorded_replies
        kwargs: dict[str, Any] = {"call_key": call_key} if replayed else {}
        last_error: Exception | None = None
        where = {"role": role, "call_key": call_key, "model": self.model_name, "endpoint": self.endpoint}
        for retry in range(self.max_attempts):
            if retry:
                delay = self._delay(retry, last_error)
                self._retrying(where, retry, delay, last_error)
                self._sleep(delay)
            if not replayed:
                self._notice("llm_request", {**where, "try": retry + 1, "max_attempts": self.max_attempts})
            started = time.monotonic()
            try:
                message = self.model.invoke(messages, **kwargs)
            except KsearchError:
                raise
            except Exception as exc:
                if is_transient(exc) or is_malformed_response(exc):
                    last_error = exc
                    continue
                if status_code(exc) is None and not is_model_error(exc):
                    if replayed:
                        raise  # our own replay model failed: a bug that must show its traceback
                    raise ProviderError(  # the integration could not make sense of what the server sent
                        f"the response of {self.model_name} could not be read ({type(exc).__name__}: {exc})",
                        hint="check that --base-url points at an OpenAI-compatible /v1 endpoint",
                    ) from exc
                raise permanent_error(exc, self.model_name) from exc
            latency = time.monotonic() - started
            usage = getattr(message, "usage_metadata", None) or {}
            input_tokens = int(usage.get("input_tokens", 0) or 0)
            output_tokens = int(usage.get("output_tokens", 0) or 0)
            return RecordedCall(
                call_key=call_key,
                role=role,
                model=self.model_name,
                prompt=prompt,
                reply=str(message.text),
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cost_usd=0.0 if replayed else self.budget.cost_usd(input_tokens, output_tokens),
                latency_s=latency,
                attempt=attempt,
                retries=retry,
                replayed=replayed,
            )
        assert last_error is not None
        at = f" at {self.endpoint}" if self.endpoint else ""
        log.warning("llm.failed", **where, tries=self.max_attempts, error=error_chain(last_error))
        raise ProviderError(
            f"{self.model_name}{at} failed {self.max_attempts} times for {call_key}; "
            f"last error: {error_chain(last_error)}"
        ) from last_error

    def _ask_person(
        self,
        role: str,
        call_key: str,
        prompt: str,
        *,
        system: str | None,
        attempt: int,
        reply_format: ReplyFormat | None,
    ) -> RecordedCall:
        """Pause the graph until someone answers (see ``ksearch.llm.interactive``).

        Reached only when no reply is recorded under ``call_key``: ``ksearch respond`` records the reply before it
        resumes, so this returns the resume value only for a client that resumes the graph with the answer itself.
        A person's reply costs no model tokens: it is recorded with 0 tokens and no cost.
        """
        asked = Prompt(
            key=call_key,
            role=role,
            attempt=attempt,
            system=system,
            prompt=prompt,
            reply_format=reply_format or ReplyFormat(kind="text", description="plain text"),
        )
        started = time.time()
        reply = ask(asked)
        return RecordedCall(
            call_key=call_key,
            role=role,
            model=INTERACTIVE_MODEL,
            prompt=prompt,
            reply=reply,
            latency_s=time.time() - started,
            attempt=attempt,
            cost_usd=0.0,
        )

    def _retrying(self, where: dict[str, Any], retry: int, delay: float, error: Exception | None) -> None:
        """A failed try that is tried again: in the workspace log, and to whoever drives the run."""
        fields = {
            **where,
            "try": retry,
            "max_attempts": self.max_attempts,
            "delay_s": round(delay, 2),
            "error": error_chain(error) if error is not None else "",
        }
        log.warning("llm.retry", **fields)
        self._notice("llm_retry", fields)

    def _notice(self, event: str, fields: dict[str, Any]) -> None:
        if self.on_notice is not None:
            self.on_notice(event, fields)

    def _delay(self, retry: int, error: Exception | None) -> float:
        """Exponential back-off with jitter (so parallel branches spread out), at least Retry-After, capped."""
        delay = random.uniform(0.5, 1.0) * self.base_delay_s * 2 ** (retry - 1)
        retry_after = retry_after_s(error) if error is not None else None
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.max_delay_s)
