#!/bin/bash
# The lean packages the GPU node's interpreter runs with (`python3 -S`, benchmarks/gpu_path.sh): the
# cp312 wheels of what `remote doctor` asks for -- numpy and onnx at the lock's versions, onnxruntime-gpu
# at the version the GPU targets declare, LoadGen, scipy, filelock, psutil -- and what they import
# (protobuf, ml_dtypes, typing_extensions, flatbuffers, packaging), unpacked into one folder, the
# TensorRT provider library dropped (no TensorRT there), then tar | xz for `gpu_acceptance.py pack --lean`.
#
#   bash benchmarks/gpu_lean.sh OUT.tar.xz
set -euo pipefail
out=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
lock() { grep -i "^$1==" "$root/requirements.lock"; }  # the lock's pin, so the plan's versions hold there
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pip download --quiet --no-deps --only-binary=:all: --dest "$work/wheels" \
  --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 --platform any \
  "$(lock numpy)" "$(lock onnx)" "onnxruntime-gpu==1.31.1" "$(lock mlcommons-loadgen)" "$(lock scipy)" \
  "$(lock filelock)" "$(lock psutil)" "$(lock protobuf)" "$(lock ml_dtypes)" "$(lock typing_extensions)" \
  flatbuffers packaging
mkdir "$work/lean"
for wheel in "$work"/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$work/lean"; done
rm "$work"/lean/onnxruntime/capi/libonnxruntime_providers_tensorrt.so
tar -C "$work/lean" -cf - . | xz -6 -T2 > "$out"
ls -l "$out"
