"""Paired, interleaved timing of two correct candidates on one GPU: what promotion of a new best relies on."""

from __future__ import annotations

import math
import os
import secrets
from typing import TYPE_CHECKING

from ksearch.contracts.evaluation import Comparison, ConfigComparison, Verdict
from ksearch.contracts.exchange import CheckResult, CompareSamples
from ksearch.errors import KsearchError, UserError
from ksearch.tools import timing as timing_mod
from ksearch.tools.containment import allowlist
from ksearch.tools.evaluator.parent.evaluate import build_worker_request
from ksearch.tools.evaluator.parent.ledger import Calibration, TimingLedger
from ksearch.tools.evaluator.parent.ledger_loops import judge_loops
from ksearch.tools.evaluator.parent.ledger_rules import judge
from ksearch.tools.evaluator.parent.outcome import Outcome
from ksearch.tools.evaluator.parent.processes import CANDIDATE_FILE, CHALLENGER_FILE
from ksearch.tools.evaluator.parent.request import CPU_TIMING, EvalRequest
from ksearch.tools.evaluator.parent.session import EvaluatorSession
from ksearch.tools.evaluator.parent.verdicts import failed_evaluation, worker_failed
from ksearch.tools.evaluator.shared.pairing import alternating

if TYPE_CHECKING:
    from ksearch.tasks.base import Task


class ComparisonError(KsearchError):
    """compare() could not time both candidates (a failure of one of them, or of the device)."""


def compare(
    incumbent: EvalRequest, challenger: EvalRequest, *, rounds: int = 5, session: EvaluatorSession | None = None
) -> Comparison:
    """Time two candidates that both passed correctness, interleaved in ONE worker on the same GPU.

    Per benchmark config and round, each candidate gets a short robust block (flush, rotated inputs, median); the
    order alternates A B, B A, A B ... so drift hits both. Per round the log speedup is the mean over configs of
    log(incumbent / challenger); ``speedup`` is exp of its mean over rounds and the interval a 95 % Student t-interval
    over those paired per-round values (per config likewise over its rounds). ``improved`` only when the whole
    interval is above 1. Every block's last output of either candidate is checked by the trusted checker, and blocks
    at random positions end on re-randomised activations, as in robust timing: a candidate that replays where nothing
    was checked fails the comparison instead of winning it. Raises ``UserError`` on the CPU (nothing is timed there,
    except in tests: ``KSEARCH_CPU_TIMING``) and ``ComparisonError`` when a candidate fails while being timed or an
    output it returned is wrong.
    """
    cpu = incumbent.device == "cpu" or challenger.device == "cpu"
    if cpu and not CPU_TIMING.is_on():
        raise UserError("compare() times kernels, and the CPU (Triton interpreter) cannot: use a cuda device")
    if incumbent.device != challenger.device or incumbent.task != challenger.task:
        raise UserError("compare() needs two candidates for the same task on the same device")
    if incumbent.candidate.entry_point != challenger.candidate.entry_point:
        raise UserError("compare() needs both candidates to use the same entry point")
    if rounds < 2:
        raise UserError("compare() needs at least 2 rounds for a confidence interval")
    from ksearch.tasks.registry import resolve_task  # not at import: the evaluator package imports without torch

    task = resolve_task(incumbent.task)
    allowlist.allow(*task.data_paths())  # the candidates' processes build the task: they read these files
    if session is None:
        with EvaluatorSession(incumbent.device, prestart=False) as own:
            outcome, check = _run_pair(own, incumbent, challenger, task, rounds)
    else:
        outcome, check = _run_pair(session, incumbent, challenger, task, rounds)
    assert outcome.result is not None
    names = [c.name for c in task.benchmark_configs(incumbent.device)]
    samples = samples_from_ledger(
        outcome, names, rounds, flush_l2=task.flush_l2, check=check, host_timing=incumbent.device == "cpu"
    )
    comparison = comparison_from_samples(samples, names)
    return comparison.model_copy(update={"device": outcome.result.environment.get("device_name", incumbent.device)})


def samples_from_ledger(
    outcome: Outcome,
    names: list[str],
    rounds: int,
    *,
    flush_l2: bool,
    check: CheckResult | None = None,
    host_timing: bool = False,
) -> list[CompareSamples]:
    """Per config, the median of each run's samples as the parent received them, assigned to a side by the run's
    position in the ABBA order (never by what the worker says); ``ComparisonError`` when the windows cannot be true
    of the parent's clock or are not the ones the robust loop makes (``ledger_rules.judge``,
    ``ledger_loops.judge_loops``). ``check``: the checker's record of the comparison's audits (the facts the
    ledger's allowances use)."""
    ledger = outcome.ledger if outcome.ledger is not None else TimingLedger()
    ledger.host_timing = ledger.host_timing or host_timing
    finding = judge(
        ledger,
        "compare",
        Calibration.of_worker(outcome.calibration, staging_on_host=outcome.staging_on_host),
        configs=names,
        flush_l2=flush_l2,
        input_bytes=check.bench_input_bytes if check is not None else None,
        generation_ms=check.bench_generation_ms if check is not None else None,
        digest_ms=check.bench_digest_ms if check is not None else None,
        fresh_audits_possible=check is not None,
    ) or judge_loops(ledger, "compare", names)
    if finding is not None:
        raise ComparisonError(f"compare() rejected the measurement ({finding.rule}): {finding.evidence}")
    sides = list(alternating(rounds))
    result = []
    for index, name in enumerate(names):
        runs: dict[int, list[float]] = {}
        for window in ledger.by_config().get(index, []):
            runs.setdefault(window.run, []).extend(window.samples_ms)
        if sorted(runs) != list(range(len(sides))):
            raise ComparisonError(f"compare(): config {name} has runs {sorted(runs)}, expected {len(sides)}")
        medians = {"a": [], "b": []}
        for run, side in enumerate(sides):
            medians[side].append(statistics_median(runs[run]))
        result.append(CompareSamples(config=name, incumbent_ms=medians["a"], challenger_ms=medians["b"]))
    return result


def _run_pair(
    session: EvaluatorSession, incumbent: EvalRequest, challenger: EvalRequest, task: Task, rounds: int
) -> tuple[Outcome, CheckResult]:
    """Both candidates timed in one worker, their outputs handed to the checker as in an evaluation; the checker's
    record decides whether any was wrong (``ComparisonError``)."""
    worker = session.take_worker()
    evaluation = session.next_evaluation_id()
    try:
        (worker.work / CANDIDATE_FILE).write_text(incumbent.candidate.code, encoding="utf-8")
        (worker.work / CHALLENGER_FILE).write_text(challenger.candidate.code, encoding="utf-8")
        salt = secrets.randbits(62)
        staging = session.begin(evaluation, incumbent.task, salt, incumbent.compile_timeout_s)
        request = build_worker_request(
            incumbent, worker.work, worker.result_path, task, "robust", salt=salt, staging=staging
        ).model_copy(
            update={"mode": "compare", "challenger_path": str(worker.work / CHALLENGER_FILE), "rounds": rounds}
        )
        outcome = session.run(
            worker,
            request,
            compile_timeout_s=incumbent.compile_timeout_s,
            run_timeout_s=incumbent.run_timeout_s,
            evaluation=evaluation,
        )
        check = session.finish(evaluation, timed=not worker_failed(outcome), timeout=60.0, correctness=False)
        if check.failed_check or check.verdict not in (Verdict.PASSED, Verdict.CRASHED):
            raise ComparisonError(f"compare() refused the measurement: {check.verdict.value}: {check.error}"[:600])
        if worker_failed(outcome) or check.harness_error or check.verdict != Verdict.PASSED:
            scrub = (str(worker.work) + os.sep, str(worker.io) + os.sep, str(worker.work.parent))
            failed = failed_evaluation(incumbent, task, outcome, scrub)
            reason = failed.log.splitlines()[0] if failed.log else check.error or failed.verdict
            raise ComparisonError(f"compare() failed: {reason}")
        return outcome, check
    finally:
        session.retire(worker)


def comparison_from_samples(samples: list[CompareSamples], names: list[str]) -> Comparison:
    """Pure statistics of ``compare``: per-round paired log ratios, t-intervals, geometric means."""
    by_name = {s.config: s for s in samples}
    missing = [n for n in names if n not in by_name]
    if missing or not names:
        raise ComparisonError(f"compare(): no samples for configs {missing or names}")
    rounds = min(min(len(by_name[n].incumbent_ms), len(by_name[n].challenger_ms)) for n in names)
    if rounds < 1:
        raise ComparisonError("compare(): no rounds were timed")
    per_config: list[ConfigComparison] = []
    per_round = [0.0] * rounds
    for name in names:
        entry = by_name[name]
        logs = [math.log(a / b) for a, b in zip(entry.incumbent_ms[:rounds], entry.challenger_ms[:rounds], strict=True)]
        mean, low, high = timing_mod.mean_ci(logs)
        per_config.append(
            ConfigComparison(
                config=name,
                incumbent_median_ms=statistics_median(entry.incumbent_ms),
                challenger_median_ms=statistics_median(entry.challenger_ms),
                ratio=math.exp(mean),
                ci_low=_exp(low),
                ci_high=_exp(high),
            )
        )
        for r, value in enumerate(logs):
            per_round[r] += value / len(names)
    mean, low, high = timing_mod.mean_ci(per_round)
    return Comparison(
        per_config=per_config,
        speedup=math.exp(mean),
        ci_low=_exp(low),
        ci_high=_exp(high),
        improved=_exp(low) > 1.0,
        rounds=rounds,
    )


def statistics_median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _exp(value: float) -> float:
    if value == -math.inf:
        return 0.0
    if value == math.inf:
        return math.inf
    return math.exp(value)
