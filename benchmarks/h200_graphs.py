"""The graphs the H200 engine benchmark (benchmarks/engine_vs_plain.py) runs, made here with TensorFlow.

For ResNet-50 and MobileNetV2 at 224x224x3: the product's own export (modeling.models.build ->
export_onnx._convert, fp16 by precisions.fp16.to_fp16 with the default op block list) and a reference
export of the same Keras application (keras.applications with its own top, tf2onnx opset 17, fp16
by ONNX Runtime's float16 converter with no block list; what ../shared/probes/serving used).
Weights are random (He-scaled) in every graph: the benchmark measures speed, not accuracy. To
travel in one device call, every float initializer is written as zeros and refilled on the GPU
machine by `refill` (speed does not depend on the values; zeros compress to a few kB).

    .venv/bin/python benchmarks/h200_graphs.py .gpu/graphs
"""

import sys
from pathlib import Path

import numpy as np


def product_graph(name: str, path: Path) -> None:
    from precisionflow.modeling import models
    from precisionflow.modeling.tfenv import import_tensorflow
    from precisionflow.stages.export_onnx import _convert

    tf, keras = import_tensorflow()
    params = {"name": name, "weights": None, "bn_momentum": 0.9, **({"width": 1.0} if name == "mobilenet_v2" else {})}
    model = models.build(keras, params, (224, 224, 3), 10)
    _convert(tf, model, 17, path)


def reference_graph(name: str, path: Path) -> None:
    import tf2onnx

    from precisionflow.modeling.tfenv import import_tensorflow

    tf, keras = import_tensorflow()
    constructor = {"resnet50": keras.applications.ResNet50, "mobilenet_v2": keras.applications.MobileNetV2}[name]
    model = constructor(weights=None, input_shape=(224, 224, 3))
    signature = (tf.TensorSpec((None, 224, 224, 3), tf.float32, name="input"),)
    tf2onnx.convert.from_keras(model, input_signature=signature, opset=17, output_path=str(path))


def zeroed(path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    for index, tensor in enumerate(model.graph.initializer):
        array = numpy_helper.to_array(tensor)
        if array.dtype.kind == "f" and array.size > 16:
            model.graph.initializer[index].CopyFrom(numpy_helper.from_array(np.zeros_like(array), tensor.name))
    onnx.save(model, str(path))


def refill(path: Path, seed: int = 0) -> None:
    """He-scaled random values in every zeroed float initializer (run on the GPU machine)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    rng = np.random.default_rng(seed)
    for index, tensor in enumerate(model.graph.initializer):
        array = numpy_helper.to_array(tensor)
        if array.dtype.kind == "f" and array.size > 16 and not array.any():
            fan_in = max(1, array.size // max(1, array.shape[0])) if array.ndim > 1 else max(1, array.size)
            values = rng.standard_normal(array.shape) * np.sqrt(2.0 / fan_in)
            model.graph.initializer[index].CopyFrom(numpy_helper.from_array(values.astype(array.dtype), tensor.name))
    onnx.save(model, str(path))


def main(out: Path) -> None:
    from precisionflow.precisions.fp16 import to_fp16
    from precisionflow.precisions.spec import GraphJob
    from precisionflow.schema import Fp16Conf

    out.mkdir(parents=True, exist_ok=True)
    block_list = Fp16Conf().op_block_list
    for name in ("resnet50", "mobilenet_v2"):
        for kind, make in (("product", product_graph), ("reference", reference_graph)):
            fp32 = out / f"{name}_{kind}_fp32.onnx"
            make(name, fp32)
            zeroed(fp32)
            blocked = {"fp16": {"op_block_list": block_list if kind == "product" else []}}
            to_fp16(GraphJob(fp32, out / f"{name}_{kind}_fp16.onnx", blocked, {}, out))
            print(f"{fp32.name} and its fp16 written", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
