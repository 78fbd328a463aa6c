"""``--executor dask``, ``--scheduler`` and ``ksearch worker`` at the command line, and the optional extra."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from ksearch.agent.config import RunConfig
from ksearch.cli import app
from ksearch.flows import placement
from ksearch.flows import run as runner

cli = CliRunner()


def _run(tmp_path, *extra: str):
    return cli.invoke(app, ["--workspace", str(tmp_path), "run", "softmax", "--model", "replay:x.jsonl", *extra])


def test_dask_executor_needs_a_scheduler(tmp_path):
    result = _run(tmp_path, "--device", "cpu", "--executor", "dask")
    assert result.exit_code == 2
    assert "--executor dask needs --scheduler" in " ".join(result.output.split())


def test_the_cluster_chooses_the_gpu(tmp_path):
    result = _run(
        tmp_path, "--device", "cuda:1", "--parallel", "2", "--executor", "dask", "--scheduler", "tcp://127.0.0.1:1"
    )
    assert result.exit_code == 2
    assert "use --device cuda" in " ".join(result.output.split())


def test_a_scheduler_without_the_dask_executor_is_refused(tmp_path):
    result = _run(tmp_path, "--device", "cpu", "--scheduler", "tcp://127.0.0.1:1")
    assert result.exit_code == 2
    assert "--scheduler is for --executor dask" in " ".join(result.output.split())


def test_executor_and_scheduler_are_stored_with_the_run_and_old_configs_still_load():
    config = RunConfig(
        run_id="r", task="softmax", model="replay:x", device="cuda", executor="dask", scheduler="tcp://localhost:8786"
    )
    again = RunConfig.model_validate(config.model_dump(mode="json"))
    assert (again.executor, again.scheduler) == ("dask", "tcp://localhost:8786")
    old = RunConfig.model_validate({"run_id": "o", "task": "softmax", "model": "replay:x", "device": "cuda"})
    assert (old.executor, old.scheduler) == ("local", None)


def test_parallel_defaults_to_the_clusters_slots_of_the_device_kind():
    slots = {"cuda": 3, "cpu": 2}
    assert placement.default_parallel("cuda", slots=slots) == 3
    assert placement.default_parallel("cpu", slots=slots) == 2
    assert placement.default_parallel("cuda", slots={"cuda": 0, "cpu": 2}) == 1


def test_worker_help_names_its_options():
    result = cli.invoke(app, ["worker", "--help"])
    assert result.exit_code == 0
    for option in ("--scheduler", "--gpu", "--nthreads", "--death-timeout"):
        assert option in result.output


def _without_distributed(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    """``ksearch ARGS`` in a process where ``import distributed`` fails, as without the dask extra."""
    code = (
        "import sys; sys.modules['distributed'] = None; sys.argv = ['ksearch', *sys.argv[1:]]; "
        "from ksearch.cli import main; main()"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


@pytest.mark.parametrize(
    "args",
    [
        [
            "run",
            "softmax",
            "--model",
            "replay:x.jsonl",
            "--device",
            "cpu",
            "--executor",
            "dask",
            "--scheduler",
            "tcp://127.0.0.1:1",
        ],
        ["worker", "--scheduler", "tcp://127.0.0.1:1"],
    ],
)
def test_without_the_dask_extra_the_error_says_what_to_install(tmp_path, args):
    proc = _without_distributed("--workspace", str(tmp_path), *args, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    flat = " ".join(proc.stderr.split())
    assert "needs Dask distributed, which is not installed" in flat
    assert "pip install 'ksearch[dask]'" in flat
    assert "Traceback" not in proc.stderr


def test_a_gpu_worker_on_a_machine_without_that_gpu_is_refused(tmp_path):
    pytest.importorskip("distributed")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ksearch.cli",
            "--workspace",
            str(tmp_path),
            "worker",
            "--scheduler",
            "tcp://127.0.0.1:1",
            "--gpu",
            "63",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "--gpu 63: torch sees no such GPU" in " ".join(proc.stderr.split())


@pytest.mark.parametrize(
    ("gpu", "visible", "expected"),
    [(0, None, "0"), (3, "", "3"), (1, "4,6", "6"), (0, "GPU-1a2b", "GPU-1a2b")],
)
def test_gpu_n_is_the_nth_gpu_this_process_sees(gpu, visible, expected):
    from ksearch.flows.worker import visible_device

    assert visible_device(gpu, visible) == expected


def test_gpu_n_past_the_visible_gpus_is_refused():
    from ksearch.errors import UserError
    from ksearch.flows.worker import visible_device

    with pytest.raises(UserError, match="sees 2 GPU"):
        visible_device(2, "4,6")


def test_a_worker_drops_secret_looking_variables_but_keeps_dasks_own():
    from ksearch.flows.worker import scrub_secrets

    env = {"OPENAI_API_KEY": "x", "HF_TOKEN": "y", "PATH": "/bin", "DASK_DISTRIBUTED__COMM__TLS__WORKER__KEY": "k.pem"}
    assert sorted(scrub_secrets(env)) == ["HF_TOKEN", "OPENAI_API_KEY"]
    assert env == {"PATH": "/bin", "DASK_DISTRIBUTED__COMM__TLS__WORKER__KEY": "k.pem"}


def test_resume_with_a_scheduler_is_refused_for_a_local_run(tmp_path):
    from ksearch.errors import UserError

    config = RunConfig(run_id="loc", task="softmax", model="replay:x", device="cpu")
    store = runner.open_store(tmp_path)
    try:
        store.create_run(
            {
                "id": "loc",
                "task": "softmax",
                "model": "replay:x",
                "language": "triton",
                "device": "cpu",
                "config": config.model_dump(mode="json"),
            }
        )
    finally:
        store.close()
    with pytest.raises(UserError, match="--scheduler is for runs made with --executor dask"):
        runner.resume_run("loc", workspace=tmp_path, scheduler="tcp://127.0.0.1:1")


def test_a_worker_with_no_scheduler_listening_says_so_at_once(tmp_path):
    import socket
    import time

    pytest.importorskip("distributed")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ksearch.cli",
            "--workspace",
            str(tmp_path),
            "worker",
            "--scheduler",
            f"tcp://127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 2  # the error and its hint
    assert time.monotonic() - started < 20  # the nanny alone retried for 30 s first
