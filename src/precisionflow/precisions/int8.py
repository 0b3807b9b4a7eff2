"""int8: post-training quantization -- explicit Q/DQ from a calibration of the fp32 graph."""

from precisionflow.precisions.spec import GraphRecipe, Judging, PrecisionSpec, TensorRTFlags
from precisionflow.precisions.static_int8 import int8_params, to_int8

SPEC = PrecisionSpec(
    name="int8",
    summary="int8 by post-training calibration (explicit Q/DQ, placed for the runtime)",
    graph=GraphRecipe(make=to_int8, params=int8_params, calibration="ptq", per_placement=True),
    judging=Judging(runs_in="integer"),
    tensorrt=TensorRTFlags(weak_typing=True, simulated_on_cpu=True),
)
