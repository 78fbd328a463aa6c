"""Turning what the evaluation's processes reported into one typed ``Evaluation``, and trimming logs for the LLM.

The parent computes the statistics, the physics floor and the score itself, from the samples it received window by
window while they were taken, held against its own clock (``ledger``); correctness comes only from the trusted
checker.
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import signal
import time
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from ksearch import settings
from ksearch.contracts.evaluation import Evaluation, Rejection, Timing, Verdict
from ksearch.contracts.exchange import CheckResult, ConfigSamples, WorkerResult
from ksearch.redaction import redact
from ksearch.tools import timing as timing_mod
from ksearch.tools.evaluator.parent.exhaustion import cause as ran_out_of
from ksearch.tools.evaluator.parent.ledger import Calibration, TimingLedger, out_of_order, scored_samples
from ksearch.tools.evaluator.parent.ledger_loops import judge_loops
from ksearch.tools.evaluator.parent.ledger_rules import judge
from ksearch.tools.evaluator.parent.outcome import Outcome
from ksearch.tools.evaluator.parent.request import HARNESS_VERSION, EvalRequest

if TYPE_CHECKING:
    from ksearch.tasks.base import Task

LOG_LIMIT = 4000
CANDIDATE_FILE = "candidate.py"


def failed_evaluation(request: EvalRequest, task: Task, outcome: Outcome, scrub: tuple[str, ...]) -> Evaluation:
    """The verdict of a worker that failed on its own (timeout, crash, compile or runtime error, a broken rule)."""
    environment = parent_environment()
    result = outcome.result
    if result is not None:
        environment.update(result.environment)
    device = environment.get("device_name", request.device) if result is not None else request.device
    if outcome.timed_out:
        limit = request.run_timeout_s if outcome.phase in ("run", "timing") else request.compile_timeout_s
        verdict, headline, error = Verdict.TIMEOUT, f"timeout: exceeded {limit:g} s in phase {outcome.phase!r}", ""
    elif result is None:
        verdict, headline, error = Verdict.CRASHED, _crash_headline(outcome, request.device), ""
    elif result.verdict == Verdict.PASSED:  # only reached for a timing pass that reported no samples
        verdict, headline, error = Verdict.CRASHED, "crashed: the worker reported no timing samples", ""
    else:
        verdict, headline = result.verdict, _headline(result)
        error = "" if result.mismatch or result.rejection else result.error  # already in the headline
        if not (result.mismatch or result.rejection):
            ran_out = ran_out_of(
                returncode=outcome.returncode, text=error, oom_killed=outcome.oom_killed, device=request.device
            )
            headline += f" ({ran_out})" if ran_out else ""
    show_output = verdict != Verdict.PASSED
    return Evaluation(
        verdict=verdict,
        device=device,
        configs_passed=result.configs_passed if result else 0,
        configs_total=result.configs_total if result else len(task.test_configs(request.device)),
        mismatch=result.mismatch if result else None,
        rejection=result.rejection if result else None,
        log=trim_log(
            headline,
            error,
            stdout=outcome.stdout if show_output else "",
            stderr=outcome.stderr if show_output else "",
            scrub=scrub,
        ),
        environment=environment,
    )


def checked_evaluation(
    request: EvalRequest, task: Task, outcome: Outcome, check: CheckResult, scrub: tuple[str, ...]
) -> Evaluation:
    """The checker's verdict on a worker that ran to its end (untimed pass, or a failed recheck)."""
    environment = {
        **parent_environment(),
        **(outcome.result.environment if outcome.result else {}),
        **check.environment,
    }
    verdict = check.verdict
    if verdict == Verdict.PASSED:
        headline = ""
    elif check.rejection is not None:
        headline = f"rejected ({check.rejection.rule}): {check.rejection.evidence}"
    elif check.mismatch is not None:
        headline = f"incorrect: {check.mismatch.message}"
    else:
        headline = f"{verdict.value}: {check.error}"
    show = verdict != Verdict.PASSED
    return Evaluation(
        verdict=verdict,
        device=environment.get("device_name", request.device),
        configs_passed=check.configs_passed,
        configs_total=check.configs_total,
        mismatch=check.mismatch,
        rejection=check.rejection,
        log=trim_log(
            headline, "", stdout=outcome.stdout if show else "", stderr=outcome.stderr if show else "", scrub=scrub
        ),
        environment=environment,
    )


def assemble(
    request: EvalRequest, task: Task, method: str, outcome: Outcome, check: CheckResult, scrub: tuple[str, ...]
) -> Evaluation:
    """The evaluation's verdict, in order of precedence: a failed check of the trusted checker; timing messages out of
    order (the worker was stopped at them); the worker's own failure (timeout, crash, compile or runtime error, a
    broken rule); an output the checker never saw; then passed, timed from the worker's samples when the request
    asked for timing."""
    if check.failed_check:
        return checked_evaluation(request, task, outcome, check, scrub)
    disorder = out_of_order(outcome.ledger) if outcome.stopped_out_of_order and outcome.ledger is not None else None
    if disorder is not None:
        base = Evaluation(
            verdict=Verdict.PASSED,
            device=request.device,
            configs_passed=check.configs_passed,
            configs_total=check.configs_total,
            environment=parent_environment(),
        )
        return _rejected(base, disorder.rule, f"{disorder.evidence}; the worker was stopped there", scrub)
    if worker_failed(outcome):
        return failed_evaluation(request, task, outcome, scrub)
    if check.verdict != Verdict.PASSED:
        return checked_evaluation(request, task, outcome, check, scrub)
    if request.timing:
        return timed_evaluation(request, task, method, outcome, check, scrub)
    return checked_evaluation(request, task, outcome, check, scrub)


def worker_failed(outcome: Outcome) -> bool:
    return outcome.timed_out or outcome.result is None or outcome.result.verdict != Verdict.PASSED


def timed_evaluation(
    request: EvalRequest, task: Task, method: str, outcome: Outcome, check: CheckResult, scrub: tuple[str, ...]
) -> Evaluation:
    assert outcome.result is not None
    environment = {**parent_environment(), **outcome.result.environment, **check.environment, "timing_method": method}
    device = environment.get("device_name", request.device)
    base = Evaluation(
        verdict=Verdict.PASSED,
        device=device,
        configs_passed=check.configs_passed,
        configs_total=check.configs_total,
        environment=environment,
    )
    configs = task.benchmark_configs(request.device)
    ledger = outcome.ledger if outcome.ledger is not None else TimingLedger()
    ledger.host_timing = not request.device.startswith("cuda")
    _dump_ledger(ledger, outcome, check, method, task.flush_l2)
    finding = judge(
        ledger,
        method,
        Calibration.of_worker(outcome.calibration, staging_on_host=outcome.staging_on_host),
        configs=[c.name for c in configs],
        flush_l2=task.flush_l2,
        input_bytes=check.bench_input_bytes,
        generation_ms=check.bench_generation_ms,
        digest_ms=check.bench_digest_ms,
        fresh_audits_possible=all(_re_randomisable(task, c) for c in configs),
    ) or judge_loops(ledger, method, [c.name for c in configs])
    if finding is not None:
        return _rejected(base, finding.rule, finding.evidence, scrub)
    samples = []
    for i, config in enumerate(configs):
        scored, left_out = scored_samples(ledger, i, method)
        samples.append(ConfigSamples(config=config.name, method=method, samples_ms=scored, windows_left_out=left_out))
    timings, problem = timings_from_samples(task, method, samples, outcome.wall_s, request.device)
    if problem:
        return base.model_copy(
            update={"verdict": Verdict.CRASHED, "log": trim_log(f"crashed: {problem}", "", scrub=scrub)}
        )
    by_name = {c.name: c for c in configs}
    notes: list[str] = []
    for timing in timings:
        flops, bytes_moved = task.flops_and_bytes(by_name[timing.config])
        floor = timing_mod.physics_floor(timing.median_ms, flops, bytes_moved, device, task.roofline_compute_dtype)
        if floor.violated:
            return _rejected(base, "physics_floor", f"config {timing.config}: {floor.evidence}", scrub)
        if floor.floor_ms is None:
            notes.append(floor.evidence)
            break
    latency_ms, score = task.score(timings)
    return base.model_copy(
        update={
            "timed": True,
            "timings": timings,
            "latency_ms": latency_ms,
            "score": score,
            "log": "\n".join(notes),
            "yardstick": outcome.result.yardstick,
        }
    )


LEDGER_DUMP = settings.LEDGER_DUMP
"""``KSEARCH_LEDGER_DUMP``, a folder: every timed evaluation writes its ledger there as JSON (windows, relays,
calibration, the checker's figures), to see what the parent's checks saw."""


def _dump_ledger(ledger: TimingLedger, outcome: Outcome, check: CheckResult, method: str, flush_l2: bool) -> None:
    folder = LEDGER_DUMP.raw()
    if not folder:
        return
    record = {
        "windows": [dataclasses.asdict(w) for w in ledger.windows],
        "relays": ledger.relays,
        "kernel_clock": ledger.kernel_clock,
        "calibration": outcome.calibration,
        "method": method,
        "flush_l2": flush_l2,
        "input_bytes": check.bench_input_bytes,
        "generation_ms": check.bench_generation_ms,
        "digest_ms": check.bench_digest_ms,
    }
    path = Path(folder) / f"ledger-{time.time_ns()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record), encoding="utf-8")


def _re_randomisable(task: Task, config: object) -> bool:
    """Whether the task lets the timing loops re-randomise some inputs of ``config`` in place (None: all of them)."""
    positions = task.activation_inputs(config)  # type: ignore[arg-type]
    return positions is None or len(positions) > 0


def _rejected(base: Evaluation, rule: str, evidence: str, scrub: tuple[str, ...]) -> Evaluation:
    return base.model_copy(
        update={
            "verdict": Verdict.REJECTED,
            "rejection": Rejection(rule=rule, evidence=evidence),
            "log": trim_log(f"rejected ({rule}): {evidence}", "", scrub=scrub),
        }
    )


def timings_from_samples(
    task: Task, method: str, samples: list[ConfigSamples], wall_s: float, device: str = "cuda"
) -> tuple[list[Timing], str]:
    """Per-config statistics computed here, from the samples the parent received; '' or the reason they are
    unusable: every benchmark config once, finite positive numbers, and a total no longer than the pass's wall
    time."""
    names = [c.name for c in task.benchmark_configs(device)]
    by_name = {s.config: s for s in samples}
    timings: list[Timing] = []
    total_ms = 0.0
    for name in names:
        entry = by_name.get(name)
        if entry is None or not entry.samples_ms:
            return [], f"no timing samples for config {name}"
        if not all(math.isfinite(x) and x > 0 for x in entry.samples_ms):
            return [], f"non-positive or non-finite timing samples for config {name}"
        total_ms += sum(entry.samples_ms)
        stats = timing_mod.summarize(entry.samples_ms)
        timings.append(
            Timing(
                config=name,
                method=method,
                headline=timing_mod.HEADLINE[method],
                windows_left_out=entry.windows_left_out,
                **stats,
            )
        )  # type: ignore[arg-type]
    if total_ms / 1000.0 > wall_s * 1.05 + 0.05:
        return (
            [],
            f"the reported kernel time ({total_ms / 1000:.3g} s) exceeds the timing pass's wall time ({wall_s:.3g} s)",
        )
    return timings, ""


def _headline(result: WorkerResult) -> str:
    if result.verdict == Verdict.PASSED:
        return ""
    if result.rejection is not None:
        return f"rejected ({result.rejection.rule}): {result.rejection.evidence}"
    if result.mismatch is not None:
        return f"incorrect: {result.mismatch.message}"
    return f"{result.verdict.value} in phase {result.phase!r}"


def _crash_headline(outcome: Outcome, device: str = "cpu") -> str:
    code = outcome.returncode
    if code is not None and code < 0:
        try:
            how = f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    extra = f" (unreadable result: {outcome.unreadable})" if outcome.unreadable else ""
    ran_out = ran_out_of(returncode=code, text=outcome.stderr[-4000:], oom_killed=outcome.oom_killed, device=device)
    if ran_out:
        return f"crashed, {ran_out}: the worker {how} in phase {outcome.phase!r} without reporting a result{extra}"
    return f"crashed: the worker {how} in phase {outcome.phase!r} without reporting a result{extra}"


def parent_environment() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "torch": _version("torch"),
        "triton": _version("triton"),
        "harness": HARNESS_VERSION,
    }


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def trim_log(
    headline: str,
    error: str,
    *,
    stdout: str = "",
    stderr: str = "",
    scrub: tuple[str, ...] = (),
    limit: int = LOG_LIMIT,
) -> str:
    """What an LLM needs to fix the kernel, at most ``limit`` chars: the reason, the candidate's own traceback frames
    and the exception, then the ends of stderr and stdout. Temp paths are removed so logs are stable."""

    def clean(text: str) -> str:
        for prefix in scrub:
            text = text.replace(prefix, "")
        return text.strip()

    parts = [clean(headline)]
    frames = clean(candidate_traceback(error))
    if frames:
        parts.append(_clip_middle(frames, limit * 6 // 10))
    room = max(0, limit - sum(len(p) + 1 for p in parts))
    stderr, stdout = clean(stderr), clean(stdout)
    if stderr:
        parts.append("--- stderr (end) ---\n" + _tail(stderr, max(300, room * 2 // 3 if stdout else room) - 21))
    if stdout:
        room = max(0, limit - sum(len(p) + 1 for p in parts))
        parts.append("--- stdout (end) ---\n" + _tail(stdout, max(200, room) - 21))
    return redact(_clip_middle("\n".join(p for p in parts if p), limit))


def candidate_traceback(text: str) -> str:
    """A formatted traceback with only the frames in candidate.py kept, plus every exception line."""
    kept: list[str] = []
    keep_indented = True
    for line in text.splitlines():
        if line.startswith("Traceback (most recent call last)"):
            continue
        if line.startswith("  File "):
            keep_indented = CANDIDATE_FILE in line
        elif not line.startswith("    ") and line.strip():
            keep_indented = True  # an exception line: keep its indented continuation (e.g. Triton's source excerpt)
        else:
            if not keep_indented:
                continue
        if keep_indented:
            kept.append(line)
    return "\n".join(kept)


def _tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[-max(0, limit - 2) :]
    newline = cut.find("\n")
    return "…\n" + (cut[newline + 1 :] if 0 <= newline < len(cut) // 2 else cut)


def _clip_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = f"\n… [{len(text) - limit} chars cut] …\n"
    head = (limit - len(marker)) // 3
    tail = limit - len(marker) - head
    return text[:head] + marker + text[-tail:]
