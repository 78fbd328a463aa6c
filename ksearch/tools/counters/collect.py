"""Counters of one candidate: Nsight Compute started here, around a contained worker that calls it (the trusted side).

    ncu (trusted, outside every layer; report and log in a folder of its own)
      -> containment launcher -> worker --role counters (the candidate: one call per shape in an NVTX range)
    then ``ncu --import`` of that report, twice (kernel names; kernels renamed by their range), parsed here.

The numbers come from ncu's report, never from the candidate's output. ncu's library runs inside the profiled
process (that is how it reads the GPU's counters), so a hostile candidate could still disturb what it measures of
itself: counters are diagnostics for the model and never decide a verdict, a score or a promotion.

The candidate's layers are the strongest a trusted probe (a one-kernel program, never the candidate: a candidate
that failed on purpose must not weaken its own containment) finds ncu can profile on this machine, tried in order
(``ladder``), once per process; ``KSEARCH_COUNTERS_SANDBOX`` names them instead (``off``, or a comma list).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ksearch.contracts.counters import CounterReport, CounterStatus, ShapeCounters
from ksearch.contracts.exchange import WorkerRequest, WorkerResult
from ksearch.tools.containment import policy
from ksearch.tools.counters import budget, ncu_command
from ksearch.tools.counters.ncu_csv import Launch, RawPageError, parse_raw_page, range_of, shape_counters
from ksearch.tools.evaluator.parent.request import EvalRequest
from ksearch.tools.evaluator.shared.sandbox import kill_group, private_dirs, read_report, read_tail, remove_tree, spawn

SANDBOX_VARIABLE = "KSEARCH_COUNTERS_SANDBOX"
"""``auto`` (default): the strongest rung of ``ladder`` the probe finds ncu works with; ``off``: no layers (the
scrubbed environment and private folder only); a comma list: exactly those layers, network rules open."""
NETWORK_LAYERS = ("netns", "seccomp")
"""Layers that cut the profiled process off from ncu (its injected library reports to ncu over a socket)."""
WORKER_MODULE = "ksearch.tools.evaluator.worker.main"
IMPORT_TIMEOUT_S = 120.0
PROBE_TIMEOUT_S = 120.0
PROBE_MODULE = "ksearch.tools.counters.probe_kernel"


@dataclass(frozen=True)
class Rung:
    """One containment a profiled process may get: its layers, and whether Landlock leaves the network open."""

    name: str
    layers: tuple[str, ...]
    network: bool

    def describe(self) -> str:
        opened = " (network rules open for ncu)" if self.network and self.layers else ""
        return (",".join(self.layers) or "none") + opened


def ladder(machine: tuple[str, ...]) -> list[Rung]:
    """From ``machine``'s layers (``policy.child_layers``), strongest first: all of them; without the network layers;
    without the mount namespace too. Never below userns, caps and Landlock's file rules unless the user says so."""
    no_network = tuple(layer for layer in machine if layer not in NETWORK_LAYERS)
    no_mounts = tuple(layer for layer in no_network if layer != "mountns")
    rungs = [Rung("all layers", machine, False), Rung("no network layers", no_network, True)]
    rungs.append(Rung("no network or mount layers", no_mounts, True))
    unique: list[Rung] = []
    for rung in rungs:
        if not any(r.layers == rung.layers and r.network == rung.network for r in unique):
            unique.append(rung)
    return unique


def requested_rungs(device: str) -> list[Rung] | None:
    """The rungs ``KSEARCH_COUNTERS_SANDBOX`` allows (None: probe the default ladder)."""
    value = os.environ.get(SANDBOX_VARIABLE, "auto").strip()
    if value in ("", "auto"):
        return None
    if value == "off":
        return [Rung("off", (), True)]
    return [Rung("as asked", tuple(v.strip() for v in value.split(",") if v.strip()), True)]


_chosen: dict[str, tuple[Rung | None, str]] = {}
_chosen_lock = threading.Lock()


def choose_rung(device: str, ncu: str) -> tuple[Rung | None, str]:
    """The containment the candidate gets under ncu on ``device``, from a trusted probe (once per process and
    device), or None with why no rung worked."""
    key = device.split(":")[0]
    with _chosen_lock:
        if key not in _chosen:
            asked = requested_rungs(device)
            rungs = asked if asked is not None else ladder(policy.child_layers(device))
            _chosen[key] = probe_rungs(device, ncu, rungs)
        return _chosen[key]


def probe_rungs(device: str, ncu: str, rungs: list[Rung]) -> tuple[Rung | None, str]:
    """The first rung under which ncu profiles a trusted one-kernel program, or None and what each rung gave."""
    tried = []
    for rung in rungs:
        status, detail = run_probe(device, ncu, rung)
        if status == CounterStatus.COLLECTED:
            return rung, ""
        tried.append(f"{rung.name} ({rung.describe()}): {status.value}, {detail}")
        if status == CounterStatus.NO_PERMISSION:  # fewer layers would not help, but capabilities would: said so
            return None, (
                f"{detail}; the kernel's process runs without capabilities ({rung.describe()}): with the driver's "
                f"restriction lifted it needs none ({SANDBOX_VARIABLE} chooses other layers, at your own risk)"
            )
    return None, "ncu could not profile a contained process here: " + "; ".join(tried)


def run_probe(device: str, ncu: str, rung: Rung) -> tuple[CounterStatus, str]:
    with _scratch("ksearch-ncu-probe-") as root:
        trusted, work = _folders(root)
        argv = ncu_command.profile_argv(ncu, trusted, 1, 1, [], sections=("LaunchStats",), metrics=())
        returncode, timed_out = _run(
            argv, PROBE_MODULE, ["--device", device], work, device, rung, stdin_text=None, timeout_s=PROBE_TIMEOUT_S
        )
        if timed_out:
            return CounterStatus.TIMEOUT, f"the probe ran past {PROBE_TIMEOUT_S:g} s"
        status, detail = ncu_command.diagnose(
            _log(trusted), returncode=returncode, report_exists=ncu_command.report_path(trusted).exists()
        )
        if status != CounterStatus.COLLECTED:  # the probe is trusted code: its last words say what broke
            tail = read_tail(work / "stderr.txt", 300).strip().splitlines()
            detail += f" (the probe's stderr: {tail[-1][:200]})" if tail else ""
        return status, detail


def collect_counters(
    request: EvalRequest,
    shapes: list[str],
    *,
    timeout_s: float | None = None,
    launch_cap: int | None = None,
    keep: Path | None = None,
) -> CounterReport:
    """Nsight Compute's counters of ``request``'s candidate on ``shapes`` (benchmark config names, in the order they
    are called), or a report that says why there are none. Never raises for the candidate's or the tool's failure.
    ``keep``: a folder that receives ncu's report (``counters.ncu-rep``, for Nsight Compute's UI), its log and the
    raw pages read from it."""
    started = time.monotonic()

    def report(status: CounterStatus, detail: str = "", **fields: object) -> CounterReport:
        return CounterReport(status=status, detail=detail, wall_s=round(time.monotonic() - started, 3), **fields)  # type: ignore[arg-type]

    if request.device == "cpu":
        return report(CounterStatus.NO_GPU, "the CPU (Triton's interpreter) has no hardware counters")
    ncu = ncu_command.find_ncu()
    if ncu is None:
        return report(
            CounterStatus.NO_NCU,
            f"Nsight Compute (ncu) is not on PATH here; install it, or set {ncu_command.NCU_VARIABLE} to its path",
        )
    from ksearch.tasks.registry import resolve_task  # not at import: the task may import torch

    task = resolve_task(request.task)
    by_name = {c.name: c for c in task.benchmark_configs(request.device)}
    chosen = [name for name in shapes if name in by_name]
    if not chosen:
        return report(CounterStatus.FAILED, f"none of {shapes} is a benchmark shape of {request.task}")
    minimal = minimal_bytes(task, [by_name[name] for name in chosen])
    rung, why = choose_rung(request.device, ncu)
    if rung is None:
        status = CounterStatus.NO_PERMISSION if "ERR_NVGPUCTRPERM" in why else CounterStatus.FAILED
        return report(status, why)
    cap = launch_cap or budget.launch_cap(len(chosen))
    limit = timeout_s or budget.timeout_s(len(chosen))
    common = {"launch_cap": cap, "layers": rung.describe(), "tool": tool_version(ncu)}
    with _scratch("ksearch-counters-") as root:
        trusted, work = _folders(root)
        worker_request = counters_request(request, work, chosen)
        argv = ncu_command.profile_argv(ncu, trusted, len(chosen), cap, [])
        returncode, timed_out = _run(
            argv,
            WORKER_MODULE,
            ["--device", request.device, "--role", "counters"],
            work,
            request.device,
            rung,
            stdin_text=worker_request.model_dump_json(),
            timeout_s=limit,
        )
        if timed_out:
            return report(CounterStatus.TIMEOUT, f"ncu and the candidate were killed after {limit:g} s", **common)
        status, detail = ncu_command.diagnose(
            _log(trusted), returncode=returncode, report_exists=ncu_command.report_path(trusted).exists()
        )
        notes = worker_notes(Path(worker_request.result_path))
        if status != CounterStatus.COLLECTED:
            return report(status, "; ".join(part for part in (detail, notes) if part), **common)
        try:
            shaped = read_ncu_report(ncu, ncu_command.report_path(trusted), chosen, minimal, keep=keep)
        except (RawPageError, OSError, subprocess.SubprocessError) as exc:
            return report(CounterStatus.FAILED, f"ncu's report could not be read: {exc}"[:400], **common)
        finally:
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                for name in (ncu_command.report_path(trusted).name, ncu_command.LOG_NAME):
                    if (trusted / name).is_file():
                        shutil.copy(trusted / name, keep / name)
    if not shaped:
        return report(
            CounterStatus.FAILED, "ncu's report holds no kernel of the marked calls" + _suffix(notes), **common
        )
    capped = sum(s.launches for s in shaped) >= cap
    detail = "; ".join(
        part for part in (f"launch cap of {cap} reached: later kernels not profiled" if capped else "", notes) if part
    )
    return report(CounterStatus.COLLECTED, detail, shapes=shaped, device=request.device, **common)


def counters_request(request: EvalRequest, work: Path, configs: list[str]) -> WorkerRequest:
    """The counters worker's request: public seeds (never an evaluation's secret salts), nothing checked or timed."""
    candidate = work / "candidate.py"
    candidate.write_text(request.candidate.code, encoding="utf-8")
    return WorkerRequest(
        task=request.task,
        device=request.device,
        entry_point=request.candidate.entry_point,
        candidate_path=str(candidate),
        result_path=str(work / "result.json"),
        mode="counters",
        support_dir=str(work / "_support"),
        counter_configs=configs,
    )


def read_ncu_report(
    ncu: str, report: Path, configs: list[str], minimal: dict[str, float], *, keep: Path | None = None
) -> list[ShapeCounters]:
    """The report's launches by shape: one import for the figures, one with each kernel renamed by its NVTX range
    (``keep``: both pages are written there too)."""
    page = _import(ncu, report, by_range=False)
    launches = parse_raw_page(page)
    renamed = _import(ncu, report, by_range=True) if len(configs) > 1 or keep is not None else ""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / "raw_page.csv").write_text(page)
        (keep / "raw_page_by_range.csv").write_text(renamed)
    if len(configs) == 1:
        shape_of = {launch.id: 0 for launch in launches}
    else:
        shape_of = carried_ranges(parse_raw_page(renamed))
    return shape_counters(launches, shape_of, configs, minimal)


def carried_ranges(renamed: list[Launch]) -> dict[int, int]:
    """Each launch's shape from its innermost NVTX range; a launch inside a range of the candidate's own (nested in
    ours, so renamed after it) takes the shape of the launch before it: the shapes' calls run one after another."""
    shape_of: dict[int, int] = {}
    current: int | None = None
    for launch in sorted(renamed, key=lambda x: x.id):
        index = range_of(launch.name)
        current = index if index is not None else current
        if current is not None:
            shape_of[launch.id] = current
    return shape_of


def minimal_bytes(task: object, configs: list) -> dict[str, float]:
    found = {}
    for config in configs:
        try:
            found[config.name] = float(task.flops_and_bytes(config)[1])  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - a task without a cost model for this shape
            continue
    return found


def worker_notes(path: Path) -> str:
    """Which of the candidate's calls failed under ncu (its own report: a note, bounded)."""
    text, _ = read_report(path)
    if not text:
        return ""
    try:
        result = WorkerResult.model_validate_json(text)
    except ValueError:
        return ""
    if result.error:
        return f"the candidate failed under ncu: {result.error.strip().splitlines()[-1][:200]}"
    return "; ".join(note[:200] for note in result.notes[:2])


@functools.cache
def tool_version(ncu: str) -> str:
    """``ncu --version``, once per process and executable."""
    try:
        out = subprocess.run(ncu_command.version_argv(ncu), capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return "ncu"
    return ncu_command.version_of(out.stdout) or "ncu"


def _suffix(notes: str) -> str:
    return f" ({notes})" if notes else ""


@contextlib.contextmanager
def _scratch(prefix: str) -> Iterator[Path]:
    """A folder removed afterwards whatever the candidate left in it (``remove_tree``)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield root
    finally:
        remove_tree(root)


def _folders(root: Path) -> tuple[Path, Path]:
    """(the trusted folder ncu writes its report and log to, the candidate's private folder)."""
    trusted = root / "ncu"
    trusted.mkdir(mode=0o700)
    work = root / "worker"
    private_dirs(work)
    return trusted, work


def _run(
    ncu_argv: list[str],
    module: str,
    args: list[str],
    work: Path,
    device: str,
    rung: Rung,
    *,
    stdin_text: str | None,
    timeout_s: float,
) -> tuple[int | None, bool]:
    """ncu around ``python -P -m module args`` contained by ``rung``; (its exit status, whether it was killed)."""
    with open(work / "stdout.txt", "wb") as out, open(work / "stderr.txt", "wb") as err:
        process = spawn(
            module,
            args,
            cwd=work,
            device=device,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            extra_env={"KSEARCH_PARENT_PID": ""},  # its parent is ncu, not this process
            contain=bool(rung.layers),
            writable=(work,),
            wrapper=tuple(ncu_argv),
            layers=rung.layers,
            network=rung.network,
        )
        try:
            assert process.stdin is not None
            if stdin_text is not None:
                process.stdin.write((stdin_text + "\n").encode())
            process.stdin.close()
        except OSError:
            pass
        try:
            return process.wait(timeout=timeout_s), False
        except subprocess.TimeoutExpired:
            kill_group(process.pid)
            process.wait(timeout=30)
            return None, True


def _import(ncu: str, report: Path, *, by_range: bool) -> str:
    out = subprocess.run(
        ncu_command.import_argv(ncu, report, by_range=by_range),
        capture_output=True,
        text=True,
        timeout=IMPORT_TIMEOUT_S,
        check=True,
    )
    return out.stdout


def _log(trusted: Path) -> str:
    try:
        return (trusted / ncu_command.LOG_NAME).read_text(errors="replace")[-20000:]
    except OSError:
        return ""
