#!/bin/bash
# The GPU machine's side of benchmarks/engine_vs_plain.py. STAGE holds the payload's parts
# (part??): LEAN_BYTES of the xz'd lean packages (onnxruntime-gpu 1.31.1 and mlcommons-loadgen
# 6.0.17, cp312 wheels unpacked, the TensorRT provider library dropped), then the xz'd graphs of
# benchmarks/h200_graphs.py. The machine's own python3 gives numpy and onnx.
#   OUT=out bash benchmarks/gpu_evp.sh STAGE LEAN_BYTES engines|serving [engine_vs_plain.py args...]
set -uo pipefail
STAGE=$1; LEAN_BYTES=$2; PART=$3; shift 3
if [ ! -d /root/lean/onnxruntime ]; then
  mkdir -p /root/lean /root/graphs
  cat "$STAGE"/part?? > /root/payload
  head -c "$LEAN_BYTES" /root/payload | xz -d | tar x -C /root/lean
  tail -c +$((LEAN_BYTES + 1)) /root/payload | xz -d | tar x -C /root
  rm /root/payload
fi
LIBS=$(find /opt /usr/local /usr/lib -xdev \( -name 'libcudart.so.1*' -o -name 'libcudnn.so.9*' -o -name 'libcublasLt.so.1*' \
       -o -name 'libcufft.so.1*' -o -name 'libcurand.so.1*' -o -name 'libnvrtc.so.1*' \) 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:)
export LD_LIBRARY_PATH="$LIBS:${LD_LIBRARY_PATH:-}" PYTHONPATH="/root/lean:$PWD/benchmarks:$PWD/.gpu/probe" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/gpus.txt"
python3 benchmarks/engine_vs_plain.py "$PART" /root/graphs "$OUT/$PART.jsonl" "$@" 2>&1 | grep -v "cudnn\|execution plan\|^\s*$\|W:onnxruntime"
