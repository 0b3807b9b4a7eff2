"""fp16: float16 weights and compute, float32 graph inputs/outputs; fp16.op_block_list stays fp32."""

from precisionflow.precisions.spec import GraphRecipe, Judging, PrecisionSpec


def fp16_params(cfg, placement):
    return {"fp16": {"op_block_list": cfg["fp16"]["op_block_list"]}}


def to_fp16(job):
    import onnx
    from onnxconverter_common import float16

    model = onnx.load(str(job.source))
    block_list = list(job.params["fp16"]["op_block_list"])
    converted = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=block_list)
    onnx.checker.check_model(converted)
    onnx.save(converted, str(job.target))
    return {}


SPEC = PrecisionSpec(
    name="fp16",
    summary="float16 weights and compute (ONNX Runtime's CPU provider runs most ops in fp32: the label says so)",
    graph=GraphRecipe(make=to_fp16, params=fp16_params),
    judging=Judging(runs_in="fp16"),
)
