"""The LLM budget (``ksearch.llm.usage.Budget`` and the usage it is checked against) at each limit's edge: a limit
is reached when usage equals it, each limit is checked against its own counter, the first one reached is named, and
prices are per million tokens of each kind."""

from __future__ import annotations

import pytest

from ksearch.errors import BudgetExceededError
from ksearch.llm.client import LLMClient
from ksearch.llm.recorder import MemoryRecorder
from ksearch.llm.replay import ScriptedChatModel
from ksearch.llm.usage import Budget, RecordedCall, Usage

BIG = 10**6


@pytest.mark.parametrize(
    ("limit", "used", "unrelated", "what"),
    [
        (
            "max_input_tokens",
            {"input_tokens": 100},
            {"output_tokens": BIG, "cost_usd": BIG},
            "input tokens used (100) reached the budget of 100",
        ),
        (
            "max_output_tokens",
            {"output_tokens": 100},
            {"input_tokens": BIG, "cost_usd": BIG},
            "output tokens used (100) reached the budget of 100",
        ),
        (
            "max_total_tokens",
            {"input_tokens": 60, "output_tokens": 40},
            {"cost_usd": BIG},
            "total tokens used (100) reached the budget of 100",
        ),
        (
            "max_cost_usd",
            {"cost_usd": 100.0},
            {"input_tokens": BIG, "output_tokens": BIG},
            "cost in USD used (100) reached the budget of 100",
        ),
    ],
)
def test_each_limit_is_reached_at_equality_against_its_own_counter(limit, used, unrelated, what) -> None:
    budget = Budget(**{limit: 100})
    assert budget.exceeded(Usage(**used)) == what
    assert budget.exceeded(Usage(**{k: v - 1 for k, v in used.items()})) is None
    assert budget.exceeded(Usage(**unrelated)) is None  # the other counters do not count against this limit


def test_the_first_limit_reached_is_named_in_order() -> None:
    budget = Budget(max_input_tokens=10, max_output_tokens=10, max_total_tokens=10, max_cost_usd=1.0)
    spent = Usage(input_tokens=10, output_tokens=10, cost_usd=1.0)
    assert budget.exceeded(spent).startswith("input tokens")
    assert budget.exceeded(Usage(input_tokens=5, output_tokens=10, cost_usd=1.0)).startswith("output tokens")
    assert budget.exceeded(Usage(input_tokens=5, output_tokens=5, cost_usd=1.0)).startswith("total tokens")
    assert budget.exceeded(Usage(input_tokens=4, output_tokens=5, cost_usd=1.0)).startswith("cost in USD")
    assert Budget().exceeded(Usage(input_tokens=10**9, cost_usd=1e9)) is None


def test_prices_are_per_million_tokens_of_each_kind() -> None:
    budget = Budget(price_input_per_mtok=3.0, price_output_per_mtok=15.0)
    assert budget.cost_usd(2_000_000, 1_000_000) == 21.0
    assert budget.cost_usd(1_000_000, 0) == 3.0
    assert budget.cost_usd(0, 1_000_000) == 15.0
    assert Budget(price_output_per_mtok=2.0).cost_usd(5_000_000, 500_000) == pytest.approx(1.0)
    assert Budget(price_input_per_mtok=2.0).cost_usd(500_000, 5_000_000) == pytest.approx(1.0)
    assert Budget().cost_usd(1, 1) is None


def _call(role: str, tokens_in: int, tokens_out: int, cost: float | None) -> RecordedCall:
    return RecordedCall(
        call_key=f"{role}-{tokens_in}",
        role=role,
        model="m",
        prompt="p",
        reply="r",
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cost_usd=cost,
    )


def test_usage_adds_every_counter_in_total_and_per_role() -> None:
    usage = Usage()
    usage.add(_call("planner", 10, 20, 0.5))
    usage.add(_call("coder", 1, 2, None))
    usage.add(_call("planner", 100, 200, 0.25))
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens, usage.cost_usd, usage.calls) == (
        111,
        222,
        333,
        0.75,
        3,
    )
    planner, coder = usage.per_role["planner"], usage.per_role["coder"]
    assert (planner.input_tokens, planner.output_tokens, planner.total_tokens, planner.cost_usd, planner.calls) == (
        110,
        220,
        330,
        0.75,
        2,
    )
    assert (coder.input_tokens, coder.output_tokens, coder.cost_usd, coder.calls) == (1, 2, 0.0, 1)


def test_the_client_checks_the_runs_usage_not_only_its_own() -> None:
    spent = Usage(input_tokens=99)
    client = LLMClient(
        ScriptedChatModel(entries=["x"]),
        MemoryRecorder(),
        budget=Budget(max_input_tokens=100),
        usage_so_far=lambda: spent,
    )
    assert client.budget_exceeded() is None
    spent.input_tokens = 100
    assert client.budget_exceeded() == "input tokens used (100) reached the budget of 100"
    with pytest.raises(BudgetExceededError, match="not calling the model: input tokens used"):
        client.complete("planner", "k", "p")
