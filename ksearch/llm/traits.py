"""What the client needs to know about a chat model beyond LangChain's interface, declared by the model itself.

A provider's model declares nothing and gets the defaults; ksearch's own stand-ins (the replay model, the
interactive model) carry an ``llm_traits`` class attribute, so the client reads a declaration instead of testing
for their types.
"""

from __future__ import annotations

from dataclasses import dataclass

from langchain_core.language_models import BaseChatModel


@dataclass(frozen=True)
class ModelTraits:
    """How the client treats a model's calls."""

    answered_by_person: bool = False
    """A person answers: the client pauses the graph (``interrupt``) instead of invoking the model."""
    serves_recorded_replies: bool = False
    """Recorded replies are served: the model is invoked with the ``call_key`` it matches replies by, its calls cost
    nothing and are marked replayed, and a failure of its own is a bug that keeps its traceback."""


PROVIDER_TRAITS = ModelTraits()
"""A provider's model: invoked, priced, and its failures classified as the provider's."""


def traits_of(model: BaseChatModel) -> ModelTraits:
    """The traits ``model`` declares in ``llm_traits``, or a provider's when it declares none."""
    declared = getattr(model, "llm_traits", None)
    return declared if isinstance(declared, ModelTraits) else PROVIDER_TRAITS
