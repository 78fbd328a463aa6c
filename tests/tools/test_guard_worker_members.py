"""The worker's methods that live in modules of their own (worker/correctness.py, worker/handoffs.py) are bound in the
``Worker`` class body, so the guard's references hold them as the class's own members and as their modules'
functions: a candidate that rebinds ``Worker.stage`` (or ``handoffs.stage``) is seen, as it was when they were
defined in the class."""

from __future__ import annotations

import pytest

from ksearch.tools.evaluator.worker import correctness, guard, handoffs
from ksearch.tools.evaluator.worker.main import Worker

MOVED = {
    correctness: ("check_correctness", "check_config", "check_inputs_unchanged", "poison_free_memory"),
    handoffs: ("stage", "check_staged", "handoff", "settle", "ask", "_quiet_device", "receive_inputs", "_answered"),
}
WORKER = "ksearch.tools.evaluator.worker.main.Worker"


@pytest.mark.parametrize("module, name", [(m, n) for m, names in MOVED.items() for n in names])
def test_a_moved_method_is_a_guarded_member_of_the_worker_and_of_its_module(module, name, monkeypatch) -> None:
    refs = guard.harness_references()
    owner, attr, held = refs[f"{WORKER}.{name}"]
    assert owner is Worker and attr == name and guard._class_attr(Worker, name) is held
    assert f"{module.__name__}.{name}" in refs

    monkeypatch.setattr(Worker, name, lambda *args, **kwargs: None)  # what a candidate's patch would do
    assert guard._class_attr(Worker, name) is not held
