"""Where does the per-kernel profile's start cost go? (issue 31: the profile stage must cost < 10 % of a verdict.)

On an H200 the profile stage of a TriMul evaluation took 3.2 s, nearly all of it in starting PyTorch's profiler
(``profile_start``), in every fresh worker process. Each variant below runs in a fresh process that first does what a
worker has done by then (CUDA context, torch's matmul and layer norm, a Triton kernel), and prints:

- ``start``/``stop``: seconds to enter and leave ``torch.profiler.profile`` the first time, and ``again`` a second
  time in the same process (is the cost once per process?);
- ``launch_us``: host microseconds per launch of a tiny kernel before any profiling and after the first session
  ended (does an idle profiler leave launches slower?);
- ``gil``: ticks a Python thread made while the profiler started (does the start hold the GIL?);
- ``beside``: a process timing tiny launches while another process starts the profiler (can a profiling process
  start CUPTI while the worker times, without moving the worker's numbers?).

    PYTHONPATH=$PWD python bench/profile_start.py [--json OUT]

Variants: ``cpu+cuda`` (what the worker does), ``cuda`` (device activity only), and each with
``CUDA_MODULE_LOADING=EAGER``. Exits at once without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, os, sys, threading, time
import torch, triton, triton.language as tl
from torch.profiler import ProfilerActivity, profile

@triton.jit
def _double(x, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + i, tl.load(x + i, mask=i < n) * 2, mask=i < n)

t0 = time.perf_counter()
a = torch.randn(512, 512, device="cuda")
(a @ a).sum().item()
torch.nn.functional.layer_norm(a, (512,)).sigmoid().sum().item()
_double[(1,)](a, 256, BLOCK=256)
torch.cuda.synchronize()
context_s = time.perf_counter() - t0
tiny = torch.zeros(1, device="cuda")

def launch_us(n=2000):
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(n):
        tiny.add_(1)
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / n * 1e6

before = min(launch_us() for _ in range(3))
activities = (
    [ProfilerActivity.CUDA] if os.environ["VARIANT"] == "cuda" else [ProfilerActivity.CPU, ProfilerActivity.CUDA]
)
ticks = [0]
running = [True]
def count():
    while running[0]:
        ticks[0] += 1
        time.sleep(0.001)
thread = threading.Thread(target=count, daemon=True)
thread.start()
times = {}
for attempt in ("first", "again"):
    started = time.perf_counter()
    ticks[0] = 0
    p = profile(activities=activities)
    p.__enter__()
    times[attempt + "_start"] = time.perf_counter() - started
    if attempt == "first":
        times["gil_ticks_during_start"] = ticks[0]
    (a @ a).sum().item()
    _double[(1,)](a, 256, BLOCK=256)
    torch.cuda.synchronize()
    started = time.perf_counter()
    p.__exit__(None, None, None)
    times[attempt + "_stop"] = time.perf_counter() - started
    kernels = [e for e in p.profiler.kineto_results.events() if e.device_type() == torch.autograd.DeviceType.CUDA]
    times[attempt + "_device_events"] = len(kernels)
running[0] = False
after = min(launch_us() for _ in range(3))
print(json.dumps({"context_s": context_s, "launch_us_before": before, "launch_us_after": after, **times}))
"""


LAUNCHER = r"""
import json, sys, time
import torch
tiny = torch.zeros(1, device="cuda")
for _ in range(200):
    tiny.add_(1)
torch.cuda.synchronize()
print("ready", flush=True)
rows, ends = [], time.time() + float(sys.argv[1])
while time.time() < ends:
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(500):
        tiny.add_(1)
    torch.cuda.synchronize()
    rows.append((time.time(), (time.perf_counter() - started) / 500 * 1e6))
print(json.dumps(rows))
"""


def beside(folder: Path) -> dict:
    """Does another process starting CUPTI slow this one's launches? A launcher times batches of tiny launches for
    12 s; 3 s in, a second process (the cpu+cuda variant) starts the profiler. A profiling process started beside the
    worker (issue 31's design for the profile's cost) is only possible if this reads alike inside and outside."""
    launcher = folder / "launcher.py"
    launcher.write_text(LAUNCHER, encoding="utf-8")
    timing = subprocess.Popen([sys.executable, str(launcher), "12"], stdout=subprocess.PIPE, text=True)
    assert timing.stdout is not None
    timing.stdout.readline()  # ready
    time.sleep(3.0)
    started = time.time()
    env = {**os.environ, "VARIANT": "cpu+cuda"}
    profiler = subprocess.run(
        [sys.executable, str(folder / "profile_start_child.py")], env=env, capture_output=True, text=True, timeout=120
    )
    ended = time.time()
    rows = json.loads(timing.communicate(timeout=60)[0].strip().splitlines()[-1])
    inside = [us for stamp, us in rows if started <= stamp <= ended]
    outside = [us for stamp, us in rows if stamp < started]
    return {
        "profiler_process_s": round(ended - started, 2),
        "profiler_rc": profiler.returncode,
        "launch_us_before": round(statistics.median(outside), 2) if outside else None,
        "launch_us_beside_profiler": round(statistics.median(inside), 2) if inside else None,
        "batches_beside": len(inside),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="", help="also write the rows here")
    args = parser.parse_args()
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    if subprocess.run([sys.executable, "-c", probe]).returncode != 0:
        print("no GPU: nothing to measure")
        return 0
    rows = []
    child = Path(tempfile.mkdtemp()) / "profile_start_child.py"  # Triton's jit reads the kernel's source file
    child.write_text(CHILD, encoding="utf-8")
    for variant in ("cpu+cuda", "cuda"):
        for loading in ("LAZY", "EAGER"):
            env = {**os.environ, "VARIANT": variant, "CUDA_MODULE_LOADING": loading}
            done = subprocess.run([sys.executable, str(child)], env=env, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                print(f"{variant} {loading}: failed\n{done.stderr[-2000:]}")
                continue
            row = {"variant": variant, "module_loading": loading, **json.loads(done.stdout.strip().splitlines()[-1])}
            rows.append(row)
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    row = {"variant": "beside", **beside(child.parent)}
    rows.append(row)
    print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(rows, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
