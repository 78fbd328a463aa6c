"""GPU smoke suite: each task family's shipped kernels through the whole evaluator on a GPU (static checks,
correctness, timing, the audits after each timing loop), once per timing method the task allows.

One case per (kernel, method); each prints one line (and appends it to ``$KSEARCH_SMOKE_LOG`` when set), so
``scripts/gpu_checks.sh smoke`` shows the whole table. The CPU never times, so only this finds a timing method that
crashes on a task's inputs (issue 38: every FlashInfer candidate ended ``crashed`` in the fresh-value audit).
Kept small: FlashInfer tasks time 2 workloads (``?search=2``), TriMul one kernel; the CUDA builds (nvcc, ~50 s) are
the GQA solution's. Run it one case at a time (gpu_checks.sh does): evaluations sharing the GPU slow each
other, and the trusted path's ledger judges what they read.
"""

from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ksearch.contracts.candidate import Candidate
from ksearch.contracts.evaluation import Evaluation, Verdict
from ksearch.tasks.registry import canonical_task_name, resolve_task

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
DATA = REPO / "tests" / "tasks" / "data"
GQA = "gqa_paged_decode_h32_kv4_d128_ps1"
MLA = "mla_paged_decode_h16_ckv512_kpe64_ps1"
PREFILL = "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1"
MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
HAS_FIB = importlib.util.find_spec("flashinfer_bench") is not None
LOG_ENV = "KSEARCH_SMOKE_LOG"


@dataclass(frozen=True)
class Kernel:
    family: str
    label: str
    task: str
    source: str
    """A file path, ``solution:<definition>:<language>`` (a shipped FlashInfer solution) or ``reference`` (the task's
    reference, run as the harness's own baseline)."""
    language: str = "triton"

    def code(self) -> str:
        if self.source == "reference":
            return resolve_task(self.task).reference_source()
        if self.source.startswith("solution:"):
            from ksearch.tasks.flashinfer.solutions import solution_source

            _, definition, language = self.source.split(":")
            return solution_source(definition, language)
        return Path(self.source).read_text(encoding="utf-8")


def _flashinfer(label: str, definition: str, source: str, language: str = "triton") -> Kernel:
    return Kernel("flashinfer", label, f"flashinfer:{definition}?search=2", source, language)


KERNELS = [
    Kernel("softmax", "softmax_expert", "softmax", str(EXAMPLES / "softmax_expert.py")),
    Kernel("trimul", "trimul_triton", "trimul", str(EXAMPLES / "trimul_triton.py")),
    _flashinfer("gqa_decode_triton", GQA, f"solution:{GQA}:triton"),
    _flashinfer("gqa_decode_cuda", GQA, f"solution:{GQA}:cuda", "cuda"),
    _flashinfer("mla_decode_triton", MLA, f"solution:{MLA}:triton"),
    _flashinfer("mla_prefill_reference", PREFILL, "reference"),
    _flashinfer("moe_torch", MOE, f"solution:{MOE}:triton"),
    Kernel(
        "kernelbench",
        "level1_1_LeakyReLU",
        f"kernelbench:{DATA / 'kernelbench/KernelBench/level1/1_LeakyReLU.py'}",
        str(DATA / "kernelbench" / "solutions" / "level1_1_ok.py"),
    ),
    Kernel("userop", "my_op_triton", str(EXAMPLES / "my_op.py"), str(DATA / "my_op_triton.py")),
]


def _cases() -> list:
    cases = []
    for kernel in KERNELS:
        if kernel.family == "flashinfer" and not HAS_FIB:
            cases.append(
                pytest.param(kernel, "-", id=f"{kernel.label}", marks=pytest.mark.skip(reason="no flashinfer-bench"))
            )
            continue
        for method in resolve_task(kernel.task).timing_methods:
            cases.append(pytest.param(kernel, method, id=f"{kernel.family}-{kernel.label}-{method}"))
    return cases


def _line(kernel: Kernel, method: str, evaluation: Evaluation, seconds: float) -> str:
    latency = f"{evaluation.latency_ms:.4f} ms" if evaluation.latency_ms is not None else "no latency"
    text = (
        f"smoke {kernel.family:<11} {kernel.label:<22} {method:<17} {evaluation.verdict.value:<13} "
        f"{evaluation.configs_passed}/{evaluation.configs_total} configs, {len(evaluation.timings)} timed, "
        f"{latency}, {seconds:.0f} s on {evaluation.device}"
    )
    if not evaluation.passed:
        text += " | " + " ".join(evaluation.log.strip().splitlines()[-1:])[:300]
    return text


@pytest.mark.gpu
@pytest.mark.parametrize(("kernel", "method"), _cases())
def test_shipped_kernel_passes_and_is_timed(kernel: Kernel, method: str) -> None:
    from ksearch.tools.evaluator import EvalRequest, evaluate

    task = resolve_task(canonical_task_name(kernel.task))
    candidate = Candidate(task=task.name, language=kernel.language, code=kernel.code(), entry_point=task.entry_point)
    started = time.monotonic()
    evaluation = evaluate(
        EvalRequest(
            candidate=candidate,
            device="cuda",
            timing=True,
            timing_method=method,
            run_timeout_s=600.0,
            harness_baseline=kernel.source == "reference",
        )
    )
    line = _line(kernel, method, evaluation, time.monotonic() - started)
    print(line)
    if os.environ.get(LOG_ENV):
        with open(os.environ[LOG_ENV], "a", encoding="utf-8") as log:
            log.write(line + "\n")
    assert evaluation.verdict == Verdict.PASSED, f"{line}\n{evaluation.log[-4000:]}"
    assert evaluation.timed and len(evaluation.timings) == len(task.benchmark_configs("cuda")), line
