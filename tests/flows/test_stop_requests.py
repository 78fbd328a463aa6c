"""Stop requests (what Ctrl-C and SIGTERM call, from a signal handler on the main thread) never wait on the thread
that received the signal."""

from __future__ import annotations

import threading

from ksearch.flows import driving


def test_a_stop_request_arriving_while_its_thread_registers_a_run_returns() -> None:
    """A signal handler runs between two bytecodes of the main thread, which may be inside ``with _DRIVING_LOCK``."""
    answers: list[list[str]] = []

    def interrupted_inside_the_registry() -> None:
        with driving._DRIVING_LOCK:
            answers.append(driving.request_stop("SIGINT"))
            answers.append(driving.mark_stopped_now("SIGINT"))

    worker = threading.Thread(target=interrupted_inside_the_registry, daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "a stop request deadlocked on the registry its own thread held"
    assert answers == [[], []]  # no run is driven in this process
