"""A real Dask cluster on this machine for the tests: a scheduler in the test process, and workers started the way
users start them, as ``ksearch worker --scheduler ADDR`` processes (CPU evaluations, Triton interpreter).

Each worker's environment holds a fake API key, so the tests can check that neither the Dask worker nor the
sandboxed processes it starts ever see it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.processes import started_by

REPO = Path(__file__).resolve().parents[2]
FAKE_KEY = "sk-test-must-never-reach-a-sandbox"


@dataclass
class Cluster:
    address: str
    client: Any
    """A client of the test's own (not the agent's): to find workers and read the evaluation events."""
    nannies: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def worker_pids(self) -> dict[str, int]:
        """Dask worker address -> the pid of its worker process (the nanny's child, where tasks run)."""
        return self.client.run(os.getpid)

    def wait_for_workers(self, count: int, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while len(self.client.scheduler_info(n_workers=-1)["workers"]) < count:
            assert time.monotonic() < deadline, f"{count} workers did not join in {timeout} s:\n{self.log_text()}"
            time.sleep(0.2)

    def starts(self) -> list[dict[str, Any]]:
        """Every evaluation task start the workers announced, oldest first."""
        return [message for _time, message in self.client.get_events("ksearch-evaluation")]

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in self.logs if p.exists())


@contextmanager
def dask_cluster(
    folder: Path, workers: int = 2, *, gpus: list[int] | None = None, **scheduler_kwargs: Any
) -> Iterator[Cluster]:
    """A scheduler and ``workers`` ``ksearch worker`` processes (each under its nanny), for the CPU interpreter, or
    one per GPU index in ``gpus``; all stopped at the end. ``scheduler_kwargs`` go to Dask's scheduler."""
    from distributed import Client, LocalCluster

    local = LocalCluster(
        n_workers=0,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        scheduler_port=0,
        dashboard_address=":0",
        scheduler_kwargs=scheduler_kwargs,
    )
    client = Client(local.scheduler_address, set_as_default=False)
    cluster = Cluster(address=local.scheduler_address, client=client)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)  # keep a wheelhouse target
    env = {**os.environ, "PYTHONPATH": path, "OPENAI_API_KEY": FAKE_KEY}
    if gpus is None:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    devices = [["--gpu", str(g)] for g in gpus] if gpus is not None else [[] for _ in range(workers)]
    folder.mkdir(parents=True, exist_ok=True)
    try:
        for i, device in enumerate(devices):
            log = folder / f"worker-{i}.log"
            cluster.logs.append(log)
            with open(log, "wb") as out:
                argv = [
                    sys.executable,
                    "-m",
                    "ksearch.cli",
                    "--workspace",
                    str(folder / "ws"),
                    "worker",
                    "--scheduler",
                    cluster.address,
                    "--name",
                    f"w{i}",
                    *device,
                ]
                cluster.nannies.append(
                    subprocess.Popen(argv, env=env, cwd=folder, stdout=out, stderr=subprocess.STDOUT)
                )
        cluster.wait_for_workers(len(devices))
        yield cluster
    finally:
        for nanny in cluster.nannies:
            if nanny.poll() is None:
                nanny.send_signal(signal.SIGTERM)
        for nanny in cluster.nannies:
            try:
                nanny.wait(30)
            except subprocess.TimeoutExpired:
                nanny.kill()
                nanny.wait(10)
        client.close()
        local.close()


def environ_of(pid: int) -> dict[str, str]:
    try:
        raw = (Path("/proc") / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def sandbox_processes(parent_pid: int) -> list[int]:
    """The checker and candidate processes a Dask worker process started (they carry its pid in their environment)."""
    return started_by(parent_pid)
