#!/bin/bash
# The GPU node's side of the users' path (docs/how-to/gpu-node.md), as the GPU acceptance runs it on a
# lent machine whose calls last at most 10 minutes: the bundle `precisionflow ship` made, with the lean
# packages the node image would carry (numpy, onnx, onnxruntime-gpu, LoadGen and their needs, unpacked),
# run by `python -m precisionflow.pipeline.remote run` in the background, collected when it ends.
#
#   bash benchmarks/gpu_path.sh stage PART          # keep one part of the payload (lean.tar.xz + bundle.tar.xz, split)
#   bash benchmarks/gpu_path.sh start LEAN_BYTES [PLAN_DIR]  # unpack, doctor, start `remote run` (its own
#                                                   # session); PLAN_DIR: another plan.json + manifest.json
#   bash benchmarks/gpu_path.sh start-default LEAN_BYTES ENV_BYTES  # the default target instead: the
#                                                   # whole environment (ENV) and WORK's photos and trained
#                                                   # model unpacked, `precisionflow run` started here
#   bash benchmarks/gpu_path.sh wait SECONDS [partial]  # until the run ends or SECONDS pass; at the end, the
#                                                   # plain-loop cross-check and collected.tar.xz in $OUT;
#                                                   # `partial`: at SECONDS, the nodes finished so far (the
#                                                   # lent machine's time is about to run out)
#   bash benchmarks/gpu_path.sh builds SECONDS COUNT # after start-default, for a lease too short for the
#                                                   # job: its COUNT engines built, the run ended, the
#                                                   # streams probe run over them alone on the GPU
#   bash benchmarks/gpu_path.sh streams-fusion      # after a run, on the same held machine: its engines
#                                                   # loaded with cuDNN's fused Conv+bias on and off,
#                                                   # batch-1 streams and one caller's b1/b128 timed
#                                                   # (streams_fusion_probe.py; ~3 min for two engines)
# Nothing here builds or measures: the runner does, node by node, exactly as on a user's GPU node --
# but streams-fusion, a probe over the engines a run left (benchmarks/streams_fusion_probe.py).
set -euo pipefail
WHERE=/root/gpu_path
mkdir -p "$WHERE/stage"
LIBS=$(find /opt /usr/local /usr/lib -xdev \( -name 'libcudart.so.1*' -o -name 'libcudnn.so.9*' -o -name 'libcublasLt.so.1*' \
       -o -name 'libcufft.so.1*' -o -name 'libcurand.so.1*' -o -name 'libnvrtc.so.1*' \) 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:)
# precisionflow's code: the bundle's own copy where it carries one (the code the plan's ids name, when
# the checkout has moved on since the plan was made), else this checkout's
code() { if [ -d "$WHERE/bundle/code" ]; then echo "$WHERE/bundle/code"; else echo "$PWD/src"; fi; }
export LD_LIBRARY_PATH="$LIBS:${LD_LIBRARY_PATH:-}" PYTHONPATH="$WHERE/lean:$(code)" PYTHONUNBUFFERED=1
PY="python3 -S"  # no site-packages: the image's CPU onnxruntime 1.30 cannot be imported by mistake
# the results folder the run writes: the default target's (start-default), else the shipped bundle's
where_results() { if [ -f "$WHERE/default-results" ]; then cat "$WHERE/default-results"; else echo "$WHERE/bundle/results"; fi; }
# the streams probe over the engines a run built, in the environment the run had (start-default's,
# else the lean packages and the bundle's code)
fusion_probe() {
  [ -f "$WHERE/default-results" ] && export PYTHONPATH="$WHERE/lean:$WHERE/env"
  $PY benchmarks/streams_fusion_probe.py "$(where_results)" "$OUT/streams_fusion.json"
}

case "$1" in
stage)
  cp "$2" "$WHERE/stage/"
  ls -l "$WHERE/stage"
  ;;
start)
  rm -rf "$WHERE/bundle" "$WHERE/run.rc" "$WHERE/run.log" "$WHERE/collected" "$WHERE/default-results"  # a second job starts from the payload afresh
  mkdir -p "$WHERE/lean" "$WHERE/bundle"
  [ -f "$WHERE/payload" ] || cat "$WHERE"/stage/part?? > "$WHERE/payload"
  head -c "$2" "$WHERE/payload" | xz -d | tar xi -C "$WHERE/lean"  # i: the lean packages may be two archives
  tail -c +$(($2 + 1)) "$WHERE/payload" | xz -d | tar x -C "$WHERE/bundle"
  # the payload stays: a second job on the same held machine starts from it again
  if [ -n "${3:-}" ]; then  # another plan of the same upstream nodes (other settings, another GPU target)
    cp "$3/plan.json" "$3/manifest.json" "$WHERE/bundle/"
  fi
  export PYTHONPATH="$WHERE/lean:$(code)"
  echo "precisionflow from $(code)"
  $PY -c "import sys, numpy, onnx, onnxruntime; print(sys.version.split()[0], 'numpy', numpy.__version__, 'onnx', onnx.__version__, \
'onnxruntime', onnxruntime.__version__, onnxruntime.__file__, onnxruntime.get_available_providers())" | tee "$WHERE/doctor.txt"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$WHERE/doctor.txt"
  $PY -m precisionflow.pipeline.remote doctor "$WHERE/bundle" | tee -a "$WHERE/doctor.txt"
  date +%s > "$WHERE/started"
  setsid nohup bash -c "$PY -m precisionflow.pipeline.remote run $WHERE/bundle --keep-going > $WHERE/run.log 2>&1; \
echo \$? > $WHERE/run.rc" > /dev/null 2>&1 &
  sleep 5; cat "$WHERE/run.log"
  ;;
start-default)
  # `precisionflow run` with the default target, as on a user's GPU machine with TensorFlow: the lean
  # packages (onnxruntime-gpu first), every other package of the lock unpacked for this Python, and WORK
  # (photos, the nodes trained there, default-overrides.txt) at the absolute path its overrides name
  rm -rf "$WHERE/bundle" "$WHERE/run.rc" "$WHERE/run.log" "$WHERE/collected" "$WHERE/env"
  mkdir -p "$WHERE/lean" "$WHERE/env"
  [ -f "$WHERE/payload" ] || cat "$WHERE"/stage/part?? > "$WHERE/payload"
  # cut by byte counts with dd (`tail | head` would end tail by SIGPIPE: a failed pipeline under pipefail)
  dd if="$WHERE/payload" bs=4M iflag=count_bytes count="$2" status=none | xz -d | tar xi -C "$WHERE/lean"
  dd if="$WHERE/payload" bs=4M iflag=skip_bytes,count_bytes skip="$2" count="$3" status=none | xz -d -T8 | tar x -C "$WHERE/env"
  dd if="$WHERE/payload" bs=4M iflag=skip_bytes skip=$(($2 + $3)) status=none | xz -d | tar xv -C / | grep default-overrides.txt > "$WHERE/overrides-file"
  export PYTHONPATH="$WHERE/lean:$WHERE/env"
  overrides="/$(cat "$WHERE/overrides-file")"
  grep '^results_dir=' "$overrides" | cut -d= -f2 > "$WHERE/default-results"
  $PY -c "import sys, numpy, onnxruntime, tensorflow, snakemake; print(sys.version.split()[0], 'numpy', numpy.__version__, \
'onnxruntime', onnxruntime.__version__, onnxruntime.get_available_providers(), 'tensorflow', tensorflow.__version__, \
tensorflow.config.list_physical_devices(), 'snakemake', snakemake.__version__)" 2>&1 | tee "$WHERE/doctor.txt"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$WHERE/doctor.txt"
  date +%s > "$WHERE/started"
  # one override a line, passed as written (no shell reads their brackets and braces)
  setsid nohup bash -c "mapfile -t overrides < $overrides; cd $WHERE && \
$PY -m precisionflow.cli run --cores 16 \"\${overrides[@]}\" > $WHERE/run.log 2>&1; echo \$? > $WHERE/run.rc" \
    > /dev/null 2>&1 &
  echo $! > "$WHERE/run.pid"  # setsid's own pid: the run's session, for `builds` to end it
  sleep 5; cat "$WHERE/run.log"
  ;;
builds)
  # a lease too short for the whole job: the run until its COUNT engines are built (or SECONDS pass),
  # then the run ended (its whole session) and the streams probe over the engines it built, alone on
  # the GPU; the build nodes (less the engine files) and the run's log come back
  deadline=$(($(date +%s) + $2))
  while [ ! -f "$WHERE/run.rc" ] && [ "$(grep -c '] build_engine/' "$WHERE/run.log")" -lt "$3" ] \
        && [ "$(date +%s)" -lt "$deadline" ]; do sleep 2; done
  session=$(ps -o sid= -p "$(cat "$WHERE/run.pid")" | tr -d ' ' || true)
  if [ -n "$session" ]; then
    pkill -s "$session" || true
    # the probe times alone: every process of the run's session gone first (the GPU's too)
    for _ in $(seq 30); do pgrep -s "$session" > /dev/null || break; sleep 1; done
    pkill -KILL -s "$session" || true  # what the 30 s of SIGTERM left
    for _ in $(seq 10); do pgrep -s "$session" > /dev/null || break; sleep 1; done
    pgrep -s "$session" > /dev/null && { echo "the run's session still has processes: not probing beside them"; exit 1; }
  fi
  grep -v "No registered plugin" "$WHERE/run.log" | tail -20
  echo "run ended after $(($(date +%s) - $(cat "$WHERE/started"))) s with $(grep -c '] build_engine/' "$WHERE/run.log") engines built"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader || true  # empty: nothing else on the GPU
  fusion_probe
  cp "$WHERE/run.log" "$WHERE/doctor.txt" "$OUT/"
  tar cf - -C "$(where_results)" --exclude='*.onnx' --exclude='*.keras' --exclude='*.npy' --exclude='*.npz' \
    build_engine | xz > "$OUT/collected.tar.xz"
  ls -l "$OUT"
  ;;
streams-fusion)
  fusion_probe
  ;;
wait)
  deadline=$(($(date +%s) + $2))
  while [ ! -f "$WHERE/run.rc" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
  grep -v "No registered plugin" "$WHERE/run.log" | tail -40
  if [ -f "$WHERE/run.rc" ] || [ "${3:-}" = partial ]; then
    if [ -f "$WHERE/run.rc" ]; then
      echo "remote run exit $(cat "$WHERE/run.rc") after $(($(date +%s) - $(cat "$WHERE/started"))) s (finished at most 5 s earlier)"
      $PY benchmarks/gpu_crosscheck.py "$(where_results)/.." "$OUT/crosscheck.json" --seconds 1.5 --batches 1 128 || true
    else
      echo "still running after $(($(date +%s) - $(cat "$WHERE/started"))) s: collecting the nodes finished so far"
    fi
    cp "$WHERE/run.log" "$WHERE/doctor.txt" "$OUT/"
    rm -rf "$WHERE/collected"
    if [ -f "$WHERE/default-results" ]; then  # the whole results folder, less the graphs and models
      tar cf - -C "$(where_results)" --exclude='*.onnx' --exclude='*.keras' --exclude='*.npy' --exclude='*.npz' \
        --exclude=.snakemake . | xz > "$OUT/collected.tar.xz"
    else
      $PY -m precisionflow.pipeline.remote collect "$WHERE/bundle" "$WHERE/collected" --without-engine-files > /dev/null
      tar cf - -C "$WHERE/collected" . | xz > "$OUT/collected.tar.xz"
    fi
    ls -l "$OUT"
  else
    echo "still running after $(($(date +%s) - $(cat "$WHERE/started"))) s"
  fi
  ;;
esac
