"""A stand-in for the ncu executable, for the collector's process handling on a machine without Nsight Compute.

Behaves by ``FAKE_NCU_MODE``: ``ok`` runs the program it profiles (the real contained worker or probe) and writes a
report and a log as ncu does; ``permission`` logs ncu's ERR_NVGPUCTRPERM error; ``nothing`` logs that no kernel was
profiled; ``hang`` never returns. ``--import`` prints the raw-page fixtures beside this file; ``--version`` a version.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
argv = sys.argv[1:]
if "--version" in argv:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.0.0 (build 1) (public-release)")
    sys.exit(0)
if "--import" in argv:
    name = "raw_page_by_range.csv" if "--print-nvtx-rename" in argv else "raw_page.csv"
    sys.stdout.write((HERE / name).read_text())
    sys.exit(0)
log = Path(argv[argv.index("--log-file") + 1])
report = Path(argv[argv.index("--export") + 1] + ".ncu-rep")
program = argv[argv.index("--log-file") + 2 :]
with open(os.environ.get("FAKE_NCU_ARGV", os.devnull), "a") as seen:
    seen.write(" ".join(argv) + "\n")
mode = os.environ.get("FAKE_NCU_MODE", "ok")
if mode == "hang":
    time.sleep(600)
if mode == "permission":
    log.write_text("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n")
    sys.exit(1)
returncode = subprocess.run(program, stdin=sys.stdin, check=False).returncode
if mode == "nothing":
    log.write_text("==WARNING== No kernels were profiled.\n")
    sys.exit(returncode)
log.write_text("==PROF== Connected to process 2\n==PROF== Disconnected from process 2\n")
shutil.copy(HERE / "raw_page.csv", report)
sys.exit(0)
