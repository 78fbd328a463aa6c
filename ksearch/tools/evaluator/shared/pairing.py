"""The order of paired rounds, which the worker runs and the parent reads back in the same order."""

from __future__ import annotations

from collections.abc import Iterator


def alternating(rounds: int) -> Iterator[str]:
    """The sides of ``rounds`` paired rounds in ABBA order ("a", "b", "b", "a", ...), so that a drift of the machine
    reaches both sides alike (compare mode: the parent assigns each run to a side by this order)."""
    for round_index in range(rounds):
        yield from "ab" if round_index % 2 == 0 else "ba"
