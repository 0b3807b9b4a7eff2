#!/bin/bash
# The suite's clock, as CI meets it: a fresh clone of HEAD, `.ci/run` (setup, lint, the reference
# checks, the docs build, `make test`), wall time in seconds, and make test's own output (durations,
# per-file time, memory) kept as benchmarks/results/suite/<name>.txt.
#
#   bash benchmarks/suite_time.sh NAME      # e.g. after_2026-12-06
set -uo pipefail
name=${1:?name the result}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
git clone -q "$here" "$work/clone"
cd "$work/clone"
start=$(date +%s)
.ci/run > "$work/ci.log" 2>&1
status=$?
wall=$(($(date +%s) - start))
{
  echo "commit $(git rev-parse --short HEAD), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ): .ci/run exit $status in $wall s"
  sed -n '/test session starts/,$p' "$work/ci.log"
} > "$here/benchmarks/results/suite/$name.txt"
tail -3 "$here/benchmarks/results/suite/$name.txt"
rm -rf "$work"
