#!/usr/bin/env bash
# Build a wheelhouse for an offline GPU node: ksearch itself plus every dependency that such a node usually lacks.
#
#   scripts/build_wheelhouse.sh [DEST] [PYTHON_VERSION]      (defaults: wheelhouse/ and 3.12)
#   scripts/build_wheelhouse.sh --flashinfer [PYTHON_VERSION]  (the optional FlashInfer group, into .fi-wheels/)
#
# torch, triton and numpy are left out on purpose: a GPU node keeps the CUDA builds it has. Install there with
#   python3 -m pip install --no-index --no-deps --find-links DEST DEST/*.whl
#
# --flashinfer: flashinfer-python 0.7.4 (bench/flashinfer.py --production) and the dependencies its import and its JIT
# builds on an H100 need, less torch and numpy: apache-tvm-ffi, cuda-python (cuda-bindings, cuda-core,
# cuda-pathfinder), cuda-tile, ninja, nvidia-ml-py, einops, tabulate, tqdm, click, packaging, requests. Left out on
# purpose: nvidia-cutlass-dsl (its two library wheels are 92 MB each), nvidia-cudnn-frontend, nccl4py, nccl-extensions:
# `import flashinfer` works without them (tried on 2026-12-07) and the GQA/MLA/MoE paths used here do not load them.
# The wheel alone (101 MB) is more than a device call carries (64 MiB with the repository, itself ~11 MB), so it is
# split into pieces of FI_PART_MB (default 40) MiB: .fi-wheels/part1, part2, part3 (~42, 42 and 36 MB; the last also
# holds the dependencies, ~19 MB, and SHA256SUMS). Carry one part per device call on the same warm machine (a part
# already there stays: ignored paths are kept between calls); scripts/install_flashinfer.sh joins, checks, installs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--flashinfer" ]; then
    py="${2:-3.12}"
    out=.fi-wheels
    work=$(mktemp -d)
    rm -rf "$out" && mkdir -p "$out"
    fi_platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
                  --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_27_x86_64
                  --platform manylinux_2_24_x86_64)
    python3 -m pip download --quiet --no-deps -d "$work" flashinfer-python==0.7.4
    python3 -m pip download --quiet --only-binary=:all: --python-version "$py" --implementation cp \
        "${fi_platforms[@]}" -d "$work/deps" "apache-tvm-ffi>=0.1.11,<0.2" "cuda-python>=12.0" "cuda-tile>=1.4.0" \
        ninja nvidia-ml-py einops tabulate tqdm click "packaging>=24.2" requests
    rm -f "$work"/deps/numpy-*.whl "$work"/deps/torch-*.whl
    wheel=$(ls "$work"/flashinfer_python-*.whl)
    name=$(basename "$wheel")
    split -b "${FI_PART_MB:-40}m" -d -a 2 "$wheel" "$work/$name.part-"
    n=0
    for piece in "$work/$name".part-*; do
        n=$((n + 1)) && mkdir -p "$out/part$n" && mv "$piece" "$out/part$n/"
    done
    # The last part also holds the dependencies and the wheel's checksum.
    mv "$work"/deps/*.whl "$out/part$n/"
    (cd "$work" && sha256sum "$name") > "$out/part$n/SHA256SUMS"
    rm -rf "$work"
    du -sh "$out"/part*
    exit 0
fi
dest="${1:-wheelhouse}"
py="${2:-3.12}"
mkdir -p "$dest"

python3 -m pip wheel --quiet --no-deps --wheel-dir "$dest" .

# Everything ksearch needs at run time, resolved for the target Python, minus what the GPU image provides.
reqs=$(mktemp)
python3 - "$reqs" <<'PY'
import sys, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
skip = ("torch", "triton", "numpy")
with open(sys.argv[1], "w") as f:
    for d in deps:
        name = d.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().lower()
        if name not in skip:
            f.write(d + "\n")
PY
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_24_x86_64)
# Resolve the full closure with pip's resolver, for the target interpreter, binary wheels only.
python3 -m pip download --quiet --only-binary=:all: --python-version "$py" --implementation cp \
    "${platforms[@]}" -d "$dest" -r "$reqs"
# Optional FlashInfer-Bench tasks: the package without its dependencies (it never imports flashinfer-python).
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
    "${platforms[@]}" -d "$dest" flashinfer-bench==0.1.2 docstring-parser safetensors
# The report extra, so `ksearch report` and `ksearch serve` work on the node (plotly.js ships inside plotly's wheel).
python3 -m pip download --quiet --only-binary=:all: --python-version "$py" --implementation cp \
    "${platforms[@]}" -d "$dest" "jinja2>=3.1" "plotly>=5.24"
# The dask extra, so the node can run `ksearch worker` (and the agent `--executor dask`): dask, distributed and their
# pure-Python dependencies (plus psutil, msgpack and pyyaml wheels for the target interpreter).
python3 -m pip download --quiet --only-binary=:all: --python-version "$py" --implementation cp \
    "${platforms[@]}" -d "$dest" "dask[distributed]>=2024.8"
# The test extra, so the GPU tests (pytest -m gpu) run on the node too.
python3 -m pip download --quiet --only-binary=:all: --python-version "$py" --implementation cp \
    "${platforms[@]}" -d "$dest" "pytest>=8" "pytest-timeout>=2.3" "pytest-xdist>=3.6"
# The resolver pulls torch-family wheels in as transitive pins of nothing here, but be safe: drop CUDA giants.
rm -f "$dest"/torch-*.whl "$dest"/triton-*.whl "$dest"/numpy-*.whl "$dest"/nvidia_*.whl
rm -f "$reqs"
du -sh "$dest"
ls "$dest" | wc -l
