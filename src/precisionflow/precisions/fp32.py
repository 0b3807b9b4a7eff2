"""fp32: the exported graph as is -- the reference every other engine is compared with."""

import shutil

from precisionflow.precisions.spec import GraphRecipe, Judging, PrecisionSpec, TensorRTFlags


def copy_graph(job):
    shutil.copyfile(job.source, job.target)
    return {}


SPEC = PrecisionSpec(
    name="fp32",
    summary="the exported float32 graph; the reference (TensorRT builds it without TF32)",
    graph=GraphRecipe(make=copy_graph),
    judging=Judging(runs_in="fp32", is_reference=True),
    tensorrt=TensorRTFlags(clears_tf32=True),
)
