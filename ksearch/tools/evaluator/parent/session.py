"""An evaluator session: the processes that evaluate candidates on one device, kept between evaluations.

A session owns a trusted checker (started once: torch, CUDA and the reference cache stay warm) and keeps one
candidate worker started ahead of need, so an evaluation waits for neither interpreter start-up nor CUDA
initialisation. Each evaluation uses a fresh worker (one candidate per process, in its own private directory and
process group) and the session relays every message between that worker and the checker:

    worker --phase/handoff--> session --command--> checker
    worker <-----answer------ session <--answer--- checker

A Triton candidate also gets a compile scout (``ksearch.tools.evaluator.worker.scout``): a second worker process of the
same candidate that builds its kernels in parallel into a Triton cache only the two share. The session sends it its
request first and the worker's once the scout's calls are done (the scout's GPU memory is given back by then, so
the two never hold a config's tensors at once; a scout that has not got there within ``SCOUT_CALLS_S`` is killed),
and stops it (a short grace to finish, then its process group is killed) when the worker
settles its correctness outputs, before anything is timed. After the first scout, one is kept started ahead of need
too. So is a profiling process (``ksearch.tools.evaluator.parent.profile_process``) after the first an evaluation takes:
it profiles the candidate once the worker has exited.

The worker's time limits are enforced here from the session's own clock: the compile limit from the request until
the worker starts running configs, then the run limit; at either, the worker's process group is killed. The
verdict of correctness is the checker's record of what it checked, never the worker's report. What the session saw of
one worker is its ``Outcome`` (``outcome``).
"""

from __future__ import annotations

import json
import os
import secrets
import select
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ksearch import settings
from ksearch.contracts.exchange import CheckerCommand, CheckResult, StagingHandle, WorkerRequest, WorkerResult
from ksearch.tools.containment import allowlist
from ksearch.tools.evaluator.parent.exhaustion import oom_kills
from ksearch.tools.evaluator.parent.ledger import TimingLedger
from ksearch.tools.evaluator.parent.outcome import Outcome, ledger_handoff, mark_timed_span, staging_on_host
from ksearch.tools.evaluator.parent.processes import (
    CheckerFailure,
    CheckerProcess,
    LineReader,
    WorkerProcess,
    parse_message,
)
from ksearch.tools.evaluator.shared.sandbox import read_report, remove_tree
from ksearch.tools.scratch import scratch_dir

CHECKER_START_S = 180.0
"""Time allowed for the checker to import torch and initialise the device."""
SCOUT_CALLS_S = 20.0
"""How long the worker's request waits for the scout's calls (a scout started cold needs its interpreter start-up)."""
SCOUT_GRACE_S = 60.0
"""How long a compile scout still running when the worker settles may go on (the worker waits) before it is killed.
Waiting costs the worker nothing it would not spend anyway: what the scout is still building (an autotuned kernel's
configs for the benchmark shapes, say) the worker would otherwise compile itself, one at a time, before timing."""


def timing_poll_s() -> float:
    """``KSEARCH_TIMING_POLL_MS`` in seconds. While a worker times, the parent may read its records every this many
    seconds instead of waking for each one (needs the kernel's send stamps: Linux); a request that waits for an answer
    rings the worker's doorbell and is read at once. An experiment's knob, off by default: on the 2-core CPU machine
    the parent woken for every record raised a 22 us call's median from 24-33 to 44 us (wall-clock events,
    ``bench/RESULTS.md``, "Audits on re-randomised inputs"); with the doorbell, and on a GPU, it is not measured yet."""
    return float(settings.TIMING_POLL_MS.raw() or "0") / 1e3


class EvaluatorSession:
    """Evaluations on one device: a checker and a pre-started worker, reused until ``close``."""

    def __init__(
        self,
        device: str,
        *,
        prestart: bool = True,
        salt: int | None = None,
        worker_now: bool = False,
        scout_now: bool = False,
        profiler_now: bool = False,
    ) -> None:
        """``prestart``: a worker starts with the session and another after each evaluation, ahead of need; without
        it, a worker starts when an evaluation takes one, or with the session (``worker_now``), and a compile scout
        and a profiling process too (``scout_now``, ``profiler_now``), for a caller about to evaluate a candidate
        that wants them: a cold ``ksearch eval`` then starts every process of its evaluation at once, before its own
        imports."""
        self.device = device
        self.prestart = prestart
        self.salt = salt if salt is not None else secrets.randbits(62)
        """Seeds of the correctness configs for the session (so the checker computes their references once)."""
        self.root = scratch_dir("eval")  # named after this process: the next session removes it if it is killed
        self.staging_dir = staging_folder()
        """The one folder of the machine's ``/dev/shm`` a candidate's own holds: the checker's buffer is there."""
        self._workers_started = 0
        self.checker: CheckerProcess | None = None
        self.idle: WorkerProcess | None = None
        self.idle_scout: WorkerProcess | None = None
        """Started after the first scout a session uses (sessions without Triton candidates never need one)."""
        self.idle_profiler: WorkerProcess | None = None
        """Started after the first profiling process a session uses (only GPU sessions use them)."""
        self.staging: StagingHandle | None = None
        self.evaluations = 0
        self.low_memory = settings.LOW_MEMORY.is_on()
        """Evaluations run in low-memory mode (``checker``): asked for, or entered once and kept for the session."""
        self._start_checker()
        if prestart or worker_now:
            self.idle = self._start_worker()
        if scout_now:
            self.idle_scout = self._start_worker()
        if profiler_now:
            self.idle_profiler = self._start_worker(profiler=True)

    # -- processes -----------------------------------------------------------------------------------------------
    def _start_checker(self) -> None:
        if self.checker is not None:
            self.checker.close()
        self.checker = CheckerProcess(self.device, self.root / "check", staging_dir=self.staging_dir)

    def _start_worker(self, *, profiler: bool = False) -> WorkerProcess:
        self._workers_started += 1
        return WorkerProcess(
            self.device, self.root / f"w{self._workers_started}", profiler=profiler, staging_dir=self.staging_dir
        )

    def take_worker(self) -> WorkerProcess:
        """The pre-started worker (or a new one)."""
        worker, self.idle = self.idle, None
        return self._alive_or_new(worker)

    def take_scout(self) -> WorkerProcess:
        """The pre-started scout (or a new one): a worker process like any other, asked for ``mode="scout"``."""
        scout, self.idle_scout = self.idle_scout, None
        return self._alive_or_new(scout)

    def take_profiler(self) -> WorkerProcess:
        """The pre-started profiling process (or a new one), asked for ``mode="profile"``. A prestarting session
        starts the next one now rather than when this one is retired: its profiler's start (4-7 s of CUPTI) then
        runs during this evaluation's compile and check, not into the next evaluation's verdict (an H200, session
        20: started at the retirement, back-to-back evaluations waited ~2 s of it after their timing). It is
        stopped with this one while the worker times (``run``)."""
        profiler, self.idle_profiler = self.idle_profiler, None
        profiler = self._alive_or_new(profiler, profiler=True)
        if self.prestart:
            try:
                self.idle_profiler = self._start_worker(profiler=True)
            except BaseException:
                profiler.kill()  # the caller never got it: nothing else would stop it
                remove_tree(profiler.work.parent)
                raise
        return profiler

    def _alive_or_new(self, worker: WorkerProcess | None, *, profiler: bool = False) -> WorkerProcess:
        """``worker`` if it is still running and may read every path the file layer allows now; one that died while
        idle, or was started before a task's files were allowed (``allowlist.allow``), is replaced by a new one."""
        stale = worker is not None and worker.allowed_version < allowlist.version()
        if worker is None or worker.exited() or stale:
            if worker is not None:
                worker.kill()
                remove_tree(worker.work.parent)
            worker = self._start_worker(profiler=profiler)
        return worker

    def retire(self, worker: WorkerProcess, *, scout: bool = False) -> None:
        """Kill ``worker`` and remove its folder; in a prestarting session, start the next of its kind.

        Never raises: it runs where an evaluation cleans up, one process after another, and an exception there would
        skip the rest (a worker left running with its CUDA context: a red-team review of 2026-11-29) and hide the
        evaluation's outcome. A successor that fails to start here is started when one is next taken."""
        worker.kill()
        remove_tree(worker.work.parent)
        if not self.prestart:
            return
        try:
            if worker.profiler:
                if self.idle_profiler is None:
                    self.idle_profiler = self._start_worker(profiler=True)
            elif scout:
                if self.idle_scout is None:
                    self.idle_scout = self._start_worker()
            elif self.idle is None:
                self.idle = self._start_worker()
        except Exception:  # noqa: BLE001 - see the docstring: ``_alive_or_new`` starts it when it is needed
            pass

    def ask_checker(self, command: CheckerCommand, timeout: float) -> dict[str, Any]:
        assert self.checker is not None
        if not self.checker.alive():
            self._start_checker()
        try:
            return self.checker.ask(command, timeout)
        except CheckerFailure:
            self._start_checker()  # the next evaluation gets a fresh one
            raise

    def close(self) -> None:
        for idle in (self.idle, self.idle_scout, self.idle_profiler):
            if idle is not None:
                idle.kill()
        self.idle = self.idle_scout = self.idle_profiler = None
        if self.checker is not None:
            self.checker.close()
            self.checker = None
        remove_tree(self.root)
        if self.staging_dir is not None:
            remove_tree(self.staging_dir)

    def __enter__(self) -> EvaluatorSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one worker, start to end --------------------------------------------------------------------------------
    def run(
        self,
        worker: WorkerProcess,
        request: WorkerRequest,
        *,
        compile_timeout_s: float,
        run_timeout_s: float,
        evaluation: str = "",
        scout: WorkerProcess | None = None,
        paused: WorkerProcess | None = None,
    ) -> Outcome:
        """Send ``request`` to ``worker`` and relay its handoffs to the checker until it exits or a limit passes;
        ``scout`` (already asked) is stopped when the worker settles or starts timing; ``paused`` (the profiling
        process, which may still be starting the profiler: seconds of CPU work) and the session's next profiling
        process are stopped (SIGSTOP) while the worker times and resumed when the worker ends, so that nothing of the
        evaluation but the worker, the checker and this process runs then. (On an H100 a process starting CUPTI
        beside one timing launches did not slow them, bench/profile_start.py; on a node with few cores per GPU it
        would compete for them.)"""
        quiet = [p for p in (paused, self.idle_profiler) if p is not None]
        try:
            return self._run(
                worker,
                request,
                compile_timeout_s=compile_timeout_s,
                run_timeout_s=run_timeout_s,
                evaluation=evaluation,
                scout=scout,
                paused=quiet,
            )
        finally:
            for process in quiet:
                process.resume()

    def _run(
        self,
        worker: WorkerProcess,
        request: WorkerRequest,
        *,
        compile_timeout_s: float,
        run_timeout_s: float,
        evaluation: str,
        scout: WorkerProcess | None,
        paused: list[WorkerProcess],
    ) -> Outcome:
        started = time.monotonic()
        outcome = Outcome(
            ledger=TimingLedger(),
            oom_kills_before=oom_kills(),
            staging_on_host=staging_on_host(request.staging, request.device),
        )
        if not worker.wait_ready(started + compile_timeout_s):
            outcome.phase_seconds["start"] = round(time.monotonic() - started, 3)
            return self._finish(worker, outcome, timed_out=not worker.exited(), started=started)
        outcome.phase_seconds["start"] = round(time.monotonic() - started, 3)
        outcome.calibration = dict(worker.calibration)
        ledger = outcome.ledger
        go = time.monotonic()
        deadline = go + compile_timeout_s
        phase_started = go
        worker.send(request.model_dump_json())
        timing_seen = False
        poll_s = timing_poll_s()
        backlog = list(worker.backlog)
        worker.backlog.clear()
        while True:
            if backlog:
                lines = [(time.time(), line) for line in backlog]
            elif outcome.phase == "timing" and worker.messages.kernel_stamps and poll_s > 0:
                # The kernel stamped each record when it was sent, so reading late moves no time; a parent woken by
                # every window's records could take the worker's CPU in the middle of its timed calls. A request that
                # waits for an answer rings the doorbell: it is read at once.
                if select.select([worker.doorbell], [], [], poll_s)[0]:
                    try:
                        os.read(worker.doorbell, 1 << 16)
                    except OSError:
                        pass
                worker.messages.drain()
                lines = worker.messages.stamped_lines(0.0)
            else:
                lines = worker.messages.stamped_lines(0.05)
            for stamp, line in lines:  # stamp: when the worker sent the line (the kernel's clock where it stamps)
                message = parse_message(line)
                op = message.get("op")
                if op in ("go", "timed", "ran"):
                    # Recorded from the first ``timing`` phase on, whatever phase is announced after it: a candidate
                    # writing ``phase`` lines on the channel could otherwise hide the harness's own records (a
                    # red-team review of 2026-11-28). No honest phase after timing sends any.
                    if timing_seen:
                        if op == "go":
                            ledger.go(
                                message.get("config"), message.get("run"), stamp, null=message.get("null") is True
                            )
                        elif op == "timed":
                            ledger.timed(message.get("config"), message.get("samples"), stamp)
                        else:
                            ledger.ran(message.get("config"), message.get("run"), message.get("windows"))
                    continue
                if op == "phase":
                    now = time.monotonic()
                    outcome.phase_seconds[outcome.phase] = round(now - phase_started, 3)
                    phase_started = now
                    new = str(message.get("phase", outcome.phase))
                    mark_timed_span(outcome, new)
                    timing_seen = timing_seen or new == "timing"
                    if new in ("run", "timing") and outcome.phase in ("start", "load"):
                        deadline = now + run_timeout_s
                    if new == "timing" and scout is not None:  # a worker without a checker never settles
                        self.stop_scout(scout, outcome, grace_s=0.0)
                        scout = None
                    if new == "timing":
                        for process in paused:
                            process.pause()
                    outcome.phase = new
                elif op in ("handoff", "grow", "settle", "seed"):
                    if op == "settle" and scout is not None:
                        self.stop_scout(scout, outcome, grace_s=SCOUT_GRACE_S)
                        scout = None
                    if op == "handoff" and timing_seen:
                        ledger_handoff(ledger, message)
                    asked = time.monotonic()
                    answer = self._relay(message, evaluation, max(1.0, deadline - asked), outcome)
                    outcome.checker_s += time.monotonic() - asked
                    if answer is None or not worker.send(json.dumps(answer)):
                        break
                    if timing_seen:  # the worker waited from its request to this answer
                        ledger.relay(stamp, time.time())
            backlog = []
            if timing_seen and ledger.malformed:
                # Decided: only a candidate writing on the harness's channel puts records out of order. Waiting for the
                # rest of the loop (a second full evaluation, were it judged later) would only spend GPU time.
                outcome.stopped_out_of_order = True
                break
            if outcome.harness_error or worker.exited() or worker.messages.closed:
                break
            if time.monotonic() > deadline:
                outcome.timed_out = True
                break
        outcome.phase_seconds[outcome.phase] = round(time.monotonic() - phase_started, 3)
        mark_timed_span(outcome, None)
        ledger.kernel_clock = worker.messages.kernel_stamps
        if worker.messages.crowded_records:
            ledger.malformed.append(f"{worker.messages.crowded_records} records held several messages under one stamp")
        return self._finish(worker, outcome, timed_out=outcome.timed_out, started=go)

    @staticmethod
    def stop_scout(scout: WorkerProcess, outcome: Outcome, *, grace_s: float) -> None:
        """Let the scout finish within ``grace_s`` (only one that is compiling: one still starting or calling could not
        help in time), then kill its process group, so that nothing of it runs while the worker times. A scout that
        finished leaves its own stage times (import, calls, compile)."""
        finished = scout.wait_exit(grace_s if scout.latest_phase() == "compile" else 0.0)
        scout.kill()
        if not finished:
            return
        text, _ = read_report(scout.result_path)
        if text is None:
            return
        try:
            report = WorkerResult.model_validate_json(text)
        except ValidationError:
            return
        outcome.scout_s = round(sum(report.stage_seconds.values()), 3)

    def _relay(
        self, message: dict[str, Any], evaluation: str, timeout: float, outcome: Outcome
    ) -> dict[str, Any] | None:
        """One worker message to the checker and its answer back (None when the checker failed)."""
        try:
            if message.get("op") == "grow":
                command = CheckerCommand(
                    op="staging", evaluation=evaluation, min_bytes=int(message.get("min_bytes", 0))
                )
            elif message.get("op") == "settle":
                command = CheckerCommand(op="settle", evaluation=evaluation)
            elif message.get("op") == "seed":
                input_seed = message.get("input_seed")
                command = CheckerCommand(
                    op="seed",
                    evaluation=evaluation,
                    config_index=int(message.get("config_index", -1)),
                    kind=message.get("kind"),
                    input_seed=None if input_seed is None else int(input_seed),
                )
            else:
                from ksearch.contracts.exchange import Handoff

                command = CheckerCommand(op="handoff", evaluation=evaluation, handoff=Handoff.model_validate(message))
        except (ValidationError, ValueError, TypeError, OverflowError) as exc:  # int() of a list, of an infinity
            return {"op": "reply", "ok": False, "message": f"malformed message from the worker: {exc}"[:300]}
        try:
            return self.ask_checker(command, timeout)
        except CheckerFailure as exc:
            outcome.harness_error = str(exc)
            return None

    def _finish(self, worker: WorkerProcess, outcome: Outcome, *, timed_out: bool, started: float) -> Outcome:
        worker.kill()
        outcome.timed_out = timed_out
        outcome.returncode = worker.process.returncode
        outcome.oom_killed = oom_kills() > outcome.oom_kills_before
        outcome.stdout, outcome.stderr = worker.output()
        outcome.wall_s = time.monotonic() - started
        if not timed_out and os.path.lexists(worker.result_path):
            text, why = read_report(worker.result_path)
            if text is None:
                outcome.unreadable = why
            else:
                try:
                    outcome.result = WorkerResult.model_validate_json(text)
                except ValidationError as exc:
                    outcome.unreadable = f"{type(exc).__name__}: {exc}"[:500]
        return outcome

    # -- the checker's side of an evaluation ---------------------------------------------------------------------
    def begin(
        self, evaluation: str, task: str, bench_salt: int, timeout: float, *, observe_work: bool = True
    ) -> StagingHandle | None:
        """Tell the checker an evaluation starts; the staging buffer the worker should use (None on a failure).
        ``observe_work``: judge what the task's ``WorkPolicy`` asks (False for the harness's own baselines)."""
        answer = self.ask_checker(
            CheckerCommand(
                op="begin",
                evaluation=evaluation,
                task=task,
                device=self.device,
                salt=self.salt,
                bench_salt=bench_salt,
                low_memory=self.low_memory,
                observe_work=observe_work,
            ),
            max(timeout, CHECKER_START_S),
        )
        staging = answer.get("staging")
        if not answer.get("ok") or staging is None:
            raise CheckerFailure(
                f"the checker could not begin the evaluation: {answer.get('message') or answer.get('error')}"
            )
        self.low_memory = self.low_memory or bool(answer.get("low_memory"))
        self.staging = StagingHandle.model_validate(staging)
        return self.staging

    def finish(self, evaluation: str, *, timed: bool, timeout: float, correctness: bool = True) -> CheckResult:
        answer = self.ask_checker(
            CheckerCommand(op="finish", evaluation=evaluation, timed=timed, correctness=correctness), timeout
        )
        return CheckResult.model_validate(answer)

    def next_evaluation_id(self) -> str:
        self.evaluations += 1
        return f"e{self.evaluations}"


__all__ = ["EvaluatorSession", "LineReader"]


SHARED_MEMORY = Path("/dev/shm")


def staging_folder() -> Path | None:
    """A new folder of this user's alone beneath ``/dev/shm`` for a session's staging buffer, named after this process
    so that a later session removes it if this one is killed (``scratch``); None without ``/dev/shm``."""
    if not SHARED_MEMORY.is_dir():
        return None
    try:
        return scratch_dir("staging", root=SHARED_MEMORY)
    except OSError:
        return None
