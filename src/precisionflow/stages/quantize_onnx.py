"""quantize_onnx: the precision-specific graph every backend builds from.

TensorRT 11 builds an engine exactly in the types its ONNX graph carries, so precision lives
here: fp32 is the exported graph as is; fp16 converts weights and compute to float16 while the
graph's inputs/outputs stay float32 and the ops in fp16.op_block_list stay in float32.
"""

import hashlib
import shutil
from pathlib import Path
from typing import Any, Dict

from precisionflow.errors import ConfigError

PACKAGES = ("onnx", "onnxconverter-common")


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def to_fp16(source: Path, target: Path, op_block_list) -> None:
    import onnx
    from onnxconverter_common import float16

    model = onnx.load(str(source))
    converted = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=list(op_block_list))
    onnx.checker.check_model(converted)
    onnx.save(converted, str(target))


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    source = inputs["onnx"] / "model.onnx"
    target = out / "model.onnx"
    precision = params["precision"]
    if precision == "fp32":
        shutil.copyfile(source, target)
    elif precision == "fp16":
        to_fp16(source, target, params["fp16"]["op_block_list"])
    else:
        raise ConfigError(f"precision: expected fp32 or fp16, found '{precision}'.")
    return {"precision": precision, "graph_sha256": file_hash(target), "source_sha256": file_hash(source),
            "graph_bytes": target.stat().st_size}
