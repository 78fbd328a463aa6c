"""bench/mutation.py's machinery on small sources (the bench itself is not run here): which operators apply where,
that every mutant is valid code that differs from the original and leaves the rest of the file as it was, and that
the target table names files that exist and equivalents that still exist."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.bench_scripts import load_bench

REPO = Path(__file__).resolve().parents[1]
bench = load_bench("mutation")


def _mutants(source: str, functions: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    return [(m.operator, m.before, m.after) for m in bench.mutants_of("m.py", source, functions)]


def test_a_comparison_gets_its_boundary_and_its_negation() -> None:
    assert _mutants("def f(a, b):\n    return a < b\n") == [
        ("boundary", "a < b", "a <= b"),
        ("negate", "a < b", "a >= b"),
    ]
    assert ("negate", "x is None", "x is not None") in _mutants("def f(x):\n    return x is None\n")


def test_numbers_are_tweaked_except_integers_compared_directly() -> None:
    found = _mutants("def f(n, x):\n    return n < 3 and x * 2.5 + 1\n")
    assert ("constant", "2.5", "5.0") in found and ("constant", "1", "2") in found
    assert not any(op == "constant" and before == "3" for op, before, _ in found)  # `n <= 3` covers it


def test_arithmetic_terms_and_conditions() -> None:
    found = _mutants("def f(a, b, c):\n    return (a - b) / c if a and b else 0\n")
    assert ("arithmetic", "a - b", "a + b") in found and ("drop-term", "a - b", "a") in found
    assert ("drop-term", "(a - b) / c", "a - b") in found and ("arithmetic", "(a - b) / c", "(a - b) * c") in found
    assert ("bool-op", "a and b", "a or b") in found and ("drop-condition", "a and b", "b") in found


def test_tests_are_inverted_and_min_max_swapped() -> None:
    found = _mutants("def f(xs, ok):\n    if ok:\n        return max(xs)\n    return not any(xs)\n")
    assert ("invert", "ok", "not ok") in found and ("min-max", "max(xs)", "min(xs)") in found
    assert ("invert", "not any(xs)", "any(xs)") in found and ("min-max", "any(xs)", "all(xs)") in found


def test_neighbouring_arguments_are_swapped_but_not_literals() -> None:
    found = _mutants("def f(a, b, d):\n    g(a, b, 1)\n    h(x=a, y=b)\n    d.get(a, [])\n    isinstance(a, b)\n")
    assert ("swap-args", "g(... a, b ...)", "g(... b, a ...)") in found
    assert ("swap-args", "h(... x=a, y=b ...)", "h(... x=b, y=a ...)") in found
    assert [m for m in found if m[0] == "swap-args"] == [
        ("swap-args", "g(... a, b ...)", "g(... b, a ...)"),
        ("swap-args", "h(... x=a, y=b ...)", "h(... x=b, y=a ...)"),
    ]


def test_one_element_is_dropped_from_a_small_literal_set() -> None:
    found = _mutants("def f(c, s):\n    return c in 'wax' or s.startswith(('_', '.'))\n")
    assert {(b, a) for op, b, a in found if op == "membership"} == {
        ("'wax'", "'ax'"),
        ("'wax'", "'wx'"),
        ("'wax'", "'wa'"),
        ("('_', '.')", "('.',)"),
        ("('_', '.')", "('_',)"),
    }


def test_messages_annotations_asserts_and_logging_are_left_alone() -> None:
    source = (
        '"""Doc 1."""\nimport logging\nlog = logging.getLogger()\nTABLE = {1: 2.0}\n\n\n'
        'def f(x: int = 3) -> int:\n    """Doc."""\n    assert x > 0, "positive"\n    log.info("x %d", x + 1)\n'
        '    return f"{x + 1}"\n'
    )
    assert _mutants(source) == [("constant", "3", "4")]  # only the default value


def test_only_the_named_functions_and_numeric_constants_are_mutated() -> None:
    source = (
        "LIMIT = 10\nNAMES = ('a', 'b')\n\n\nclass C:\n    rate = 0.5\n\n    def g(self):\n        return 1\n\n\n"
        "def h():\n    return 2\n"
    )
    assert {m.function for m in bench.mutants_of("m.py", source)} == {"LIMIT", "C.rate", "C.g", "h"}
    assert {m.function for m in bench.mutants_of("m.py", source, ("C",))} == {"C.rate", "C.g"}
    assert {m.function for m in bench.mutants_of("m.py", source, ("h", "LIMIT"))} == {"h", "LIMIT"}


def test_every_mutant_is_valid_distinct_code_and_keeps_the_rest_of_the_file() -> None:
    source = "def f(a, b):  # a comment\n    x = a < b  # another\n    return x and a + 1 != b\n"
    mutants = bench.mutants_of("m.py", source)
    dumps = {ast.dump(ast.parse(m.source)) for m in mutants}
    assert len(dumps) == len(mutants) and ast.dump(ast.parse(source)) not in dumps
    for mutant in mutants:
        assert "# a comment" in mutant.source and "# another" in mutant.source
        assert sum(a != b for a, b in zip(source.splitlines(), mutant.source.splitlines())) == 1


def test_a_long_mutation_is_described_by_where_it_differs() -> None:
    before = "alpha_beta_gamma and " * 5 + "delta is None"
    after = "alpha_beta_gamma and " * 5 + "delta is not None"
    b, a = bench._focus(before, after)
    assert b.startswith("...") and "delta is None" in b and "delta is not None" in a and len(b) < len(before)
    assert bench._focus("a < b", "a <= b") == ("a < b", "a <= b")


def test_the_targets_name_files_that_exist_and_never_the_whole_suite() -> None:
    for target in bench.TARGETS:
        assert (REPO / target.path).is_file(), target.path
        assert target.tests, target.path
        for test in target.tests:
            assert (REPO / test.split("::")[0]).is_file(), test


def test_each_listed_equivalent_is_a_mutant_the_bench_makes() -> None:
    keys = set()
    for target in bench.TARGETS:
        if any(key.startswith(target.path + "::") for key in bench.EQUIVALENT):
            text = (REPO / target.path).read_text(encoding="utf-8")
            keys |= {m.key for m in bench.mutants_of(target.path, text, target.functions, validate=False)}
    assert set(bench.EQUIVALENT) <= keys, sorted(set(bench.EQUIVALENT) - keys)
    assert all(reason.strip() for reason in bench.EQUIVALENT.values())
