#!/usr/bin/env bash
# Build a wheelhouse for an offline GPU node: ksearch itself plus every dependency that such a node usually lacks.
#
#   scripts/build_wheelhouse.sh [DEST] [PYTHON_VERSION]      (defaults: wheelhouse/ and 3.12)
#
# torch, triton and numpy are left out on purpose: a GPU node keeps the CUDA builds it has. Install there with
#   python3 -m pip install --no-index --no-deps --find-links DEST DEST/*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
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
