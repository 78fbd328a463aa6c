"""The resource probe of one evaluation, seen from the parent: a worker process in mode ``resources``
(``ksearch.tools.evaluator.worker.aot``) started beside the candidate's worker on the CPU, with Triton's interpreter
off, and read once the verdict is known.

It gets as long as a worker would (the compile and run limits together) when its figures could still turn the
verdict into a compile error, and a short grace otherwise (after a timeout or a crash they could only add
diagnostics): a probe stuck in the candidate's host code never holds an evaluation up for long.
"""

from __future__ import annotations

import time
from pathlib import Path

from ksearch.contracts.evaluation import Verdict
from ksearch.contracts.exchange import WorkerRequest, WorkerResult
from ksearch.tools.evaluator.parent.evidence import VERDICTS_A_LIMIT_OVERRIDES, probe_report
from ksearch.tools.evaluator.parent.processes import CANDIDATE_FILE, WorkerProcess
from ksearch.tools.evaluator.shared.sandbox import read_report, remove_tree

PROBE_GRACE_S = 5.0
"""How long the probe may still run after a verdict its figures cannot change (a timeout, a crash)."""


class ResourceProbe:
    """One probe process: started with its request, read after the verdict, then killed and removed."""

    def __init__(self, folder: Path, code: str, request: WorkerRequest, limit_s: float) -> None:
        """``request``: the worker request to send, its paths still to be set (here, to the probe's own folder)."""
        self.process = WorkerProcess("cpu", folder, interpret=False)
        try:
            (self.process.work / CANDIDATE_FILE).write_text(code, encoding="utf-8")
            request = request.model_copy(
                update={
                    "mode": "resources",
                    "candidate_path": str(self.process.work / CANDIDATE_FILE),
                    "result_path": str(self.process.result_path),
                    "support_dir": str(self.process.work / "_support"),
                }
            )
            self.process.send(request.model_dump_json())
        except BaseException:  # a full disk, a closed pipe: the caller never gets the probe, so stop it here
            self.close()
            raise
        self.deadline = time.monotonic() + limit_s

    def report(self, verdict: Verdict) -> tuple[WorkerResult | None, str]:
        """The probe's report once it exits (killed at its deadline), and what went wrong when there is none."""
        deadline = self.deadline
        if verdict not in VERDICTS_A_LIMIT_OVERRIDES:
            deadline = min(deadline, time.monotonic() + PROBE_GRACE_S)
        finished = self.process.wait_exit(max(0.0, deadline - time.monotonic()))
        self.process.kill()
        seconds = round(time.monotonic() - self.process.started, 3)
        text = read_report(self.process.result_path)[0] if finished else None
        report = probe_report(text)
        if report is None:
            why = "did not finish in time" if not finished else "left no report"
            return None, f"the resource check for the target GPU {why}: the kernels' figures are unknown"
        if report.verdict != Verdict.PASSED:
            first = (report.error.strip().splitlines() or ["?"])[-1][:200]
            return None, f"the resource check for the target GPU could not run the candidate: {first}"
        return report.model_copy(update={"environment": {"resource_probe_s": str(seconds)}}), ""

    def close(self) -> None:
        self.process.kill()
        remove_tree(self.process.work.parent)
