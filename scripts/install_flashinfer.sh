#!/usr/bin/env bash
# Install flashinfer-python 0.7.4 on an offline GPU machine from the parts scripts/build_wheelhouse.sh --flashinfer
# made (.fi-wheels/part1, part2, ..., each carried in a device call of its own on the same warm machine).
#
#   scripts/install_flashinfer.sh [TARGET]      (default /tmp/site: where scripts/gpu_checks.sh installs the wheelhouse)
#
# Joins the wheel's parts, checks its SHA-256, installs it and its dependencies with --target (no index, no
# dependency resolution: torch and numpy are the machine's own), then imports it with TARGET on PYTHONPATH. The
# evaluator's workers see TARGET through PYTHONPATH (passed to them, and readable under the sandbox's file rules);
# flashinfer's JIT calls `ninja`, so where the machine has none on PATH this prints the PATH to export.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:-/tmp/site}"
src=.fi-wheels
sums=$(ls "$PWD/$src"/part*/SHA256SUMS 2>/dev/null | head -1)
[ -n "$sums" ] || { echo "no $src/part*/SHA256SUMS: carry every .fi-wheels/partN first (one per device call)"; exit 1; }
last=$(dirname "$sums")
work=$(mktemp -d)
name=$(awk '{print $2}' "$sums")
for part in "$src"/part*/"$name".part-*; do echo "${part##*.part-} $part"; done | sort | cut -d' ' -f2- \
    | while read -r part; do cat "$part"; done > "$work/$name"
(cd "$work" && sha256sum -c "$sums") || { echo "the joined wheel does not match: a part is missing"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$target" \
    "$work/$name" "$last"/*.whl
rm -rf "$work"
command -v ninja >/dev/null || echo "no ninja on PATH: export PATH=$target/bin:\$PATH"
PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)"
