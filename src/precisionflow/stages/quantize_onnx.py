"""quantize_onnx: the precision-specific graph every backend builds from.

TensorRT 11 builds an engine exactly in the types its ONNX graph carries, so precision lives here:
  fp32        the exported graph as is
  fp16        float16 weights/compute; float32 graph inputs/outputs; fp16.op_block_list kept fp32
  int8        explicit symmetric Q/DQ from a calibration cache (refused if the cache is of
              another graph), checked for TensorRT legality, with a per-tensor error report
  int8_mixed  int8, with the int8.mixed_keep_fp most damaged quantized ops left in float
  int8_qat    int8 of the QAT-fine-tuned graph, from the ranges QAT learned
"""

import shutil
from pathlib import Path
from typing import Any, Dict

from precisionflow.errors import ConfigError
from precisionflow.nodeio import file_hash

PACKAGES = ("onnx", "onnxconverter-common", "onnxruntime", "matplotlib")


def to_fp16(source: Path, target: Path, op_block_list) -> None:
    import onnx
    from onnxconverter_common import float16

    model = onnx.load(str(source))
    converted = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=list(op_block_list))
    onnx.checker.check_model(converted)
    onnx.save(converted, str(target))


def to_int8(source: Path, target: Path, params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    import onnx

    from precisionflow.quant import cache, layer_error, qdq
    from precisionflow.stages import prepare_dataset

    ranges, lineage = cache.load_cache(inputs["calibration"], file_hash(source))
    fp32_model = onnx.load(str(source))
    int8 = params["int8"]
    nodes = qdq.quantizable_nodes(fp32_model, int8["exclude_nodes"], int8["keep_output_layer"])
    kept_float = []
    if params["precision"] == "int8_mixed":
        rows = _read_rows(inputs["int8"] / "layer_error.csv")
        kept_float = layer_error.worst_nodes(fp32_model, rows, nodes, int8["mixed_keep_fp"])
        nodes = [name for name in nodes if name not in kept_float]
    if not nodes:
        # Nothing left to quantize (e.g. int8_mixed on a one-conv model): the float graph is the answer.
        # (An empty list must not reach quantize_static, which reads it as "quantize everything".)
        shutil.copyfile(source, target)
    else:
        qdq.quantize_int8(source, target, ranges, nodes)
        qdq.assert_trt_legal(target)
    images, _ = prepare_dataset.load(inputs["data"], "test")
    rows = layer_error.per_tensor_error(source, target, images[: int8["report_samples"]])
    layer_error.write_report(rows, out)
    return {"quantized_nodes": len(nodes), "kept_float": kept_float, "calibration_source": lineage["source"],
            "calibration_method": lineage["method"], "worst_tensor": rows[0]["tensor"] if rows else None,
            "worst_sqnr_db": rows[0]["sqnr_vs_fp32_db"] if rows else None}


def _read_rows(path: Path):
    import csv

    with open(path) as handle:
        return [dict(row, sqnr_vs_fp32_db=float(row["sqnr_vs_fp32_db"])) for row in csv.DictReader(handle)]


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    source = inputs["onnx"] / "model.onnx"
    target = out / "model.onnx"
    precision = params["precision"]
    details: Dict[str, Any] = {}
    if precision == "fp32":
        shutil.copyfile(source, target)
    elif precision == "fp16":
        to_fp16(source, target, params["fp16"]["op_block_list"])
    elif precision in ("int8", "int8_mixed", "int8_qat"):
        details = to_int8(source, target, params, inputs, out)
    else:
        raise ConfigError(f"precision: expected fp32, fp16, int8, int8_qat or int8_mixed, found '{precision}'.")
    return {"precision": precision, "graph_sha256": file_hash(target), "source_sha256": file_hash(source),
            "graph_bytes": target.stat().st_size, **details}
