#!/bin/bash
# The GPU node's side of "train here, build and measure there", as run on the H200 for the README
# table. A lean environment: the interpreter without its site-packages (python3 -S), plus only
# numpy, onnx and onnxruntime-gpu unpacked from the payload, and the CUDA/cuDNN libraries on
# LD_LIBRARY_PATH as a GPU node image has them. No TensorFlow, Snakemake, Hydra or MLflow.
#
#   bash benchmarks/gpu_node.sh STAGE_DIR ORT_BYTES [SECONDS]
# STAGE_DIR holds the payload's parts (part??): ORT_BYTES of the xz'd lean site-packages, then the
# xz'd bundle from `precisionflow ship`. Runs the bundle's nodes for at most SECONDS (default 420;
# run again to continue: finished nodes are kept; FALLBACK=DIR names an alternative plan.json and
# manifest.json, used if no engine builds at all; PLAN=DIR replaces the bundle's own), then the independent cross-check, and leaves
# doctor.txt, run.log, crosscheck.json and collected.tar.xz (node folders, engine files left out) in $OUT.
# PROBE=SECONDS then runs benchmarks/cuda_fault_probe.py on the built engines for about that long
# (probe.json); SKIP_RUN=1 runs only the probe (on a machine still warm from the run);
# GRAPH_PROBE=FILE unpacks only the lean packages and runs the probe's second round on that graph.
set -euo pipefail
STAGE=$1; ORT_BYTES=$2; SECONDS_LEFT=${3:-420}
if [ -n "${GRAPH_PROBE:-}" ] && [ ! -d /root/lean/onnxruntime ]; then  # the probe of one graph needs only the lean packages
  mkdir -p /root/lean && { cat "$STAGE"/part?? || true; } | head -c "$ORT_BYTES" | xz -d | tar x -C /root/lean
elif [ -z "${GRAPH_PROBE:-}" ] && [ ! -d /root/bundle/results ]; then
  mkdir -p /root/lean /root/bundle
  cat "$STAGE"/part?? > /root/payload
  head -c "$ORT_BYTES" /root/payload | xz -d | tar x -C /root/lean
  tail -c +$((ORT_BYTES + 1)) /root/payload | xz -d | tar x -C /root/bundle
  rm /root/payload
fi
if [ -n "${PLAN:-}" ]; then  # a re-shipped plan (same upstream files, e.g. after a code change)
  cp "$PLAN/plan.json" "$PLAN/manifest.json" /root/bundle/
fi
LIBS=$(find /opt /usr/local /usr/lib -xdev \( -name 'libcudart.so.1*' -o -name 'libcudnn.so.9*' -o -name 'libcublasLt.so.1*' \
       -o -name 'libcufft.so.1*' -o -name 'libcurand.so.1*' -o -name 'libnvrtc.so.1*' \) 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:)
export LD_LIBRARY_PATH="$LIBS:${LD_LIBRARY_PATH:-}" PYTHONPATH="/root/lean:$PWD/src${EXTRA_PATH:+:$EXTRA_PATH}" PYTHONUNBUFFERED=1
PY="python3 -S"
$PY -c "import sys, numpy, onnx, onnxruntime; print(sys.version.split()[0], 'numpy', numpy.__version__, 'onnx', onnx.__version__, 'onnxruntime', onnxruntime.__version__, onnxruntime.get_available_providers())" | tee "$OUT/doctor.txt"
$PY -c "import importlib.util as u; print('tensorflow importable:', u.find_spec('tensorflow') is not None, '| snakemake:', u.find_spec('snakemake') is not None, '| torch:', u.find_spec('torch') is not None)" | tee -a "$OUT/doctor.txt"
if [ -n "${GRAPH_PROBE:-}" ]; then
  $PY benchmarks/cuda_fault_probe.py --graph "$GRAPH_PROBE" "$OUT/probe_graph.json" 2>&1 | grep -v "No registered plugin" | tee "$OUT/probe_graph.log"
  exit 0
fi
$PY -m precisionflow.pipeline.remote doctor /root/bundle | tee -a "$OUT/doctor.txt"
if [ -n "${SKIP_RUN:-}" ]; then
  $PY benchmarks/cuda_fault_probe.py /root/bundle "$OUT/probe.json" --match "${PROBE_MATCH:-mobilenet_v2}" --seconds "${PROBE:-120}" 2>&1 | tee "$OUT/probe.log"
  exit 0
fi
set +e
timeout "$SECONDS_LEFT" $PY -m precisionflow.pipeline.remote run /root/bundle ${KEEP_GOING:+--keep-going} 2>&1 | tee -a /root/run.log
status=${PIPESTATUS[0]}
if [ "$status" != 0 ] && [ ! -d /root/bundle/results/build_engine ] && [ -n "${FALLBACK:-}" ]; then
  # No engine built at all: ship's alternative plan (e.g. without NHWC) replaces the bundle's plan.
  echo "first engine failed to build: running the fallback plan from $FALLBACK" | tee -a /root/run.log
  cp "$FALLBACK/plan.json" "$FALLBACK/manifest.json" /root/bundle/
  timeout "$SECONDS_LEFT" $PY -m precisionflow.pipeline.remote run /root/bundle 2>&1 | tee -a /root/run.log
  status=${PIPESTATUS[0]}
fi
set -e
cp /root/run.log "$OUT/run.log"
$PY benchmarks/gpu_crosscheck.py /root/bundle "$OUT/crosscheck.json" --seconds 1.5 --batches 1 128 || true
rm -rf /root/collected
$PY -m precisionflow.pipeline.remote collect /root/bundle /root/collected --without-engine-files > /dev/null
tar cf - -C /root/collected . | xz > "$OUT/collected.tar.xz"
if [ -n "${PROBE:-}" ]; then
  $PY benchmarks/cuda_fault_probe.py /root/bundle "$OUT/probe.json" --match "${PROBE_MATCH:-mobilenet_v2}" --seconds "$PROBE" 2>&1 | tee "$OUT/probe.log" || true
fi
echo "run status $status"
