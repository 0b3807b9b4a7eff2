"""fp16: float16 weights and compute, float32 graph inputs/outputs; fp16.op_block_list stays fp32."""

from precisionflow.precisions.spec import PrecisionSpec


def fp16_params(cfg, placement):
    return {"fp16": {"op_block_list": cfg["fp16"]["op_block_list"]}}


def to_fp16(source, target, params, inputs, out):
    import onnx
    from onnxconverter_common import float16

    model = onnx.load(str(source))
    block_list = list(params["fp16"]["op_block_list"])
    converted = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=block_list)
    onnx.checker.check_model(converted)
    onnx.save(converted, str(target))
    return {}


SPEC = PrecisionSpec(
    name="fp16",
    summary="float16 weights and compute (ONNX Runtime's CPU provider runs most ops in fp32: the label says so)",
    make_graph=to_fp16,
    graph_params=fp16_params,
    runs_in="fp16",
)
