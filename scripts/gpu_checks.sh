#!/usr/bin/env bash
# Run the repository's GPU checks on a GPU machine: `gpu`-marked tests and the bench scripts.
#
#   scripts/gpu_checks.sh [STEP ...]      steps: cuda smoke tests evaluator trimul kernelbench flashinfer audits
#                                         (default: all but audits; any other STEP runs bench/STEP.py)
#
# `smoke` evaluates each task family's shipped kernels with every timing method its task allows
# (tests/test_gpu_smoke.py), one at a time (SMOKE_JOBS=N runs N at once), and prints one line per (kernel,
# method), sorted; also in $OUT/gpu_smoke.txt. Run it
# before resolving any issue that touches the evaluator or a task.
# `tests` runs the gpu-marked tests one at a time: most of them time a kernel, and an honest kernel timed while
# another test's work shares the GPU is rejected or stopped by the trusted timing (`gpu_sharing`; 2026-11-29 saw ten
# honest files rejected with four at once). On an H200 (2026-11-30) the exploit corpus alone took 315 s and the
# honest corpus about 7 minutes. GPU_TEST_JOBS=N runs the tests that time no TriMul kernel N at a time (pytest-xdist)
# when a quick look matters more than trustworthy verdicts; the TriMul ones and the comparisons stay alone (a TriMul
# evaluation holds up to ~60 GB of an 80 GB GPU).
#
# Logs and JSON go to $OUT (or /tmp/ksearch-gpu). On an offline node, put a wheelhouse built by
# scripts/build_wheelhouse.sh in .whl/ first: it is installed into /tmp/site and put on PYTHONPATH.
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/ksearch-gpu}"
mkdir -p "$out"
export OUT="$out" PYTHONUNBUFFERED=1
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "wheelhouse install failed"; exit 1; }
    export PYTHONPATH="$PWD:/tmp/site"
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$out/device.txt"

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(cuda smoke tests evaluator trimul kernelbench flashinfer)
serial="compare_a_kernel_with_itself or real_compare_confirms or full_run_on_gpu or trimul"
parallel=() smoke_parallel=()
# The smoke suite runs one evaluation at a time unless SMOKE_JOBS says otherwise: evaluations sharing the GPU slow
# each other, and the trusted path's ledger must be judged on honest readings (2026-11-25 saw false rejections at -n 4).
if python3 -c "import xdist" 2>/dev/null; then
    [ -n "${GPU_TEST_JOBS:-}" ] && parallel=(-n "$GPU_TEST_JOBS")
    [ -n "${SMOKE_JOBS:-}" ] && smoke_parallel=(-n "$SMOKE_JOBS")
fi
status=0
for step in "${steps[@]}"; do
    echo "=== $step"
    case "$step" in
        cuda) timeout 300 python3 scripts/cuda_smoke.py 2>&1 | tee "$out/cuda_smoke.log" | tail -20 ;;
        smoke) log="$out/gpu_smoke.txt"
               : > "$log"
               # TriMul's cases alone, after the others (an evaluation of it holds up to ~60 GB).
               { KSEARCH_SMOKE_LOG="$log" timeout 900 python3 -m pytest -q -m gpu -p no:cacheprovider \
                     "${smoke_parallel[@]}" tests/test_gpu_smoke.py -k "not trimul" -rs; first=$?
                 KSEARCH_SMOKE_LOG="$log" timeout 600 python3 -m pytest -q -m gpu -p no:cacheprovider \
                     tests/test_gpu_smoke.py -k trimul -rs && [ "$first" -eq 0 ]; } 2>&1 \
                   | tee "$out/gpu_smoke.log" | tail -8
               rc=${PIPESTATUS[0]}
               sort "$log"
               [ "$rc" -eq 0 ] ;;
        tests) { timeout 3600 python3 -m pytest -q -m gpu -p no:cacheprovider "${parallel[@]}" tests -k "not ($serial)" \
                     --ignore=tests/test_gpu_smoke.py -rs \
                 && timeout 600 python3 -m pytest -q -m gpu -p no:cacheprovider tests -k "$serial" \
                     --ignore=tests/test_gpu_smoke.py -rs; } 2>&1 | tee "$out/gpu_tests.log" | tail -25 ;;
        audits) # The fidelity gap (bench/RESULTS.md, "Timing fidelity"): TriMul against upstream's loop with every
                # ledger dumped and the GPU's clocks, power and temperature logged every 100 ms, then how much of each
                # score the audits add (bench/audit_share.py) and the clocks each side ran at (bench/smi_by_run.py).
                nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,nounits -lms 100 \
                    > "$out/smi.csv" 2>/dev/null &
                smi=$!
                KSEARCH_LEDGER_DUMP="$out/ledgers" timeout 420 \
                    python3 bench/fidelity.py --rounds 3 --yardstick 2 examples/trimul_triton_fast.py 2>&1 \
                    | tee "$out/bench_fidelity.log" | tail -24
                kill "$smi" 2>/dev/null
                python3 bench/audit_share.py "$out/ledgers" --json "$out/audit_share.json" | tail -8
                python3 bench/smi_by_run.py "$out/smi.csv" "$out/fidelity.json" ;;
        *) if [ -f "bench/$step.py" ]; then
               timeout 420 python3 "bench/$step.py" 2>&1 | tee "$out/bench_$step.log" | tail -40
           else
               echo "no bench/$step.py"
           fi ;;
    esac
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
exit $status
