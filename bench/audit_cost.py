"""What an audit on re-randomised activations costs the checker, whole reference against sampled positions (issue 30).

Each audit inside a ``gpumode-benchmark`` loop waits for the trusted checker, with nothing running on the device:
it regenerates the inputs, digests them, computes the reference and compares (2026-11-29: 2.8 s of TriMul's 4.1 s
of timing loops per evaluation on an H200). With ``Task.expected_sample`` the checker computes the reference at
sampled positions only. Per TriMul benchmark config, the checker's steps timed on the device (median of
``--repeats``): making the set's inputs, making the audit's activations, the digest, the whole reference and its
comparison, the sampled reference and its comparison, how far the sampled values are from the whole reference's; the
check for non-finite values every audit makes of the whole output, and the worker's staging copy of it.
What it did to a verdict (``bench/live_ab.py`` with the switch since removed): bench/RESULTS.md.

    python bench/audit_cost.py [--repeats 5]

Needs a CUDA GPU. Writes ``$OUT/bench_audit_cost.json`` when ``OUT`` is set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _timed_ms(work: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Median milliseconds of ``work()`` (synchronised), and its last result."""
    import torch

    times, result = [], None
    for _ in range(repeats):
        torch.cuda.synchronize()
        started = time.perf_counter()
        result = work()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times), result


def components(repeats: int) -> list[dict]:
    """The checker's steps for one audit of each TriMul benchmark config, timed on the GPU."""
    import torch

    from ksearch.tasks.trimul import TrimulTask

    task = TrimulTask()
    rows = []
    for config in task.benchmark_configs("cuda"):
        rows.append(_component_row(task, config, repeats))
        torch.cuda.empty_cache()
    return rows


def _component_row(task, config, repeats: int) -> dict:
    import torch

    from ksearch.tools.evaluator.shared.seeds import AUDIT_BASE, SEED_STRIDE, input_digest

    fresh_config = config.model_copy(update={"seed": config.seed + AUDIT_BASE * SEED_STRIDE})
    generate_ms, inputs = _timed_ms(lambda: task.make_inputs(config, "cuda"), repeats)
    activations_ms, fresh = _timed_ms(lambda: task.make_inputs(fresh_config, "cuda"), repeats)
    audited = [fresh[0], fresh[1], *inputs[2:]]
    digest_ms, _ = _timed_ms(lambda: input_digest(audited), repeats)
    whole_ms, expected = _timed_ms(lambda: task.expected(config, audited), repeats)
    output = expected.clone()
    compare_ms, mismatch = _timed_ms(lambda: task.check(config, output, expected), repeats)
    assert mismatch is None
    generator = torch.Generator(device="cuda").manual_seed(1)
    sampled_ms, sample = _timed_ms(lambda: task.expected_sample(config, audited, generator), repeats)
    sampled_compare_ms, mismatch = _timed_ms(lambda: task.check_sample(config, output, sample), repeats)
    assert mismatch is None
    difference = float((sample.values - sample.gather(expected)).abs().max())
    finite_ms, _ = _timed_ms(lambda: bool(torch.isfinite(output).all()), repeats)  # the judge's check of any audit
    staging = torch.empty(output.numel() * output.element_size(), dtype=torch.uint8, device="cuda")
    stage_ms, _ = _timed_ms(lambda: staging.view(output.dtype).view(output.shape).copy_(output), repeats)  # worker
    print(
        f"{config.name}: generate {generate_ms:.2f} + activations {activations_ms:.2f} + digest {digest_ms:.2f} ms;"
        f" whole reference {whole_ms:.2f} + compare {compare_ms:.2f} ms; sampled {sampled_ms:.2f} + compare"
        f" {sampled_compare_ms:.2f} ms ({sample.positions} of {expected.numel()} values, max |diff|"
        f" {difference:.2e}); non-finite check {finite_ms:.2f}, staging copy {stage_ms:.2f} ms",
        flush=True,
    )
    return {
        "config": config.name,
        "generate_ms": generate_ms,
        "activations_ms": activations_ms,
        "digest_ms": digest_ms,
        "whole_reference_ms": whole_ms,
        "whole_compare_ms": compare_ms,
        "sampled_reference_ms": sampled_ms,
        "sampled_compare_ms": sampled_compare_ms,
        "sampled_positions": sample.positions,
        "output_elements": expected.numel(),
        "max_abs_difference": difference,
        "nonfinite_check_ms": finite_ms,
        "staging_copy_ms": stage_ms,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timings of each step")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 1
    report: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    print(f"device {report['device']}, torch {report['torch']}", flush=True)
    report["components"] = components(args.repeats)
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "bench_audit_cost.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
