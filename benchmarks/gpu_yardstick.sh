#!/bin/bash
# On the GPU machine, after benchmarks/gpu_evp.sh unpacked the lean packages: the yardstick of
# ../shared/probes/serving (carried as .gpu/probe) on its own graph, and the same graph family made
# by the product's converter, so the two plain loops are compared on one machine in one call.
set -uo pipefail
P=$PWD/.gpu/probe; M=/root/rn50; mkdir -p $M
LIBS=$(find /opt /usr/local /usr/lib -xdev \( -name 'libcudart.so.1*' -o -name 'libcudnn.so.9*' -o -name 'libcublasLt.so.1*' \
       -o -name 'libcufft.so.1*' -o -name 'libcurand.so.1*' -o -name 'libnvrtc.so.1*' \) 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:)
export LD_LIBRARY_PATH="$LIBS:${LD_LIBRARY_PATH:-}" PYTHONPATH="/root/lean:$PWD/benchmarks" PYTHONUNBUFFERED=1
[ -f $M/rn50_fp32.onnx ] || xz -dc $P/resnet50_const.onnx.xz > $M/rn50_fp32.onnx
[ -f $M/rn50r_fp32.onnx ] || python3 $P/randw.py $M/rn50_fp32.onnx $M/rn50r_fp32.onnx
[ -f $M/rn50r_fp16.onnx ] || python3 $P/fp16.py $M/rn50r_fp32.onnx $M/rn50r_fp16.onnx
python3 - <<'PY' 2>&1 | grep -v "cudnn\|execution plan\|W:onnxruntime" | tee -a "$OUT/yardstick.jsonl"
import json, sys, onnx
sys.argv = ["x"]
import onnxruntime as ort; ort.preload_dlls()
from onnxruntime.transformers.float16 import convert_float_to_float16
from engine_vs_plain import plain
m = onnx.load("/root/rn50/rn50r_fp32.onnx")
onnx.save(convert_float_to_float16(m, keep_io_types=True), "/root/rn50/rn50r_fp16_keepio.onnx")
for g in ("rn50r_fp16", "rn50r_fp16_keepio", "rn50r_fp32"):
    for b in (1, 128, 256):
        print(json.dumps({"graph": g, "batch": b, **plain(__import__("pathlib").Path("/root/rn50/" + g + ".onnx"), "HEURISTIC", b, 1.2)}), flush=True)
PY
