"""Which containment Nsight Compute profiles through on this GPU machine, and what counters cost (issue 57).

One command for a lent GPU machine, in about four minutes; no step stops the next, and the compact table comes last:

1. facts: ncu as found and resolved, its version, the installation folders the sandbox opens for it, the driver's
   profiling restriction (``RmProfilingAdminOnly``), the kernel, Landlock's ABI, a GPU candidate's layers here;
2. rungs: the trusted probe (one tiny kernel, never a candidate) profiled by ncu under each rung of the ladder the
   collector tries (``ksearch.tools.counters.rungs``), strongest first, up to the first that works (all of them with
   ``--all-rungs``): status, seconds, ncu's reason. When none works (or with ``--all-rungs``), three checks follow: a
   bare ncu (no containment: does ncu work here at all?), an evaluation's own layers with nothing opened for ncu
   (what ncu needs), and Landlock alone with the capabilities kept (where the driver restricts counters to
   administrators, only this and the bare ncu can profile: the rungs all drop them);
3. ``pytest tests/tools/test_counters_gpu.py`` (an evaluation's evidence carries the counters);
4. ``bench/counters_cost.py`` (a TriMul cycle with and without counters, and where the counters' time goes);
5. ``scripts/counter_prompts.py`` on the bench's evaluation (the TriMul prompts with the counters in them).

Writes under ``$OUT`` (or ``--out``): ``summary.txt`` (facts and table), ``logs.tar.gz`` (each step's whole output,
each rung's ncu log and probe output, ncu's report of the bench), ``counters_cost.json`` and the three prompts.

Usage (repo root, GPU machine): ``python scripts/ncu_containment_probe.py [--rung-timeout 45] [--all-rungs]
[--skip-bench] [--budget 540]``. Exits 0 when a rung of the ladder profiled the probe and every later step passed.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ksearch.tools.counters.rungs import Rung

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RUNGS_BUDGET_S = 150.0
"""The rungs still untried when this much time has gone are left out (said in the table)."""
STEP_LIMITS_S = {"test": 150.0, "bench": 240.0, "prompts": 60.0}
"""Each later step's own limit; none runs past ``--budget`` from the start (a lent machine's command has 600 s)."""


@dataclass
class Row:
    step: str
    outcome: str
    seconds: float
    why: str = ""


def facts(device: str) -> tuple[list[str], str | None]:
    """What this machine is, for the summary; and the ncu to use (resolved), None when there is none."""
    from ksearch.tools.containment import landlock, policy
    from ksearch.tools.counters import collect, ncu_command

    lines = [f"kernel {platform.release()}; python {platform.python_version()}; uid {os.getuid()}"]
    found = ncu_command.find_ncu()
    if found is None:
        return [*lines, "ncu: not found (set KSEARCH_NCU or put ncu on PATH)"], None
    ncu = collect.resolved(found)
    head = Path(ncu).read_bytes()[:2]
    lines.append(f"ncu: {found} -> {ncu} ({'a script' if head == b'#!' else 'a binary'}); {collect.tool_version(ncu)}")
    lines.append(f"opened for ncu to read: {', '.join(ncu_command.installation(ncu)) or 'nothing found'}")
    restriction = ncu_command.profiling_restriction() or "unknown (no /proc/driver/nvidia/params)"
    version = _read("/sys/module/nvidia/version").strip() or "?"
    lines.append(f"driver {version}: counters restricted to administrators? {restriction}")
    layers, failed = policy.probe(gpu=True)
    lines.append(
        f"landlock ABI {landlock.abi_version()}; a GPU candidate's layers here: {','.join(policy.child_layers(device))}"
    )
    if failed:
        lines.append("refused here: " + "; ".join(f"{k}: {v}" for k, v in failed.items()))
    return lines, ncu


def try_rungs(device: str, ncu: str, logs: Path, timeout_s: float, *, every: bool) -> list[Row]:
    """The ladder's rungs, strongest first, up to the first that profiles the probe (``every``: all of them); then,
    when none did (or ``every``), the checks that say why: a bare ncu, an evaluation's layers, Landlock alone."""
    from ksearch.tools.containment import policy
    from ksearch.tools.containment.policy import Openings
    from ksearch.tools.counters import ncu_command
    from ksearch.tools.counters.rungs import Rung, ladder

    readable = ncu_command.installation(ncu)
    machine = policy.child_layers(device)
    started = time.monotonic()
    rows = try_each("rung", ladder(machine, readable), device, ncu, logs, timeout_s, started, stop_at_first=not every)
    if every or not any(row.outcome == "ok" for row in rows):
        checks = [
            Rung("bare ncu (no containment)", (), Openings(readable=readable, tool=True)),
            Rung("an evaluation's layers, nothing opened", machine, Openings(readable=readable, tool=True)),
            Rung(
                "Landlock only (capabilities kept)", ("landlock",), Openings(network=True, readable=readable, tool=True)
            ),
        ]
        rows += try_each("check", checks, device, ncu, logs, timeout_s, started, stop_at_first=False)
    return rows


def try_each(
    kind: str,
    rungs: list[Rung],
    device: str,
    ncu: str,
    logs: Path,
    timeout_s: float,
    started: float,
    *,
    stop_at_first: bool,
) -> list[Row]:
    """The probe under each of ``rungs`` (its ncu log and output kept under ``logs``), within ``RUNGS_BUDGET_S``."""
    from ksearch.tools.counters import probe

    rows: list[Row] = []
    for rung in rungs:
        step = f"{kind}: {rung.name}"
        if time.monotonic() - started > RUNGS_BUDGET_S:
            rows.append(Row(step, "not tried", 0.0, f"past {RUNGS_BUDGET_S:g} s for the rungs"))
            continue
        folder = logs / f"{kind}-{len(rows)}"
        try:
            trial = probe.try_rung(device, ncu, rung, timeout_s, keep=folder)
        except Exception as exc:  # noqa: BLE001 - a step of a diagnostic: the next one runs anyway
            rows.append(Row(step, "error", 0.0, f"{type(exc).__name__}: {exc}"))
            continue
        ok = trial.status.value == "collected"
        rows.append(Row(step, "ok" if ok else trial.status.value, trial.seconds, " | ".join(trial.reasons)))
        print(f"  {rows[-1].seconds:5.1f} s  {trial.describe()}", flush=True)
        if ok and stop_at_first:
            break
    return rows


def run_step(name: str, argv: list[str], log: Path, timeout_s: float, env: dict[str, str] | None = None) -> Row:
    """``argv`` with its whole output to ``log``; the row says how it ended and its last meaningful line."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            argv, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, env=env or dict(os.environ), check=False
        )
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output = _text(exc.stdout) + _text(exc.stderr) + f"\n(killed after {timeout_s:g} s)"
        code = None
    seconds = round(time.monotonic() - started, 1)
    log.write_text(output)
    last = [line for line in output.splitlines() if line.strip()]
    outcome = "ok" if code == 0 else ("timeout" if code is None else f"exit {code}")
    return Row(name, outcome, seconds, last[-1][:200] if last else "")


def bench_lines(log: Path) -> list[str]:
    """The bench's own summary lines (the cycle, the ratio, where the counters' time went)."""
    keep = ("containment probe:", "cycle without", "cycle with", "ratio counters", "where the counters", "GPU:")
    return [line for line in _read(str(log)).splitlines() if line.startswith(keep)]


def table(rows: list[Row]) -> str:
    width = max(len(r.step) for r in rows)
    lines = [f"{'step':<{width}}  {'outcome':<13} {'seconds':>7}  reason"]
    lines += [f"{r.step:<{width}}  {r.outcome:<13} {r.seconds:>7.1f}  {r.why}" for r in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rung-timeout", type=float, default=45.0, help="seconds each rung's probe may take")
    parser.add_argument("--all-rungs", action="store_true", help="every rung and check, not up to the first that works")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds the whole may take (steps are cut)")
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--attempts", type=int, default=5, help="the bench's evaluations per cycle")
    parser.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="ncu-probe-"))
    out.mkdir(parents=True, exist_ok=True)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    began = time.monotonic()
    rows: list[Row] = []
    extra: list[str] = []
    try:
        lines, ncu = facts(args.device)
    except Exception as exc:  # noqa: BLE001 - the facts are a diagnostic too
        lines, ncu = [f"facts: {type(exc).__name__}: {exc}"], None
    print("\n".join(lines), flush=True)
    if ncu is not None:
        print("rungs (the trusted probe under each):", flush=True)
        rows += try_rungs(args.device, ncu, logs, args.rung_timeout, every=args.all_rungs)
    python = sys.executable
    deadline = began + args.budget

    def step(name: str, kind: str, argv: list[str], log: str, env: dict[str, str] | None = None) -> Row:
        left = deadline - time.monotonic()
        if left < 30:
            row = Row(name, "not run", 0.0, f"past the {args.budget:g} s budget")
        else:
            row = run_step(name, argv, logs / log, min(STEP_LIMITS_S[kind], left), env)
        print(f"  {row.step}: {row.outcome} in {row.seconds} s", flush=True)
        return row

    if not args.skip_tests:
        test = [python, "-m", "pytest", "tests/tools/test_counters_gpu.py", "-q", "-s", "-p", "no:cacheprovider"]
        rows.append(step("pytest test_counters_gpu.py", "test", test, "test_counters_gpu.log"))
    if not args.skip_bench:
        bench_out = logs / "bench"
        bench_out.mkdir(exist_ok=True)
        bench = [python, "bench/counters_cost.py", "--attempts", str(args.attempts)]
        env = {**os.environ, "OUT": str(bench_out)}
        rows.append(step("bench/counters_cost.py", "bench", bench, "counters_cost.log", env))
        extra = bench_lines(logs / "counters_cost.log")
        record = bench_out / "counters_cost.json"
        if record.exists():
            shutil.copy(record, out / "counters_cost.json")
            prompts = [python, "scripts/counter_prompts.py", "--evaluation", str(record), "--out", str(out)]
            rows.append(step("scripts/counter_prompts.py", "prompts", prompts, "counter_prompts.log"))
    summary = "\n".join(
        [*lines, "", *extra, "", table(rows) if rows else "(nothing ran)", f"total {time.monotonic() - began:.0f} s"]
    )
    (out / "summary.txt").write_text(summary + "\n")
    with tarfile.open(out / "logs.tar.gz", "w:gz") as archive:
        archive.add(logs, arcname="logs")
    shutil.rmtree(logs, ignore_errors=True)
    print()
    if extra:
        print("\n".join(extra))
        print()
    print(table(rows) if rows else "(nothing ran)")
    print(f"total {time.monotonic() - began:.0f} s; logs in {out}")
    ladder_worked = any(r.outcome == "ok" for r in rows if r.step.startswith("rung: "))
    steps_passed = all(r.outcome == "ok" for r in rows if not r.step.startswith(("rung: ", "check: ")))
    return 0 if ladder_worked and steps_passed else 1


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


if __name__ == "__main__":
    sys.exit(main())
