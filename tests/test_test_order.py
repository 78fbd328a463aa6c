"""The test command's order (``tests/conftest.py``): files holding a slow test first, so that the parallel pass ends
on short tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import _files_with_slow_tests_first


@dataclass
class _Item:
    name: str
    path: Path
    keywords: set[str] = field(default_factory=set)


def test_files_holding_a_slow_test_go_first_each_in_its_own_order() -> None:
    a, b, c = Path("a.py"), Path("b.py"), Path("c.py")
    items = [
        _Item("a1", a),
        _Item("b1", b),
        _Item("b2", b, {"slow"}),
        _Item("b3", b),
        _Item("c1", c),
        _Item("c2", c, {"slow"}),
    ]
    _files_with_slow_tests_first(items)  # type: ignore[arg-type]
    assert [item.name for item in items] == ["b1", "b2", "b3", "c1", "c2", "a1"]
