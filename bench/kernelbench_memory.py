"""Peak memory of a KernelBench evaluation's steps, in units of the input's size: what the worker and the checker hold
at once, measured on the CPU with the real code paths at a reduced shape (no GPU needed).

Usage (from the repository root):

    python bench/kernelbench_memory.py

Each step's peak comes from the profiler's allocation records (``tests.helpers.memory_peaks``) on level 1's ReLU
(problem 19) shrunk to 64 x 16384; on the CPU draws compute in float64, so the share of their slices is twice a
GPU's. What stays alive between steps (the staging buffer, the checker's private copy of the last output, its
reference cache, the worker's snapshot of the inputs) is read from the code and added where the two processes hold
it at once. The reference cache is given a fifth of an 80 GB GPU in units of a 6.4 GB input (``CACHE_FRACTION``).
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from ksearch.tasks import base  # noqa: E402
from ksearch.tasks.kernelbench import KernelBenchTask, distributions, judging, precision  # noqa: E402
from ksearch.tools.evaluator.checker.checker_records import InputClaim  # noqa: E402
from ksearch.tools.evaluator.checker.main import CACHE_FRACTION  # noqa: E402
from ksearch.tools.evaluator.checker.references import References  # noqa: E402
from ksearch.tools.evaluator.shared.seeds import input_digest  # noqa: E402
from ksearch.tools.evaluator.worker.guard import clone_inputs, count_changed  # noqa: E402
from ksearch.tools.evaluator.worker.timing_runner import ROTATION_SHARE  # noqa: E402
from ksearch.tools.timing.methods import Robust  # noqa: E402
from tests.helpers.memory_peaks import COLUMNS, PROBLEM, ROWS, UNIT, peak_units  # noqa: E402

GPU_BYTES, FULL_INPUT = 79.18 * (1 << 30), 4096 * 393216 * 4


def main() -> None:
    path = Path(tempfile.mkdtemp()) / "19_ReLU.py"
    path.write_text(textwrap.dedent(PROBLEM), encoding="utf-8")
    task = KernelBenchTask(path)
    elements, full = ROWS * COLUMNS, FULL_INPUT // 4
    # every comparison chunk gets the share of the input it has at full size (16 M or 1 M elements of 1.6 G)
    precision.CHUNK = base.CHECK_CHUNK = judging.CHECK_CHUNK = elements * precision.CHUNK // full
    distributions.PROJECTION_CHUNK = max(1, elements * distributions.PROJECTION_CHUNK // full)
    configs = task.test_configs("cpu") + task.benchmark_configs("cpu")
    print(
        f"{'config':10s} {'make_inputs':>11s} {'snapshot':>8s} {'call':>5s} {'unchanged':>9s} {'digest':>6s}"
        f" {'reference':>9s} {'ref f64':>7s} {'judge':>5s}"
    )
    worst: dict[str, float] = {}
    for config in configs:
        make, inputs = peak_units(lambda config=config: task.make_inputs(config, "cpu"), UNIT)
        snap, snapshot = peak_units(lambda inputs=inputs: clone_inputs(inputs), UNIT)
        call, output = peak_units(lambda inputs=inputs: torch.relu(inputs[0]), UNIT)
        same, _ = peak_units(lambda inputs=inputs, snapshot=snapshot: count_changed(inputs[0], snapshot[0]), UNIT)
        digest, _ = peak_units(lambda inputs=inputs: input_digest(inputs), UNIT)
        claim = InputClaim("test", 0, config.seed, config.seed)
        references = References("cpu", 1 << 40)
        row = {"make": make, "snapshot": snap, "call": call, "unchanged": same, "digest": digest}
        for wide in (False, True):
            precision._fits = lambda model, floats, wide=wide: wide  # noqa: SLF001 - as a 6.4 GB input (False)
            ref, (_, expected) = peak_units(
                lambda config=config, claim=claim, refs=references: refs.compute(task, config, claim, ()), UNIT
            )
            row["ref f64" if wide else "reference"] = ref
        judge, _ = peak_units(
            lambda config=config, output=output, expected=expected: task.check(config, output, expected), UNIT
        )
        row["judge"] = judge
        for key, value in row.items():
            worst[key] = max(worst.get(key, 0.0), value)
        print(
            f"{config.name:10s} {make:11.2f} {snap:8.2f} {call:5.2f} {same:9.2f} {digest:6.2f} {row['reference']:9.2f}"
            f" {row['ref f64']:7.2f} {judge:5.2f}"
        )
    budget = CACHE_FRACTION * GPU_BYTES / FULL_INPUT
    references = References("cpu", int(budget * UNIT))
    precision._fits = lambda model, floats: False  # noqa: SLF001
    for index, config in enumerate(task.test_configs("cpu")):
        references.reference(task, config, InputClaim("test", index, config.seed, config.seed))
    cached = references.cache.used / UNIT
    worker = max(worst["make"], 1 + worst["snapshot"], 2 + worst["call"], 3 + worst["unchanged"], 3 + worst["digest"])
    # staging buffer + the last output's private copy + the cache, beside one reference being made and judged
    checker = 2 + cached + max(worst["reference"], 1 + worst["judge"])
    print(f"\nreference cache after one evaluation: {cached:.2f} units (budget {budget:.2f})")
    print(f"correctness, worker peak: {worker:.2f} units (make_inputs; inputs + snapshot + output + comparison)")
    print(f"correctness, checker peak: {checker:.2f} units (staging 1 + private copy 1 + cache + reference)")
    print(
        f"together: {worker + checker:.2f} units = {(worker + checker) * FULL_INPUT / (1 << 30):.1f} GiB at 6.4 GB "
        f"inputs, of {GPU_BYTES / (1 << 30):.1f} GiB"
    )
    for label, size in (("6.4 GB (problem 19)", FULL_INPUT), ("7.5 GB (problem 37)", 112 * 64 * 512 * 512 * 4)):
        sets = max(1, min(Robust().input_sets, int(ROTATION_SHARE * GPU_BYTES) // size))
        # rotated sets + 2 outputs (a block's last and the next) + one set of fresh values + the comparison's flags
        timing_worker = sets + 2 + 1 + worst["unchanged"] + 0.25
        timing_checker = 1 + 1 + 1 + worst["judge"]  # staging, one input set, its expectation, judging
        both = (timing_worker + timing_checker) * size / (1 << 30)
        print(
            f"robust timing at {label}: {sets} rotated sets; worker {timing_worker:.2f} + checker "
            f"{timing_checker:.2f} units = {both:.1f} GiB of {GPU_BYTES / (1 << 30):.1f} GiB"
        )


if __name__ == "__main__":
    main()
