"""A refused `respond` records nothing (issue 64): the task file changed since the run started, so the run cannot go
on (the trust check refuses a task file changed since the user vouched for it); before, the reply was recorded all
the same, and the next `respond` said the run was not waiting while `runs` said it was."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ksearch.agent.config import RunConfig
from ksearch.errors import UserError
from ksearch.flows import interactive
from ksearch.flows import run as runner
from tests.helpers.scripts import init_plan

OPERATOR = """
    import torch

    CONFIGS = [{"n": 8}]

    def make_inputs(config, seed, device):
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(config["n"], generator=g).to(device)]

    def reference(x):
        return x * FACTOR
"""


def test_a_refused_respond_records_no_reply_and_the_run_still_waits(tmp_path: Path) -> None:
    op = tmp_path / "double.py"
    op.write_text(textwrap.dedent(OPERATOR.replace("FACTOR", "2")))
    ws = tmp_path / "ws"
    config = RunConfig(run_id="waits", task=str(op), model="interactive", device="cpu", max_rounds=2)
    assert runner.start_run(config, workspace=ws).status == "waiting"

    op.write_text(textwrap.dedent(OPERATOR.replace("FACTOR", "3")))  # the task changes while the run waits
    with pytest.raises(UserError) as refused:
        interactive.respond("waits", init_plan([("a", 0.9)]), workspace=ws)
    assert "changed since you vouched for it" in str(refused.value)

    view = interactive.pending("waits", workspace=ws)
    assert [(w.prompt.key, w.answered) for w in view.prompts] == [("plan:0:0", False)]
    store = runner.open_store(ws, read_only=True)
    try:
        assert store.find_llm_call("waits", "plan:0:0") is None
    finally:
        store.close()
    assert "the reply was not recorded" in refused.value.hint

    op.write_text(textwrap.dedent(OPERATOR.replace("FACTOR", "2")))  # restored: the same reply is taken
    outcome = interactive.respond("waits", init_plan([("a", 0.9)]), workspace=ws)
    assert outcome.key == "plan:0:0" and outcome.outcome is not None
    assert [w.prompt.key for w in outcome.outcome.pending] == ["write:c1:1"]
