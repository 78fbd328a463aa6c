"""A received workspace is data, not instructions (issue 37): its stored endpoints and task files are not obeyed
unasked, and a damaged config row is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ksearch.agent.config import RunConfig
from ksearch.errors import UserError
from ksearch.flows import inspect as inspect_flow
from ksearch.flows import run as run_flow
from ksearch.flows import trust
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
    assert trust.accept_endpoints(config, command="ksearch resume r", base_url=EVIL).base_url == EVIL
    loopback = config.model_copy(update={"base_url": "http://127.0.0.1:8000/v1"})
    assert trust.accept_endpoints(loopback, command="ksearch resume r") is loopback


def test_a_stored_dask_scheduler_is_not_contacted_unasked(tmp_path: Path, no_model: None) -> None:
    run_id = _stored_run(tmp_path, executor="dask", scheduler="tcp://10.1.2.3:8786")
    with pytest.raises(UserError) as caught:
        run_flow.resume_run(run_id, workspace=tmp_path)
    assert "tcp://10.1.2.3:8786" in str(caught.value) and "--scheduler" in caught.value.hint
    config = RunConfig(
        run_id="r", task="softmax", model="openai:m", device="cpu", executor="dask", scheduler="tcp://127.0.0.1:8786"
    )
    assert trust.accept_endpoints(config, command="x").scheduler == "tcp://127.0.0.1:8786"
    with pytest.raises(UserError, match="replay evaluates on this machine"):
        run_flow.replay_config(run_id, workspace=tmp_path)


def test_a_task_file_shipped_in_the_workspace_is_not_imported_unasked(tmp_path: Path, no_model: None) -> None:
    marker = tmp_path / "imported"
    evil = tmp_path / "evil_op.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('ran')\nCONFIGS = []\n")
    run_id = _stored_run(tmp_path, task=str(evil))
    for call in (
        lambda: run_flow.resume_run(run_id, workspace=tmp_path),
        lambda: run_flow.replay_config(run_id, workspace=tmp_path),
    ):
        with pytest.raises(UserError) as caught:
            call()
        assert "inside the workspace" in str(caught.value) and "--trust-task" in caught.value.hint
    assert not marker.exists()


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
