"""The ``ksearch`` command with ``tests/fakes.FakeExecutor`` for its runs: ``python -m tests.helpers.fake_cli ARGS``
(from the repository's root) is ``ksearch ARGS`` whose ``run``, ``resume``, ``replay``, ``fork`` and ``skills``
evaluate with the fake. For CLI tests that check the command, not the evaluator; ``ksearch eval`` keeps the real
evaluator (its flow does not go through the executor)."""

from __future__ import annotations

from tests.fakes import FakeExecutor, install

if __name__ == "__main__":
    install(FakeExecutor(), setattr)

    from ksearch.cli import main

    main()
