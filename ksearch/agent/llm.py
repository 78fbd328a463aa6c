"""The one way nodes talk to a model: idempotent by call key, budgeted, retried, recorded, and JSON-repairing.

Graph nodes re-run after a resume (at-least-once), so every call carries a ``call_key`` and a recorded call is
returned instead of paid for twice. Structured output is asked for as plain text and validated here, not through
``with_structured_output``, so that every failed attempt keeps its raw reply and token counts (langgraph-notes,
finding 8), and so that it works the same with every provider.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, overload

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field, ValidationError

from ksearch.agent.interactive import INTERACTIVE_MODEL, InteractiveChatModel, Prompt, ReplyFormat, ask
from ksearch.agent.replay import ReplayChatModel
from ksearch.errors import BudgetExceededError, KsearchError, ModelReplyError, ProviderError, UserError

M = TypeVar("M", bound=BaseModel)

# --------------------------------------------------------------------------------------------------------------------
# Records and usage


class RecordedCall(BaseModel):
    """One model call as stored: enough to account for it, audit it and replay it."""

    call_key: str
    """Unique per logical call in a run; the idempotency key."""
    role: str
    """Who asked: "planner", "coder", ..."""
    model: str
    """The model's configured name."""
    prompt: str
    """The user prompt sent (a system prompt, if any, is not part of it)."""
    reply: str
    """The model's text."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    """From the budget's prices; None when no prices are configured."""
    latency_s: float = 0.0
    """Wall time of the successful request (retries and back-off excluded)."""
    attempt: int = 0
    """0 for a first ask, k for the k-th JSON repair of it."""
    retries: int = 0
    """Transient failures (429, 5xx, timeouts) before the request that succeeded."""
    error: str | None = None
    """Why the reply could not be used (JSON / validation problems), None when it was fine."""
    replayed: bool = False
    """Served by a replay model rather than a provider."""


class RoleUsage(BaseModel):
    """Totals for one role, or for all of them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def _add(self, call: RecordedCall) -> None:
        self.input_tokens += call.input_tokens
        self.output_tokens += call.output_tokens
        self.cost_usd += call.cost_usd or 0.0
        self.calls += 1


class Usage(RoleUsage):
    """What a run has spent so far, in total and per role; compared against a :class:`Budget`."""

    per_role: dict[str, RoleUsage] = Field(default_factory=dict)

    def add(self, call: RecordedCall) -> None:
        """Count one call (in place)."""
        self._add(call)
        self.per_role.setdefault(call.role, RoleUsage())._add(call)


class Budget(BaseModel):
    """Limits checked before every call, and the prices that turn tokens into money. All optional."""

    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    price_input_per_mtok: float | None = None
    """USD per million input tokens."""
    price_output_per_mtok: float | None = None
    """USD per million output tokens."""

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float | None:
        """The price of a call, or None when no price is set."""
        if self.price_input_per_mtok is None and self.price_output_per_mtok is None:
            return None
        return (
            input_tokens * (self.price_input_per_mtok or 0.0) + output_tokens * (self.price_output_per_mtok or 0.0)
        ) / 1_000_000

    def exceeded(self, used: Usage) -> str | None:
        """The first limit that ``used`` has reached, as a sentence, or None."""
        checks: list[tuple[str, float | None, float]] = [
            ("input tokens", self.max_input_tokens, used.input_tokens),
            ("output tokens", self.max_output_tokens, used.output_tokens),
            ("total tokens", self.max_total_tokens, used.total_tokens),
            ("cost in USD", self.max_cost_usd, used.cost_usd),
        ]
        for what, limit, value in checks:
            if limit is not None and value >= limit:
                return f"{what} used ({value:g}) reached the budget of {limit:g}"
        return None


class CallRecorder(Protocol):
    """Where calls are stored; the run store implements it on SQLite."""

    def find(self, call_key: str) -> RecordedCall | None: ...

    def record(self, call: RecordedCall) -> None: ...

    def note_error(self, call_key: str, error: str) -> None:
        """Set the error of a call recorded without one (a person's reply, validated when the graph reads it)."""
        ...


class MemoryRecorder:
    """A :class:`CallRecorder` in a dict, for tests and throw-away runs."""

    def __init__(self) -> None:
        self.calls: dict[str, RecordedCall] = {}
        self._lock = threading.Lock()

    def find(self, call_key: str) -> RecordedCall | None:
        with self._lock:
            return self.calls.get(call_key)

    def record(self, call: RecordedCall) -> None:
        with self._lock:
            self.calls[call.call_key] = call

    def note_error(self, call_key: str, error: str) -> None:
        with self._lock:
            call = self.calls.get(call_key)
            if call is not None and call.error is None:
                call.error = error

    def usage(self) -> Usage:
        """Totals over everything recorded."""
        with self._lock:
            total = Usage()
            for call in self.calls.values():
                total.add(call)
            return total


# --------------------------------------------------------------------------------------------------------------------
# Errors from providers

_TRANSIENT_STATUS = {408, 409, 425, 429}


def _transient_exception_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = []
    try:
        import openai

        types += [openai.RateLimitError, openai.APITimeoutError, openai.APIConnectionError, openai.InternalServerError]
    except ImportError:
        pass
    for name in ("httpx", "httpx2"):  # openai >= 3 ships on httpx2; other SDKs still use httpx
        try:
            module = __import__(name)
        except ImportError:
            continue
        types += [module.TimeoutException, module.NetworkError, module.RemoteProtocolError]
    return tuple(types)


_TRANSIENT_TYPES = _transient_exception_types()

try:  # langchain-core >= 1.7: provider-agnostic errors that integrations raise alongside their SDK's own
    from langchain_core.exceptions import ContextOverflowError as _ContextOverflowError
    from langchain_core.exceptions import ModelError as _ModelError
except ImportError:  # older core: fall back to SDK types and HTTP status codes
    _ModelError = None  # type: ignore[assignment,misc]
    _ContextOverflowError = None  # type: ignore[assignment,misc]


def _status_code(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: rate limits, timeouts, dropped connections, 5xx. Never 400/401/403/404."""
    if _ModelError is not None and isinstance(exc, _ModelError):
        return bool(exc.is_retryable)
    if isinstance(exc, _TRANSIENT_TYPES):
        return True
    status = _status_code(exc)
    return status is not None and (status in _TRANSIENT_STATUS or status >= 500)


def is_malformed_response(exc: BaseException) -> bool:
    """The server answered 2xx but the body is not a chat completion (cut off, not JSON): a proxy or server glitch,
    retried like a transient error."""
    status = _status_code(exc)
    return status is not None and 200 <= status < 300


def _retry_after_s(exc: BaseException) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    try:
        return float(headers.get("retry-after"))
    except (TypeError, ValueError):
        return None


def _permanent_error(exc: Exception, model: str) -> KsearchError:
    """Map a non-retryable provider failure to an error that says whose fault it is."""
    status = _status_code(exc)
    if _ContextOverflowError is not None and isinstance(exc, _ContextOverflowError):
        return ProviderError(f"the prompt is longer than {model}'s context window: {exc}")
    if status in (401, 403):
        return UserError(
            f"the provider rejected the credentials for {model} (HTTP {status}): {exc}",
            hint="check the API key in the environment, or the --base-url",
        )
    if status == 404:
        return UserError(
            f"the provider does not know model {model} or the endpoint (HTTP 404): {exc}",
            hint="check the model name and --base-url",
        )
    where = f" (HTTP {status})" if status is not None else ""
    return ProviderError(f"the provider refused the request for {model}{where}: {exc}")


# --------------------------------------------------------------------------------------------------------------------
# JSON extraction

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


def extract_json_object(text: str) -> dict[str, Any]:
    """The first balanced ``{...}`` in ``text`` that parses as JSON, fenced or not.

    Reasoning blocks (``<think>...</think>``) are skipped, since local reasoning models put braces in them.
    Raises ValueError with a reason that can be shown to the model in a repair prompt.
    """
    body = _THINK_BLOCK.sub("", text)
    start = body.find("{")
    if start < 0:
        raise ValueError("the reply contains no JSON object (no '{' found)")
    first_error: str | None = None
    while start >= 0:
        end = _matching_brace(body, start)
        if end is None:
            first_error = first_error or (
                f"the JSON object starting at character {start} is never closed (reply cut off, or unbalanced braces)"
            )
            break
        candidate = body[start : end + 1]
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError as exc:
            first_error = first_error or f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        else:
            if isinstance(value, dict):
                return value
        start = body.find("{", end + 1)  # top-level objects only: never hand back a fragment of a broken one
    raise ValueError(first_error or "the reply contains no valid JSON object")


def _matching_brace(text: str, start: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``start``, skipping braces inside JSON strings."""
    depth = 0
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _validation_messages(exc: ValidationError) -> list[str]:
    return [f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors()]


REPAIR_TEMPLATE = """{prompt}

## Your previous reply

{reply}

## Problems with your previous reply

{errors}

Reply again with one corrected JSON object only, fixing every problem listed above. No prose around it."""
"""Instructor-style re-ask: the original task, what the model said, and why it was refused."""


def repair_prompt(prompt: str, reply: str, errors: list[str]) -> str:
    """The prompt for a repair attempt."""
    return REPAIR_TEMPLATE.format(prompt=prompt, reply=reply, errors="\n".join(f"- {e}" for e in errors))


# --------------------------------------------------------------------------------------------------------------------
# The client


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
    ) -> None:
        self.model = model
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
                parsed, errors = _parse_reply(call.reply, model_cls, validate)
                call.error = "\n".join(errors) if errors else None
                self._record(call)
            else:  # resumed: re-parse the stored reply, which gives the same verdict as before
                parsed, errors = _parse_reply(call.reply, model_cls, validate)
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
        if isinstance(self.model, InteractiveChatModel):
            return self._ask_person(role, call_key, prompt, system=system, attempt=attempt, reply_format=reply_format)
        messages: list[BaseMessage] = [SystemMessage(system)] if system else []
        messages.append(HumanMessage(prompt))
        replayed = isinstance(self.model, ReplayChatModel)
        kwargs: dict[str, Any] = {"call_key": call_key} if replayed else {}
        last_error: Exception | None = None
        for retry in range(self.max_attempts):
            if retry:
                self._sleep(self._delay(retry, last_error))
            started = time.monotonic()
            try:
                message = self.model.invoke(messages, **kwargs)
            except KsearchError:
                raise
            except Exception as exc:
                if is_transient(exc) or is_malformed_response(exc):
                    last_error = exc
                    continue
                if _status_code(exc) is None and not (_ModelError and isinstance(exc, _ModelError)):
                    if replayed:
                        raise  # our own replay model failed: a bug that must show its traceback
                    raise ProviderError(  # the integration could not make sense of what the server sent
                        f"the response of {self.model_name} could not be read ({type(exc).__name__}: {exc})",
                        hint="check that --base-url points at an OpenAI-compatible /v1 endpoint",
                    ) from exc
                raise _permanent_error(exc, self.model_name) from exc
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
        raise ProviderError(
            f"{self.model_name} failed {self.max_attempts} times for {call_key}; last error: "
            f"{type(last_error).__name__}: {last_error}"
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
        """Pause the graph until someone answers (see ``ksearch.agent.interactive``).

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

    def _delay(self, retry: int, error: Exception | None) -> float:
        """Exponential back-off with jitter (so parallel branches spread out), at least Retry-After, capped."""
        delay = random.uniform(0.5, 1.0) * self.base_delay_s * 2 ** (retry - 1)
        retry_after = _retry_after_s(error) if error is not None else None
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.max_delay_s)


def json_reply_format(model_cls: type[BaseModel] | None) -> ReplyFormat:
    """The reply format of a JSON call, with the object's JSON schema when it is typed."""
    return ReplyFormat(
        kind="json",
        description="ONE JSON object and nothing else (no prose around it)"
        + (f", matching the JSON schema of {model_cls.__name__}" if model_cls is not None else ""),
        json_schema=model_cls.model_json_schema() if model_cls is not None else None,
    )


def _parse_reply(
    reply: str,
    model_cls: type[BaseModel] | None,
    validate: Callable[[dict[str, Any]], list[str]] | None,
) -> tuple[Any, list[str]]:
    """(parsed value, problems); problems empty means usable."""
    try:
        data = extract_json_object(reply)
    except ValueError as exc:
        return None, [str(exc)]
    parsed: Any = data
    if model_cls is not None:
        try:
            parsed = model_cls.model_validate(data)
        except ValidationError as exc:
            return None, _validation_messages(exc)
    if validate is not None:
        errors = list(validate(data))
        if errors:
            return None, errors
    return parsed, []
