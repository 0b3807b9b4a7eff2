"""Static int8 graphs (int8, int8_qat, int8_mixed): Q/DQ with ranges fixed before deployment, from
a calibration cache (post-training, or learned by QAT), placed for the runtime that runs them."""

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from precisionflow.errors import ConfigError
from precisionflow.hashing import file_hash
from precisionflow.precisions.spec import GraphJob
from precisionflow.quant import qdq

INT8_KEYS = ("exclude_nodes", "keep_output_layer", "report_samples", "report_split")
# (source, its fp32 model, ranges, quantizable nodes, input folders, int8 params) -> (kept float, search record)
ChooseFloat = Optional[Callable[..., Tuple[List[str], Dict[str, Any]]]]


def int8_params(cfg: Dict[str, Any], placement: str, extra: Dict[str, Any] = None) -> Dict[str, Any]:
    """`placement`: the runtime int8 Q/DQ is placed for (qdq.placement_for the target)."""
    params = {key: cfg["int8"][key] for key in INT8_KEYS}
    params.update(extra or {})
    params["placement"] = placement  # on a CPU, quantize_onnx adds the CPU's dot product beside it
    # The per-tensor report's sample (int8_mixed ranks ops by it) is drawn like calibration's.
    params["sampling"] = {"rule": cfg["calibration"]["sampling"], "seed": cfg["calibration"]["seed"]}
    return {"int8": params}


def to_int8(job: GraphJob, choose_float: ChooseFloat = None) -> Dict[str, Any]:
    """The int8 graph: explicit symmetric Q/DQ from the calibration cache (refused if the cache is of
    another graph), placed for the runtime, checked for TensorRT legality where it goes there, with a
    per-tensor error report. `choose_float`: the ops a precision keeps in float (int8_mixed)."""
    import onnx

    from precisionflow.quant import cache, layer_error, qdq_check
    from precisionflow.datasets.store import Split

    source, target, params, inputs = job.source, job.target, job.params, job.inputs
    ranges, lineage = cache.load_cache(inputs["calibration"], file_hash(source))
    fp32_model = onnx.load(str(source))
    int8 = params["int8"]
    placement = int8["placement"]  # int8_params always sets it: the planner decides, never a default
    candidates = qdq.quantizable_nodes(fp32_model, (), keep_output_layer=False)
    nodes = qdq.quantizable_nodes(fp32_model, int8["exclude_nodes"], int8["keep_output_layer"])
    cpu = cpu_of(params)  # the CPU placement's weight bits: its trials (int8_mixed) are placed with them too
    trials = dict(int8, cpu_weight_bits=cpu.get("cpu_weight_bits"))
    kept_float, search = choose_float(source, fp32_model, ranges, nodes, inputs, trials) if choose_float else ([], {})
    if search.get("declined"):  # no mix worth building: the stage publishes the reason, not a graph
        return {"declined": search["declined"], "placement": placement, "mixed_search": search}
    nodes = [name for name in nodes if name not in kept_float]
    refuse_empty(params, nodes, candidates, kept_float)
    placed = quantize_placed(source, target, fp32_model, nodes, ranges, lineage, int8, cpu)
    trt = placement == qdq.TENSORRT
    if trt:
        qdq_check.assert_trt_legal(target, int8["keep_output_layer"])
    # The per-tensor report ranks ops for int8_mixed: a decision, so it never sees the test split.
    images, drawn = report_sample(Split(inputs["data"], int8["report_split"]), int8)
    rows = layer_error.per_tensor_error(source, target, images)
    layer_error.write_report(rows, job.out)
    return {
        "quantized_nodes": len(nodes),
        "quantizable_ops": len(candidates),
        "quantized_fraction": round(len(nodes) / len(candidates), 4),
        "kept_float": kept_float,
        "calibration_source": lineage["source"],
        "calibration_method": lineage["method"],
        "placement": placement,
        "report_split": int8["report_split"],
        "report_sample_per_class": drawn.get("per_class"),
        "calibration_split": lineage["settings"].get("split"),
        **placed,
        **({"mixed_search": search} if search else {}),
        "worst_tensor": rows[0]["tensor"] if rows else None,
        "worst_sqnr_db": rows[0]["sqnr_vs_fp32_db"] if rows else None,
    }


def cpu_of(params: Dict[str, Any]) -> Dict[str, Any]:
    """The CPU placement's integer dot product and weight bits: as the targets declare it
    (quantize_onnx.reads), else this machine's -- the one that makes the graph; {} on TensorRT's."""
    from precisionflow.cpu_features import integer_dot_product
    from precisionflow.quant.qdq import cpu_weight_bits
    from precisionflow.cpu_features import READ_WHERE_MADE

    if params["int8"]["placement"] != qdq.ORT_CPU:
        return {}
    declared = params.get("cpu_dot_product", READ_WHERE_MADE)
    flag = integer_dot_product() if declared == READ_WHERE_MADE else (None if declared == "none" else declared)
    return {
        "cpu_dot_product": flag or "none (int16 accumulation: 7-bit weights)",
        "cpu_dot_product_from": "this machine" if declared == READ_WHERE_MADE else "the target",
        "cpu_weight_bits": cpu_weight_bits(flag),
    }


def quantize_placed(
    source: Path, target: Path, fp32_model, nodes, ranges, lineage, int8: Dict[str, Any], cpu: Dict[str, Any]
) -> Dict[str, Any]:
    """Write the Q/DQ graph placed for int8's runtime; returns what the placement did beyond the
    ranges (QAT coverage, tensors left float or rounded, the CPU's weight bits: `cpu`, cpu_of)."""

    placement = int8["placement"]
    placed = {}
    trt = placement == qdq.TENSORRT
    if lineage["source"] == "qat" and trt:
        learned = {name: ranges[name] for name in lineage["ranges"]["learned_tensors"]}
        ranges, placed = learned_input_ranges(fp32_model, nodes, ranges, learned)
    # ONNX Runtime's CPU placement quantizes layer outputs: the cache holds QAT's learned range for
    # every tensor QAT put a quantizer on; the placement's other Q/DQ (a pooled output, the logits)
    # are left out, so the engine rounds only where QAT trained it to.
    trained = lineage["ranges"]["learned_tensors"] if lineage["source"] == "qat" and not trt else None
    freed = qdq.quantize_int8(source, target, ranges, nodes, placement, trained, cpu.get("cpu_weight_bits"))
    placed.update(cpu)
    if trained is not None:
        placed["qat_untrained_left_float"] = freed
    elif not trt:
        placed["output_layer_reads_float"] = freed
    if lineage["source"] == "qat" and int8["keep_output_layer"] and trt:
        placed["qat_output_layer_input"] = fake_quantize_output_input(fp32_model, target, learned)
    if lineage["source"] == "qat" and trt:
        # A tensor QAT rounded that no int8 op reads (the last block's output, read by the pooling)
        # is rounded and clipped on QAT's grid all the same: on ResNet-50, leaving it unrounded
        # changed 0.2% of predictions against the QAT model.
        placed["qat_rounded_outside_int8_ops"] = qdq.fake_quantize_tensors(target, learned)
    return placed


def report_sample(split, int8: Dict[str, Any]):
    """(images, the draw's record) of the per-tensor report's sample: drawn by calibration's rule."""
    from precisionflow.datasets import sampling

    rule = int8.get("sampling", {"rule": "first", "seed": 0})
    drawn = sampling.sample_split(split, int8["report_samples"], rule["rule"], rule["seed"])
    return split.images(drawn.pop("indices")), drawn


def learned_input_ranges(model, nodes, ranges, learned):
    """int8_qat: every Q/DQ gets the range QAT learned for the tensor it quantizes -- the input of a
    weighted layer is the output of the layer QAT put a quantizer after, possibly through layout ops
    (the model input's range lands after the NHWC->NCHW Transpose, where the first Q really is).
    A quantized tensor without a learned range stops the stage: no silent fallback to calibration."""
    from precisionflow.errors import StageError

    quantized = qdq.activation_inputs(model, nodes)
    found = qdq.learned_ranges_of(model, quantized, learned)
    missing = [f"{tensor} (input of {node})" for tensor, node in sorted(quantized.items()) if found[tensor] is None]
    if missing:
        raise StageError(
            f"int8_qat: {len(missing)} quantized tensor(s) have no range learned by QAT: {', '.join(missing)}. "
            "Expected every Q/DQ of an int8_qat graph to use a learned range. Quantize that layer during QAT, or keep "
            "the node in float with int8.exclude_nodes=[<node>] (or the Keras layer with finetune.exclude_layers)."
        )
    return {**ranges, **found}, {"qat_learned_inputs": len(quantized), "qat_coverage": 1.0 if quantized else 0.0}


def fake_quantize_output_input(model, target: Path, learned) -> List[str]:
    """The float output layer's input: QAT quantized it (it is the previous layer's activation), so
    the deployed graph rounds it with the learned range too; the layer's weights stay float."""

    output_layer = qdq.output_layer_nodes(model)
    compute = [n for n in model.graph.node if n.name in output_layer and n.op_type in qdq.COMPUTE_OPS]
    found = qdq.learned_ranges_of(model, [n.input[0] for n in compute], learned)
    return qdq.fake_quantize_inputs(target, [n.name for n in compute], {t: r for t, r in found.items() if r is not None})


def refuse_empty(params: Dict[str, Any], nodes, candidates, kept_float) -> None:
    """A graph with no quantized op is not int8: never label one so."""
    if nodes:
        return
    int8 = params["int8"]
    raise ConfigError(
        f"precision {params['precision']}: nothing left to quantize -- the graph has {len(candidates)} quantizable "
        f"op(s); int8.keep_output_layer={int8['keep_output_layer']}, int8.exclude_nodes={int8['exclude_nodes']}"
        + (f", int8.mixed_keep_fp={int8['mixed_keep_fp']} keeps {kept_float} in float" if kept_float else "")
        + ". Such a graph would run in float and be reported as int8. Lower int8.mixed_keep_fp, exclude fewer "
        "nodes, or drop this precision."
    )


def read_rows(path: Path):
    import csv

    with open(path) as handle:
        return [dict(row, sqnr_vs_fp32_db=float(row["sqnr_vs_fp32_db"])) for row in csv.DictReader(handle)]
