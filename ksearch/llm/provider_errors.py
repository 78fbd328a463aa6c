"""What a provider's failure means: worth retrying (rate limit, timeout, 5xx, a cut-off body), or a permanent error
that says whose fault it is (credentials, an unknown model, a prompt over the context window)."""

from __future__ import annotations

from functools import cache

from ksearch.errors import KsearchError, ProviderError, UserError

_TRANSIENT_STATUS = {408, 409, 425, 429}


@cache
def _transient_exception_types() -> tuple[type[BaseException], ...]:
    """The SDKs' transient errors, imported at the first failure to classify: a run whose model needs no SDK (a
    replay, the demo) never imports openai (0.4 s of every ``ksearch run``'s start)."""
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


try:  # langchain-core >= 1.7: provider-agnostic errors that integrations raise alongside their SDK's own
    from langchain_core.exceptions import ContextOverflowError as _ContextOverflowError
    from langchain_core.exceptions import ModelError as _ModelError
except ImportError:  # older core: fall back to SDK types and HTTP status codes
    _ModelError = None  # type: ignore[assignment,misc]
    _ContextOverflowError = None  # type: ignore[assignment,misc]


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of a provider's exception, when it carries one."""
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def is_model_error(exc: BaseException) -> bool:
    """One of langchain-core's provider-agnostic model errors (always False on a core too old to have them)."""
    return _ModelError is not None and isinstance(exc, _ModelError)


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: rate limits, timeouts, dropped connections, 5xx. Never 400/401/403/404."""
    if _ModelError is not None and isinstance(exc, _ModelError):
        return bool(exc.is_retryable)
    if isinstance(exc, _transient_exception_types()):
        return True
    status = status_code(exc)
    return status is not None and (status in _TRANSIENT_STATUS or status >= 500)


def is_malformed_response(exc: BaseException) -> bool:
    """The server answered 2xx but the body is not a chat completion (cut off, not JSON): a proxy or server glitch,
    retried like a transient error."""
    status = status_code(exc)
    return status is not None and 200 <= status < 300


def retry_after_s(exc: BaseException) -> float | None:
    """The server's Retry-After header in seconds, when it sent one."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    try:
        return float(headers.get("retry-after"))
    except (TypeError, ValueError):
        return None


def permanent_error(exc: Exception, model: str) -> KsearchError:
    """Map a non-retryable provider failure to an error that says whose fault it is."""
    status = status_code(exc)
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
