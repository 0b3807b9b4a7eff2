#!/bin/bash
# Two rounds of benchmarks/serving_cpu_ratio.py, alternating two clones of the code (BEFORE, AFTER:
# each a checkout with the benchmark script in it) so both meet the same load on this shared machine.
#   bash alternate.sh BEFORE_DIR AFTER_DIR "SETTINGS,..." OUT_PREFIX
# the first comparison: bash alternate.sh /tmp/sb /tmp/sa "today,max_batch 64," /tmp/scr/
# the second:           bash alternate.sh /tmp/sb /tmp/sa "today,precision" /tmp/scr2/   (committed as cap-*.json)
BEFORE=$1; AFTER=$2; CHOSEN=$3; PREFIX=$4
for r in 0 1; do
  for v in before after; do
    dir=$BEFORE; [ $v = after ] && dir=$AFTER
    cd "$dir" && ROUNDS=1 SETTINGS="$CHOSEN" OUT="$PREFIX$v-$r.json" PYTHONPATH=$dir/src /work/main/.venv/bin/python \
      benchmarks/serving_cpu_ratio.py /tmp/fresh/results fp32-local-cf962f962a9e int8-ortcpu-local-27e4b3b4db6c 2>&1 | grep -v Warn
  done
done
echo done
