"""A stand-in for the ncu executable, for the collector's process handling on a machine without Nsight Compute.

Installed by the tests into a folder of its own (its "installation", outside the sandbox's allow-list but for the
paths the collector opens for ncu), beside the raw-page fixtures. Behaves by ``FAKE_NCU_MODE``: ``ok`` checks that
it can reach a listener of its own as ncu reaches its library in the profiled process (a TCP port on the loopback and
an abstract Unix socket), runs the program it profiles (the real counters worker or probe) and writes a report and a
log as ncu does; ``permission`` logs ncu's ERR_NVGPUCTRPERM error; ``nothing`` logs that no kernel was profiled;
``hang`` never returns. A candidate's report (never the trusted probe's) is changed afterwards as the candidate
could (it shares ncu's folder) by ``forged`` (a plausible page of figures the kernel never had), ``garbage`` (no
page at all) and ``linked`` (a link to ``FAKE_NCU_SECRET``, a file outside the sandbox). Its report is the raw page
itself: ``--import`` prints it (and, with ``--print-nvtx-rename``, the by-range fixture beside this file);
``--version`` a version. Each run appends its argv and what it can see of its own containment to
``FAKE_NCU_ARGV`` (a file in a folder the sandbox may write).
"""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
argv = sys.argv[1:]


def containment() -> str:
    """What this process sees of its layers: its user namespace's id map, seccomp's mode, capabilities."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    uid_map = " ".join(Path("/proc/self/uid_map").read_text().split())
    return f"uid_map={uid_map} seccomp={status['Seccomp'].strip()} capeff={status['CapEff'].strip()}"


def reach_own_listener() -> str:
    """'' when a TCP port on the loopback and an abstract Unix socket of this process's own can be connected to."""
    try:
        with socket.socket() as server, socket.socket() as client:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            client.connect(server.getsockname())
        with socket.socket(socket.AF_UNIX) as server, socket.socket(socket.AF_UNIX) as client:
            name = f"\0fake-ncu-{os.getpid()}"
            server.bind(name)
            server.listen(1)
            client.connect(name)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


with open(os.environ.get("FAKE_NCU_ARGV", os.devnull), "a") as seen:
    seen.write(f"{' '.join(argv)}\n{containment()}\n")
if "--version" in argv:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.0.0 (build 1) (public-release)")
    sys.exit(0)
if "--import" in argv:
    report = Path(argv[argv.index("--import") + 1])
    page = report.read_text(errors="replace")
    if not page:
        sys.exit(1)
    sys.stdout.write((HERE / "raw_page_by_range.csv").read_text() if "--print-nvtx-rename" in argv else page)
    sys.exit(0)
log = Path(argv[argv.index("--log-file") + 1])
report = Path(argv[argv.index("--export") + 1] + ".ncu-rep")
program = argv[argv.index("--log-file") + 2 :]
mode = os.environ.get("FAKE_NCU_MODE", "ok")
if mode == "hang":
    time.sleep(600)
if mode == "permission":
    log.write_text("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n")
    sys.exit(1)
unreachable = reach_own_listener()
if unreachable and mode == "ok":
    log.write_text(f"==ERROR== Failed to connect to the profiled process: {unreachable}\n")
    sys.exit(1)
returncode = subprocess.run(program, stdin=sys.stdin, check=False).returncode
if mode == "nothing":
    log.write_text("==WARNING== No kernels were profiled.\n")
    sys.exit(returncode)
log.write_text("==PROF== Connected to process 2\n==PROF== Disconnected from process 2\n")
shutil.copy(HERE / "raw_page.csv", report)
tampered = mode if "--role" in program else "ok"  # the counters worker runs the candidate; the probe does not
if tampered == "forged":
    report.write_text(report.read_text().replace("_ln_proj_rows", "forged_by_the_candidate"))
elif tampered == "garbage":
    report.write_bytes(b"NVIDIA report? no: bytes of the candidate's choosing\n")
elif tampered == "linked":
    report.unlink()
    report.symlink_to(os.environ["FAKE_NCU_SECRET"])
sys.exit(0)
