#!/bin/bash
# The rest of the environment `precisionflow run` needs on the GPU machine for the default target
# (`gpu_acceptance.py pack-default --env`): every package of requirements.lock as a wheel for that
# machine's Python (3.12) -- TensorFlow, Snakemake, Hydra, MLflow and what they import -- but the CPU
# onnxruntime (the lean packages bring onnxruntime-gpu, first on the path there) and the tools that only
# build docs, test or lint here, plus precisionflow's own wheel, unpacked into one folder, then tar | xz.
# A package published only as source (antlr4-python3-runtime 4.9.3, Hydra's) is built into a wheel here:
# it is pure Python.
#
#   bash benchmarks/gpu_env.sh OUT.tar.xz
set -euo pipefail
out=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
pip=${PIP:-"$root/.venv/bin/pip"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
grep -v -i -E '^(onnxruntime|mkdocs|pymdown|pytest|ruff|mypy|black|shfmt|libclang)' "$root/requirements.lock" \
  | grep '==' > "$work/wanted.txt"
while read -r pin; do
  "$pip" download --quiet --no-deps --only-binary=:all: --dest "$work/wheels" \
    --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any "$pin" 2>/dev/null \
  || "$pip" wheel --quiet --no-deps --wheel-dir "$work/wheels" "$pin"  # source only: pure Python
done < "$work/wanted.txt"
"$pip" wheel --quiet --no-deps --no-build-isolation --wheel-dir "$work/wheels" "$root"
mkdir "$work/env"
for wheel in "$work"/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$work/env"; done
# a wheel's .data/purelib and .data/platlib belong beside its package; its scripts and headers are not run there
for data in "$work"/env/*.data; do
  for lib in purelib platlib; do [ -d "$data/$lib" ] && cp -r "$data/$lib/." "$work/env/"; done
  rm -rf "$data"
done
tar -C "$work/env" -cf - . | xz -6 -T2 > "$out"
ls -l "$out"
