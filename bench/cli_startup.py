"""How long `ksearch runs` and `ksearch show RUN` take to start, side by side with `ksearch --version` (issue 64:
`runs` took 10.9 s on a loaded 2-core machine, 3.0 s of it importing torch; the target is under about 1.5 s), and
what every `ksearch run` pays before its first model call (``run-start``: a CPU run refused for its model spec once
its modules are imported and its device probed; issue 63: the CLI tests start hundreds of these).

Each command runs ``--repeat`` times in a fresh process, in turn (version, runs, show, version, ...), so that a
machine whose load changes moves every command alike. Printed per command: the median wall seconds, the median CPU
seconds of the process (user + system: what the machine's load does not inflate), and both as a ratio to
``--version`` (the interpreter, typer and rich, which every command pays).

    PYTHONPATH=$PWD python bench/cli_startup.py --workspace WS --run RUN [--repeat 7] [--json OUT]

Without ``--workspace``, a workspace with one synthetic finished run is written to a temporary folder first
(through the store, as tests/helpers/report_store.py does).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


REFUSED = {"run-start"}
"""Commands measured up to the error they end on (exit status 1)."""


def timed(name: str, args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of ``python -m ksearch.cli ARGS`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ksearch.cli", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO
    )
    if done.returncode != (1 if name in REFUSED else 0):
        raise SystemExit(f"{name}: exit status {done.returncode}\n{done.stderr.decode(errors='replace')[-2000:]}")
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(commands: dict[str, list[str]], repeat: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU seconds per command, the commands interleaved round by round."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(repeat):
        for name, args in commands.items():
            samples[name].append(timed(name, args))
    base_wall = statistics.median(w for w, _ in samples["version"])
    base_cpu = statistics.median(c for _, c in samples["version"])
    rows = {}
    for name, values in samples.items():
        wall = statistics.median(w for w, _ in values)
        cpu = statistics.median(c for _, c in values)
        rows[name] = {"wall_s": wall, "cpu_s": cpu, "wall_ratio": wall / base_wall, "cpu_ratio": cpu / base_cpu}
    return rows


def synthetic_workspace(folder: Path) -> tuple[Path, str]:
    sys.path.insert(0, str(REPO))
    from tests.helpers.report_store import write_timed_run

    ws = folder / "ws"
    return ws, write_timed_run(ws).run_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path)
    parser.add_argument("--run")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws, run = (opts.workspace, opts.run) if opts.workspace else synthetic_workspace(Path(tmp))
        commands = {
            "version": ["--version"],
            "runs": ["--workspace", str(ws), "runs"],
            "show": ["--workspace", str(ws), "show", run],
            "run-start": ["--workspace", str(ws), "run", "softmax", "--model", "no-provider", "--device", "cpu"],
        }
        rows = measure(commands, opts.repeat)
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs; {opts.repeat} runs each")
    print(f"{'command':<10}{'wall s':>9}{'cpu s':>9}{'wall / version':>16}{'cpu / version':>15}")
    for name, row in rows.items():
        print(f"{name:<10}{row['wall_s']:>9.2f}{row['cpu_s']:>9.2f}{row['wall_ratio']:>16.2f}{row['cpu_ratio']:>15.2f}")
    if opts.json:
        opts.json.write_text(json.dumps({"load": load, "repeat": opts.repeat, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
