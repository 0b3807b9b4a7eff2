"""fp32: the exported graph as is -- the reference every other engine is compared with."""

import shutil

from precisionflow.precisions.spec import PrecisionSpec


def copy_graph(source, target, params, inputs, out):
    shutil.copyfile(source, target)
    return {}


SPEC = PrecisionSpec(
    name="fp32",
    summary="the exported float32 graph; the reference (TensorRT builds it without TF32)",
    make_graph=copy_graph,
    runs_in="fp32",
    clears_tf32=True,
    is_reference=True,
)
