"""The checker's reference cache: expected outputs by (task, config, seeds), least recently used first out, bounded in
bytes, so a session computes each correctness reference once."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


def nbytes_of(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(nbytes_of(v) for v in value)
    return 64


class ReferenceCache:
    """(task, config, seeds) -> (input digest, expected output), least recently used first out, bounded in bytes."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self.entries: OrderedDict[tuple[Any, ...], tuple[str, Any, int]] = OrderedDict()
        self.hits = 0

    def get(self, key: tuple[Any, ...]) -> tuple[str, Any] | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        self.entries.move_to_end(key)
        self.hits += 1
        return entry[0], entry[1]

    def put(self, key: tuple[Any, ...], digest: str, expected: Any) -> None:
        size = nbytes_of(expected)
        if size > self.budget:
            return
        while self.entries and self.used + size > self.budget:
            _, (_, _, old) = self.entries.popitem(last=False)
            self.used -= old
        self.entries[key] = (digest, expected, size)
        self.used += size

    def clear(self) -> None:
        self.entries.clear()
        self.used = 0
