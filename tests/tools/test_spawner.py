"""Evaluator processes die with the agent's process, not with the thread that happened to start them."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ksearch.tools.evaluator.parent.session import EvaluatorSession
from ksearch.tools.evaluator.shared.sandbox import on_spawner_thread


def _ready_session() -> EvaluatorSession:
    session = EvaluatorSession("cpu", prestart=True)
    assert session.checker is not None and session.idle is not None
    session.checker.wait_ready(180)  # both have asked Linux to kill them with their parent by now
    assert session.idle.wait_ready(time.monotonic() + 180)
    return session


def test_a_sessions_processes_outlive_the_pool_thread_that_started_them() -> None:
    """LangGraph runs nodes on pool threads that end with each ``graph.stream()``; PR_SET_PDEATHSIG fires when the
    creating *thread* ends, so the checker and the prestarted worker were killed then, though the session lived on."""
    pool = ThreadPoolExecutor(max_workers=1)
    session = pool.submit(_ready_session).result()
    try:
        pool.shutdown(wait=True)
        time.sleep(1.0)
        assert session.checker is not None and session.checker.alive()
        assert session.idle is not None and not session.idle.exited()
    finally:
        session.close()


def test_starts_run_on_one_long_lived_thread_and_may_nest() -> None:
    names = {on_spawner_thread(lambda: threading.current_thread().name) for _ in range(3)}
    assert len(names) == 1 and next(iter(names)).startswith("ksearch-spawner")
    assert on_spawner_thread(lambda: on_spawner_thread(lambda: 42)) == 42  # no deadlock when already there
