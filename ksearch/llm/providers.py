"""Build a LangChain chat model from a ``provider:model`` spec, with errors a user can act on.

LangChain's ``init_chat_model`` does the real work; this module adds what it does not: a check for the API key
before any request (named env var, not an SDK stack trace), a dummy key for local OpenAI-compatible servers, and
``pip install`` hints as :class:`~ksearch.errors.UserError` instead of ``ImportError``.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
from typing import Any
from urllib.parse import urlparse

from langchain_core.language_models import BaseChatModel

from ksearch.errors import MissingApiKeyError, UserError

SPEC_EXAMPLE = "openai:gpt-5.2"
"""Shown in error messages about a malformed spec."""

LOCAL_SERVER_API_KEY = "EMPTY"
"""Key sent to loopback servers (vLLM, SGLang, Ollama), which ignore it but whose clients insist on one."""

PROVIDER_ALIASES: dict[str, str] = {
    "google": "google_genai",
    "gemini": "google_genai",
    "mistral": "mistralai",
    "vertexai": "google_vertexai",
}
"""Short names people type, mapped to LangChain's provider keys."""

PROVIDER_API_KEY_ENV: dict[str, str] = {
    "openai": "OPENAI_API_KEY",
    "azure_openai": "AZURE_OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "google_genai": "GOOGLE_API_KEY",
    "mistralai": "MISTRAL_API_KEY",
    "groq": "GROQ_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "xai": "XAI_API_KEY",
    "together": "TOGETHER_API_KEY",
    "fireworks": "FIREWORKS_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "cohere": "COHERE_API_KEY",
    "perplexity": "PPLX_API_KEY",
}
"""Env var each keyed provider reads. Providers not listed (ollama, bedrock, vertex) authenticate otherwise."""

PROVIDER_MODULE: dict[str, str] = {
    "openai": "langchain_openai",
    "azure_openai": "langchain_openai",
    "anthropic": "langchain_anthropic",
    "google_genai": "langchain_google_genai",
    "google_vertexai": "langchain_google_vertexai",
    "mistralai": "langchain_mistralai",
    "ollama": "langchain_ollama",
    "groq": "langchain_groq",
    "deepseek": "langchain_deepseek",
    "xai": "langchain_xai",
    "together": "langchain_together",
    "fireworks": "langchain_fireworks",
    "openrouter": "langchain_openrouter",
    "cohere": "langchain_cohere",
    "perplexity": "langchain_perplexity",
    "bedrock": "langchain_aws",
    "bedrock_converse": "langchain_aws",
}
"""Integration module per provider, checked before the key so a missing package is reported first."""

_NO_TIMEOUT_KWARGS = {"ollama"}
"""Providers whose chat class has no ``timeout`` / ``max_retries`` fields."""


def parse_spec(spec: str) -> tuple[str, str]:
    """Split ``provider:model`` into (LangChain provider key, model name); the model may itself contain colons."""
    provider, sep, model = spec.partition(":")
    provider = provider.strip().lower().replace("-", "_")
    model = model.strip()
    if not sep or not provider or not model:
        raise UserError(
            f"model spec {spec!r} is not of the form provider:model",
            hint=f"for example --model {SPEC_EXAMPLE}, or --model openai:<name> --base-url http://localhost:8000/v1",
        )
    return PROVIDER_ALIASES.get(provider, provider), model


def pip_package(provider: str) -> str:
    """The distribution that provides ``provider``'s chat model, e.g. ``langchain-anthropic``."""
    module = PROVIDER_MODULE.get(provider, f"langchain_{provider}")
    return module.replace("_", "-")


def is_loopback_url(url: str) -> bool:
    """True for localhost / 127.x / ::1 URLs: only those get a dummy key, so a real endpoint never silently lacks
    one."""
    host = urlparse(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_package(provider: str) -> None:
    module = PROVIDER_MODULE.get(provider)
    if module is not None and importlib.util.find_spec(module) is None:
        raise UserError(
            f"provider {provider!r} needs the {pip_package(provider)} package, which is not installed",
            hint=f"run: pip install {pip_package(provider)}",
        )


def _api_key_kwargs(provider: str, base_url: str | None) -> dict[str, Any]:
    """Extra kwargs for the key: none when the env var is set, ``api_key='EMPTY'`` for a loopback server."""
    env_var = PROVIDER_API_KEY_ENV.get(provider)
    if env_var is None or os.environ.get(env_var):
        return {}
    if base_url is not None and is_loopback_url(base_url):
        return {"api_key": LOCAL_SERVER_API_KEY}
    raise MissingApiKeyError(
        f"provider {provider!r} needs an API key in {env_var}, which is not set",
        hint=f"export {env_var}=..., or pass --base-url for a local OpenAI-compatible server",
    )


def make_chat_model(
    spec: str,
    *,
    base_url: str | None = None,
    temperature: float | None = None,
    timeout_s: float = 600,
    max_retries: int = 0,
) -> BaseChatModel:
    """Build the chat model for ``spec``. ``max_retries`` defaults to 0 because :class:`LLMClient` retries itself."""
    if spec.startswith("replay:"):
        from ksearch.llm.replay import ReplayChatModel, load_replay_entries

        return ReplayChatModel(entries=load_replay_entries(spec.removeprefix("replay:")))
    provider, model = parse_spec(spec)
    _check_package(provider)
    kwargs: dict[str, Any] = _api_key_kwargs(provider, base_url)
    if base_url is not None:
        kwargs["base_url"] = base_url
    if temperature is not None:
        kwargs["temperature"] = temperature
    if provider not in _NO_TIMEOUT_KWARGS:
        kwargs["timeout"] = timeout_s
        kwargs["max_retries"] = max_retries

    from langchain.chat_models import init_chat_model

    try:
        return init_chat_model(model, model_provider=provider, **kwargs)
    except ImportError as exc:
        raise UserError(
            f"provider {provider!r} needs the {pip_package(provider)} package: {exc}",
            hint=f"run: pip install {pip_package(provider)}",
        ) from exc
    except ValueError as exc:
        if "provider" in str(exc).lower():
            raise UserError(
                f"unknown model provider {provider!r} in {spec!r}",
                hint=f"use a LangChain provider key, for example {SPEC_EXAMPLE}, anthropic:<model>, ollama:<model>",
            ) from exc
        raise UserError(f"cannot build model {spec!r}: {exc}") from exc
