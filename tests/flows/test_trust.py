"""A received workspace is data, not instructions (issue 37): its stored endpoints and task files are not obeyed
unasked, and a damaged config row is one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ksearch.agent.config import RunConfig
from ksearch.errors import UserError
from ksearch.flows import inspect as inspect_flow
from ksearch.flows import run as run_flow
from ksearch.flows import trust, trust_records
from ksearch.llm import models as llm_models
from ksearch.store import Store

EVIL = "https://llm.evil.example/v1"


def _stored_run(ws: Path, **config: object) -> str:
    settings = {"run_id": "recv", "task": "softmax", "model": "openai:gpt-x", "device": "cpu", **config}
    cfg = RunConfig.model_validate(settings)
    store = Store(ws / "ksearch.db")
    try:
        store.create_run(
            {
                "id": cfg.run_id,
                "task": cfg.task,
                "model": cfg.model,
                "language": cfg.language,
                "device": cfg.device,
                "status": "interrupted",
                "config": cfg.model_dump(mode="json"),
            }
        )
    finally:
        store.close()
    return cfg.run_id


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the run's model (which would send the key on its first call) fails the test."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "x" * 40)

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError(f"a chat model was built for {args} {kwargs}")

    monkeypatch.setattr(llm_models, "make_chat_model", refuse)


def test_resume_never_sends_the_key_to_a_server_the_workspace_names(tmp_path: Path, no_model: None) -> None:
    run_id = _stored_run(tmp_path, base_url=EVIL)
    with pytest.raises(UserError) as caught:
        run_flow.resume_run(run_id, workspace=tmp_path)
    assert EVIL in str(caught.value) and f"--base-url {EVIL}" in caught.value.hint


def test_naming_the_server_on_the_command_line_accepts_it(tmp_path: Path) -> None:
    config = RunConfig(run_id="r", task="softmax", model="openai:m", device="cpu", base_url=EVIL)
    accepted = trust.accept_endpoints(config, command="ksearch resume r", workspace=tmp_path, base_url=EVIL)
    assert accepted.base_url == EVIL


LOOPBACK_SERVER, LOOPBACK_SCHEDULER = "http://127.0.0.1:8000/v1", "tcp://127.0.0.1:8786"


@pytest.mark.parametrize(
    ("settings", "flag"),
    [
        ({"base_url": LOOPBACK_SERVER}, "--base-url"),
        ({"executor": "dask", "scheduler": LOOPBACK_SCHEDULER}, "--scheduler"),
    ],
)
def test_a_stored_loopback_endpoint_is_not_trusted_unvouched(
    tmp_path: Path, no_model: None, settings: dict[str, str], flag: str
) -> None:
    """On a shared node anyone can listen on 127.0.0.1 (and a Dask client unpickles what its scheduler sends): a
    loopback server or scheduler stored in a workspace is refused like any other until the user vouches for it."""
    run_id = _stored_run(tmp_path, **settings)
    with pytest.raises(UserError) as caught:
        run_flow.resume_run(run_id, workspace=tmp_path)
    assert "127.0.0.1" in str(caught.value) and flag in caught.value.hint
    if flag == "--scheduler":
        with pytest.raises(UserError, match="replay evaluates on this machine"):
            run_flow.replay_config(run_id, workspace=tmp_path)


def test_what_the_user_vouched_for_is_accepted_for_that_run_only(tmp_path: Path) -> None:
    """The record kept outside the workspace (written when the user started the run) names the exact values: the
    same run id in another workspace, or another value in this one, is still refused."""
    config = RunConfig(
        run_id="r",
        task="softmax",
        model="openai:m",
        device="cpu",
        base_url=LOOPBACK_SERVER,
        executor="dask",
        scheduler=LOOPBACK_SCHEDULER,
    )
    here, elsewhere = tmp_path / "ws", tmp_path / "received"
    trust.vouch(config, here)
    assert trust.accept_endpoints(config, command="x", workspace=here) is config
    assert trust_records.trust_file().is_relative_to(tmp_path) and not trust_records.trust_file().is_relative_to(here)
    with pytest.raises(UserError, match="LLM server"):
        trust.accept_endpoints(config, command="x", workspace=elsewhere)
    other = config.model_copy(update={"scheduler": "tcp://127.0.0.1:9999"})
    with pytest.raises(UserError, match="Dask scheduler"):
        trust.accept_endpoints(other, command="x", workspace=here)


def test_a_stored_dask_scheduler_is_not_contacted_unasked(tmp_path: Path, no_model: None) -> None:
    run_id = _stored_run(tmp_path, executor="dask", scheduler="tcp://10.1.2.3:8786")
    with pytest.raises(UserError) as caught:
        run_flow.resume_run(run_id, workspace=tmp_path)
    assert "tcp://10.1.2.3:8786" in str(caught.value) and "--scheduler" in caught.value.hint
    with pytest.raises(UserError, match="replay evaluates on this machine"):
        run_flow.replay_config(run_id, workspace=tmp_path)


@pytest.mark.parametrize("where", ["inside", "outside"])
def test_a_task_file_the_workspace_names_is_not_run_unvouched(tmp_path: Path, no_model: None, where: str) -> None:
    """Inside the workspace folder or anywhere else (an absolute path the stored run names): not imported, not run,
    until the user vouches for it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    marker = tmp_path / "imported"
    evil = (ws if where == "inside" else tmp_path) / "evil_op.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('ran')\nCONFIGS = []\n")
    run_id = _stored_run(ws, task=str(evil))
    for call in (
        lambda: run_flow.resume_run(run_id, workspace=ws),
        lambda: run_flow.replay_config(run_id, workspace=ws),
    ):
        with pytest.raises(UserError) as caught:
            call()
        assert "have not vouched for" in str(caught.value) and "--trust-task" in caught.value.hint
    assert not marker.exists()


OPERATOR = """
import os
import torch

open({marker!r}, "a").write(f"{{os.getpid()}} {{'OPENAI_API_KEY' in os.environ}}\\n")
CONFIGS = [{{"n": 8}}]


def make_inputs(config, seed, device):
    return [torch.ones(config["n"], device=device)]


def reference(x):
    return x * 2
"""


def test_a_vouched_task_file_is_loaded_without_the_key_and_an_edit_needs_vouching_again(
    tmp_path: Path, no_model: None
) -> None:
    """A run the user started (its record names the task file's hash) resumes without a flag, and its task file is
    imported in a process without the key, never in this one (which holds it); once the file changes, it is
    refused until vouched for again."""
    ws, marker = tmp_path / "ws", tmp_path / "imports"
    ws.mkdir()
    op = tmp_path / "my_op.py"
    op.write_text(OPERATOR.format(marker=str(marker)))
    run_id = _stored_run(ws, task=str(op))
    config = RunConfig.model_validate({"run_id": run_id, "task": str(op), "model": "openai:gpt-x", "device": "cpu"})
    trust.vouch(config, ws)
    with pytest.raises(AssertionError, match="a chat model was built"):  # every check passed: the model comes next
        run_flow.resume_run(run_id, workspace=ws)
    imports = marker.read_text().split()  # "PID KEY-SEEN" per import
    assert imports and str(os.getpid()) not in imports[0::2] and set(imports[1::2]) == {"False"}, imports
    op.write_text(OPERATOR.format(marker=str(marker)) + "\n# edited\n")
    with pytest.raises(UserError, match="changed since you vouched for it"):
        run_flow.resume_run(run_id, workspace=ws)


def test_a_damaged_config_row_is_one_line_and_the_listing_still_works(tmp_path: Path) -> None:
    _stored_run(tmp_path)
    store = Store(tmp_path / "ksearch.db")
    try:
        with store._write() as db:  # noqa: SLF001 - simulate an edited row
            db["runs"].update("recv", {"config": "{not json"})
        store.create_run(
            {
                "id": "good",
                "task": "softmax",
                "model": "m",
                "language": "triton",
                "device": "cpu",
                "config": json.dumps({"run_id": "good"}),
            }
        )
    finally:
        store.close()
    listed = {r["id"]: r for r in inspect_flow.list_runs(tmp_path)}
    assert set(listed) == {"recv", "good"} and "config_error" in listed["recv"]
    with pytest.raises(UserError, match="invalid stored config"):
        run_flow.resume_run("recv", workspace=tmp_path)
