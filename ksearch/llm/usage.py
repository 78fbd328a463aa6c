"""What a model call costs: the record of one call, usage totals per role, and the budget they are checked against."""

from __future__ import annotations

from pydantic import BaseModel, Field


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
