#!/bin/bash
# alternate the search before (8a03f2b: doubles past Offline) and after (capped at Offline), two rounds
# the JSON files are committed as cap-before-N.json / cap-after-N.json
for r in 0 1; do
  for v in before after; do
    dir=/tmp/sb; [ $v = after ] && dir=/tmp/sa
    cd $dir && ROUNDS=1 SETTINGS="today,precision" OUT=/tmp/scr2/$v-$r.json PYTHONPATH=$dir/src /work/main/.venv/bin/python benchmarks/serving_cpu_ratio.py /tmp/fresh/results fp32-local-cf962f962a9e int8-ortcpu-local-27e4b3b4db6c 2>&1 | grep -v Warn
  done
done
echo done
