"""int8_qat: int8 of the QAT-fine-tuned graph, from the ranges QAT learned; judged against the same
fine-tune run in fp32 (its twin), and compared with the QAT model it deploys."""

from precisionflow.precisions.spec import PrecisionSpec
from precisionflow.precisions.static_int8 import int8_params, to_int8

SPEC = PrecisionSpec(
    name="int8_qat",
    summary="int8 from quantization-aware fine-tuning: the ranges QAT learned, judged against its fp32 twin",
    make_graph=to_int8,
    graph_params=int8_params,
    calibration="qat",
    qat_finetune=True,
    placement_dependent=True,
    simulate_tensorrt=True,
    judged_against_twin=True,
    compared_with_trained_model=True,
    runs_in="integer",
    trt_weak_typing=True,
)
