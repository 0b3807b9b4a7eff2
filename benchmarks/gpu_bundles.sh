#!/bin/bash
# The GPU node's side for several bundles in one call (benchmarks/gpu_node.sh does one): the lean
# runtime (numpy, onnx, onnxruntime-gpu, mlcommons-loadgen, pycocotools; cp312 wheels unpacked, the
# TensorRT provider library dropped) and each bundle from `precisionflow ship`, all xz'd and
# concatenated into the parts in STAGE_DIR (part??).
#
#   bash benchmarks/gpu_bundles.sh STAGE_DIR LEAN_BYTES NAME:BYTES [NAME:BYTES ...]
# For each bundle, in order: remote doctor, remote run (at most $SECONDS_EACH s, default 240), then
# its node folders collected (engine files left out) into $OUT/<NAME>.tar.xz with its run log.
set -euo pipefail
STAGE=$1; LEAN_BYTES=$2; shift 2
mkdir -p /root/lean
cat "$STAGE"/part?? > /root/payload
[ -d /root/lean/onnxruntime ] || dd if=/root/payload iflag=count_bytes count="$LEAN_BYTES" status=none | xz -d | tar x -C /root/lean
offset=$LEAN_BYTES
for spec in "$@"; do
  name=${spec%%:*}; bytes=${spec##*:}
  mkdir -p "/root/$name"
  # dd reads exactly the bundle's bytes (tail | head would end in SIGPIPE, fatal under pipefail)
  dd if=/root/payload iflag=skip_bytes,count_bytes skip="$offset" count="$bytes" status=none | xz -d | tar x -C "/root/$name"
  offset=$((offset + bytes))
done
rm /root/payload
LIBS=$(find /opt /usr/local /usr/lib -xdev \( -name 'libcudart.so.1*' -o -name 'libcudnn.so.9*' -o -name 'libcublasLt.so.1*' \
       -o -name 'libcufft.so.1*' -o -name 'libcurand.so.1*' -o -name 'libnvrtc.so.1*' \) 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:)
# The code the bundles were planned with travels as the bundle named "code" (its src/): node ids name it.
CODE=$([ -d /root/code/src ] && echo /root/code/src || echo "$PWD/src")
export LD_LIBRARY_PATH="$LIBS:${LD_LIBRARY_PATH:-}" PYTHONPATH="/root/lean:$CODE" PYTHONUNBUFFERED=1
PY="python3"  # the image gives protobuf and ml_dtypes; the lean folder comes first on PYTHONPATH
nvidia-smi --query-gpu=name,uuid,index,pci.bus_id,driver_version --format=csv | tee "$OUT/gpus.txt"
for spec in "$@"; do
  name=${spec%%:*}
  [ "$name" = code ] && continue
  $PY -m precisionflow.pipeline.remote doctor "/root/$name" 2>&1 | tee "/root/$name.log"
  started=$(date +%s)
  set +e
  timeout "${SECONDS_EACH:-240}" $PY -m precisionflow.pipeline.remote run "/root/$name" --keep-going 2>&1 \
    | grep -v "No registered plugin\|^\[W:onnxruntime" | tee -a "/root/$name.log"
  set -e
  echo "wall_s $(( $(date +%s) - started ))" | tee -a "/root/$name.log"
  rm -rf "/root/$name-collected"
  $PY -m precisionflow.pipeline.remote collect "/root/$name" "/root/$name-collected" --without-engine-files > /dev/null
  cp "/root/$name.log" "$OUT/$name.log"
  tar cf - -C "/root/$name-collected" . | xz > "$OUT/$name.tar.xz"
done
