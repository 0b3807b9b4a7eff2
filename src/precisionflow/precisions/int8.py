"""int8: post-training quantization -- explicit Q/DQ from a calibration of the fp32 graph."""

from precisionflow.precisions.spec import PrecisionSpec
from precisionflow.precisions.static_int8 import int8_params, to_int8

SPEC = PrecisionSpec(
    name="int8",
    summary="int8 by post-training calibration (explicit Q/DQ, placed for the runtime)",
    make_graph=to_int8,
    graph_params=int8_params,
    calibration="ptq",
    placement_dependent=True,
    simulate_tensorrt=True,
    runs_in="integer",
    trt_weak_typing=True,
)
