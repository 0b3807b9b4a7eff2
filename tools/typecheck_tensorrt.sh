#!/usr/bin/env bash
# Type-check the TensorRT backend against tensorrt-stubs 10.13 (the 10.x Python API) without TensorRT.
# The stub file as published does not parse (a parameter named `in`, a parameter without default
# after defaulted ones); a patched copy is made in a scratch folder. Errors inside the stubs are
# filtered out; errors in our file fail the check. Needs the package registry (.ci/run runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=$(mktemp -d)
python3 -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install --quiet mypy==2.4.1 numpy==2.4.6
"$scratch/venv/bin/pip" download --quiet --no-deps "tensorrt-stubs==10.13.0.35.1" -d "$scratch/wheel"
(cd "$scratch" && python3 -m zipfile -e wheel/*.whl stubs)
stub="$scratch/stubs/tensorrt_bindings/tensorrt.pyi"
sed -i 's/(self: IPluginV3, in: /(self: IPluginV3, in_: /; s/, in: list/, in_: list/g' "$stub"
sed -i 's/power: Weights = None, channel_axis: int)/power: Weights = None, channel_axis: int = 0)/' "$stub"
report=$(MYPYPATH="$scratch/stubs" "$scratch/venv/bin/mypy" --follow-imports=silent --check-untyped-defs \
  --ignore-missing-imports src/precisionflow/backends/tensorrt_backend.py 2>&1 | grep -v "^$scratch" || true)
echo "$report" | grep "tensorrt_backend.py" && exit 1
echo "tensorrt_backend.py: no type errors against tensorrt-stubs 10.13 (errors inside the stubs ignored)"
