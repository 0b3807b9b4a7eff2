"""int8_qat: int8 of the QAT-fine-tuned graph, from the ranges QAT learned; judged against the same
fine-tune run in fp32 (its twin), and compared with the QAT model it deploys."""

from precisionflow.precisions.spec import GraphRecipe, Judging, PrecisionSpec, TensorRTFlags
from precisionflow.precisions.static_int8 import int8_params, to_int8

SPEC = PrecisionSpec(
    name="int8_qat",
    summary="int8 from quantization-aware fine-tuning: the ranges QAT learned, judged against its fp32 twin",
    graph=GraphRecipe(make=to_int8, params=int8_params, calibration="qat", from_qat_finetune=True, per_placement=True),
    judging=Judging(runs_in="integer", against_twin=True, against_trained_model=True),
    tensorrt=TensorRTFlags(weak_typing=True, simulated_on_cpu=True),
)
