"""int8_dynamic: int8 weights (per output channel) and activations quantized at run time from each
batch's own range -- no calibration node, so no calibration sample can be unlike the test data
(the seeds' failure mode). ONNX Runtime only: TensorRT has no run-time activation quantization."""

from precisionflow.precisions.spec import GraphRecipe, Judging, PrecisionSpec, Support


def dynamic_params(cfg, placement):
    return {"int8": {key: cfg["int8"][key] for key in ("exclude_nodes", "keep_output_layer")}}


def to_dynamic_int8(job):
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from precisionflow.quant import qdq

    source, target, params = job.source, job.target, job.params
    model = onnx.load(str(source))
    excluded = list(params["int8"]["exclude_nodes"])
    output_layer = sorted(qdq.output_layer_nodes(model)) if params["int8"]["keep_output_layer"] else []
    quantize_dynamic(
        str(source),
        str(target),
        per_channel=True,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["Conv", "MatMul", "Gemm"],
        nodes_to_exclude=excluded + output_layer,
    )
    quantized = onnx.load(str(target))
    integer_ops = sum(
        1 for node in quantized.graph.node if node.op_type in ("ConvInteger", "MatMulInteger", "DynamicQuantizeMatMul")
    )
    if not integer_ops:
        from precisionflow.errors import ConfigError

        raise ConfigError(
            f"precision int8_dynamic: nothing was quantized (int8.keep_output_layer={params['int8']['keep_output_layer']}, "
            f"int8.exclude_nodes={params['int8']['exclude_nodes']}). Such a graph would run in float and be reported as "
            "int8: exclude fewer nodes, or drop this precision."
        )
    return {
        "integer_ops": integer_ops,
        "kept_float": excluded,  # what the user kept float; the output layer stays float as int8's does
        "output_layer_float": output_layer,
        "activation_ranges": "per batch, at run time",
    }


SPEC = PrecisionSpec(
    name="int8_dynamic",
    summary="int8 weights per channel, activations quantized at run time: no calibration to go wrong",
    graph=GraphRecipe(make=to_dynamic_int8, params=dynamic_params),
    judging=Judging(runs_in="integer"),
    support=Support(
        backends=("onnxruntime",),
        why_not_tensorrt="TensorRT quantizes activations with ranges fixed at build time; it has no run-time (dynamic) int8",
    ),
)
