"""Build the shipped CUDA (load_inline) solutions on this GPU and compare them with the references on small inputs.

    python3 scripts/cuda_smoke.py

A quick check (about a minute, mostly nvcc) before the full evaluations: it imports each module in this process, so
run it only on code you trust (ours). Exits non-zero when a build fails or a result is off.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    import torch

    from ksearch.tasks.flashinfer.solutions import solution_source
    from ksearch.tasks.registry import resolve_task
    from ksearch.tasks.trimul import TrimulTask, as_data

    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        trimul = load(REPO / "examples" / "trimul_cuda.py", "trimul_cuda")
        print(f"trimul_cuda built in {time.monotonic() - started:.1f} s")
        task = TrimulTask()
        for config in task.test_configs("cuda")[:6]:
            inputs = task.make_inputs(config, "cuda")
            got = trimul.custom_kernel(as_data(inputs, config))
            want = task.expected(config, inputs)
            err = (got - want).abs().max().item()
            ok = torch.allclose(got, want, rtol=2e-2, atol=2e-2)
            failures += not ok
            print(f"  trimul {config.name}: max abs err {err:.3g} {'ok' if ok else 'FAIL'}")
        source = Path(tmp) / "gqa_cuda.py"
        source.write_text(solution_source("gqa_paged_decode_h32_kv4_d128_ps1", "cuda"))
        started = time.monotonic()
        gqa = load(source, "gqa_cuda")
        print(f"gqa_paged_decode_cuda built in {time.monotonic() - started:.1f} s")
        gqa_task = resolve_task("flashinfer:gqa_paged_decode_h32_kv4_d128_ps1")
        for config in gqa_task.test_configs("cuda")[:4]:
            inputs = gqa_task.make_inputs(config, "cuda")
            out, lse = gqa.run(*inputs)
            want_out, want_lse = gqa_task.expected(config, inputs)
            err_out = (out.float() - want_out.float()).abs().max().item()
            err_lse = (lse - want_lse).abs().max().item()
            ok = err_out < 2e-2 and err_lse < 2e-2
            failures += not ok
            print(f"  gqa {config.name}: max abs err out {err_out:.3g}, lse {err_lse:.3g} {'ok' if ok else 'FAIL'}")
    print("cuda smoke:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
