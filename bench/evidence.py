"""Hardware evidence on a GPU (issue 31), measured in one run:

1. compile-bound verdicts: an autotuned TriMul kernel (examples/trimul_triton_autotune.py, 4 + 12 configs) through
   GPU MODE's procedure (``bench/upstream_trimul.py test`` then ``benchmark``: two processes timed from outside,
   torch import included, Triton's cache shared between them as on the leaderboard's runner; ``--official DIR``
   runs GPU MODE's own eval.py instead) against an evaluation in a live ksearch session (what every candidate of a
   search after the first waits for); target: at most 1/3 of upstream's wall time;
2. the profile's cost: evaluations of examples/trimul_triton.py in the same session, alternately with the per-kernel
   profile and without it (``EvalRequest.profile``), and the worker's own ``profile`` stage; target: under 10 % of
   the verdict's time;
3. completeness: every timed shape of a profiled evaluation has a roofline point and a profile;
4. agreement: the resources Triton's JIT records for examples/trimul_triton.py's kernels on this GPU (the driver's
   registers and local memory) against the CPU's ahead-of-time figures for this GPU (``--target-gpu``) at the same
   shapes.

Usage (repo root, GPU machine): ``python bench/evidence.py [--pairs 2] [--official DIR]``. Writes
``$OUT/bench_evidence.json`` when ``OUT`` is set. Exits at once with a message when there is no GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIMPLE = REPO / "examples" / "trimul_triton.py"
AUTOTUNED = REPO / "examples" / "trimul_triton_autotune.py"


def _stages(evaluation) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)s", evaluation.environment.get("stage_seconds", ""))}


def upstream_seconds(kernel: Path, official: str) -> tuple[float, float]:
    """Wall seconds of upstream's ``test`` and ``benchmark`` on a kernel Triton has not compiled yet (its start-up
    files built first, as on a machine that ran Triton before), in one Triton cache as GPU MODE's runner keeps it."""
    sys.path.insert(0, str(REPO / "bench"))
    from fidelity import run_json

    env = {"TRITON_CACHE_DIR": tempfile.mkdtemp(prefix="upstream-triton-")}
    run_json(
        [
            sys.executable,
            "-c",
            "import torch; from ksearch.tools.evaluator.worker.warmup import warm_up_triton; "
            "warm_up_triton('cuda'); print('{}')",
        ],
        env,
    )
    extra = ["--official", official] if official else []
    walls = []
    for mode in ("test", "benchmark"):
        result, wall, returncode = run_json(
            [sys.executable, "bench/upstream_trimul.py", mode, str(kernel), *extra], env
        )
        if returncode != 0:
            raise RuntimeError(f"upstream {mode} failed (rc {returncode}): {json.dumps(result)[-2000:]}")
        walls.append(wall)
    return walls[0], walls[1]


def gpu_jit_resources(kernel: Path) -> list:
    """The kernel module's resources after calls on this GPU at the task's CPU configs' shapes."""
    import torch

    from ksearch.tasks.trimul import TrimulTask, as_data
    from ksearch.tools.evaluator.shared.resources import loaded_resources

    spec = importlib.util.spec_from_file_location("bench_trimul_gpu", kernel)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_trimul_gpu"] = module
    spec.loader.exec_module(module)
    task = TrimulTask()
    for config in task.test_configs("cpu") + task.benchmark_configs("cpu"):
        module.custom_kernel(as_data(task.make_inputs(config, "cuda"), config))
    torch.cuda.synchronize()
    return loaded_resources(module)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2, help="profile on/off pairs of the simple kernel")
    parser.add_argument("--official", default="", metavar="DIR", help="time upstream with GPU MODE's own eval.py")
    parser.add_argument("--no-upstream", action="store_true", help="skip upstream's timing (part 1's ratio)")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("bench/evidence.py: no CUDA GPU visible; this benchmark needs one (exiting)")
        return 0
    sys.path.insert(0, str(REPO))
    import triton

    from ksearch.contracts.candidate import Candidate
    from ksearch.tools.evaluator import EvalRequest
    from ksearch.tools.executors.local import LocalExecutor
    from ksearch.tools.gpu_specs import spec_for_device

    report: dict = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cpu_cores": len(os.sched_getaffinity(0)),
    }
    print(f"device {report['device']}, torch {report['torch']}, triton {report['triton']}, {report['cpu_cores']} cores")
    upstream = None
    if not args.no_upstream:
        test_s, bench_s = upstream_seconds(AUTOTUNED, args.official)
        upstream = test_s + bench_s
        report["upstream_autotuned_s"] = {"test": round(test_s, 2), "benchmark": round(bench_s, 2)}
        print(
            f"upstream on the autotuned kernel: test {test_s:.1f} s + benchmark {bench_s:.1f} s = {upstream:.1f} s",
            flush=True,
        )

    with LocalExecutor() as executor:

        def evaluate(path: Path, tag: str, *, profile: bool = True):
            code = path.read_text(encoding="utf-8") + f"\n# {tag}\n"
            candidate = Candidate(task="trimul", language="triton", code=code, entry_point="custom_kernel")
            started = time.perf_counter()
            evaluation = executor.evaluate(EvalRequest(candidate=candidate, device="cuda", profile=profile))
            seconds = time.perf_counter() - started
            executor.wait_ready("cuda")  # what an LLM call gives the next worker in a search
            if not evaluation.passed:
                raise RuntimeError(
                    f"{path.name} ({tag}) did not pass: {evaluation.summary()}\n{evaluation.log[-3000:]}"
                )
            return evaluation, seconds

        evaluate(SIMPLE, "session warm-up")
        on, off, profile_stage, complete = [], [], [], []
        for i in range(args.pairs):
            for profiled in (True, False) if i % 2 == 0 else (False, True):
                evaluation, seconds = evaluate(SIMPLE, f"pair {i} profile {profiled}", profile=profiled)
                (on if profiled else off).append(seconds)
                if profiled:
                    profile_stage.append(_stages(evaluation).get("profile", 0.0) / seconds)
                    shapes = [t.config for t in evaluation.timings]
                    complete.append(
                        [p.config for p in evaluation.roofline] == shapes
                        and [p.config for p in evaluation.profile] == shapes
                    )
                    last = evaluation
        cost = (statistics.median(on) - statistics.median(off)) / statistics.median(on)
        report["profile"] = {
            "verdict_s_on": on,
            "verdict_s_off": off,
            "share_by_difference": round(cost, 4),
            "share_of_profile_stage": [round(s, 4) for s in profile_stage],
            "every_shape_has_roofline_and_profile": all(complete),
            "roofline": [p.describe() for p in last.roofline],
            "profile": [p.describe() for p in last.profile],
        }
        print(
            f"profile cost: verdict {statistics.median(on):.2f} s with, {statistics.median(off):.2f} s without = "
            f"{cost * 100:.1f} %; the profile stage was {', '.join(f'{s * 100:.1f}' for s in profile_stage)} % of "
            f"its verdict (target < 10 %); every shape has roofline and profile: {all(complete)}"
        )
        for line in report["profile"]["roofline"]:
            print(f"  {line}")
        print("  " + "\n  ".join(report["profile"]["profile"][:2]), flush=True)

        autotuned, autotuned_s = evaluate(AUTOTUNED, "autotuned, live session")
        report["autotuned_session"] = {
            "verdict_s": round(autotuned_s, 2),
            "stages": autotuned.environment.get("stage_seconds", ""),
        }
        if upstream:
            report["autotuned_session"]["ratio"] = round(autotuned_s / upstream, 3)
        ratio = f" = {autotuned_s / upstream:.2f}x upstream (target <= 0.33x)" if upstream else ""
        print(
            f"autotuned kernel in a live session: {autotuned_s:.1f} s{ratio}; stages "
            f"{autotuned.environment.get('stage_seconds', '')}",
            flush=True,
        )

    gpu = spec_for_device(report["device"])
    if gpu is not None:
        from ksearch.tools.evaluator import evaluate as evaluate_once

        code = SIMPLE.read_text(encoding="utf-8")
        ahead = evaluate_once(
            EvalRequest(
                candidate=Candidate(task="trimul", language="triton", code=code, entry_point="custom_kernel"),
                device="cpu",
                target_gpu=gpu.key,
            )
        )

        def figures(resources) -> list:
            return sorted(
                (r.name, r.shared_bytes, r.registers, r.spilled_bytes, r.num_warps, r.num_stages) for r in resources
            )

        jit, aot = figures(gpu_jit_resources(SIMPLE)), figures(ahead.resources)
        report["agreement"] = {"target": gpu.key, "gpu_jit": jit, "cpu_ahead_of_time": aot, "equal": jit == aot}
        print(
            f"resources, GPU JIT vs CPU ahead of time for {gpu.key}: {'equal' if jit == aot else 'DIFFERENT'} "
            f"({len(jit)} kernels)"
        )
        if jit != aot:
            print(f"  GPU: {jit}\n  CPU: {aot}")
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "bench_evidence.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
        print(f"wrote {Path(out) / 'bench_evidence.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
