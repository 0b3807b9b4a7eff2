"""Quantization-aware training that simulates what TensorRT will execute.

tfmot's default 8-bit scheme trains activations asymmetric (uint8-style) and Dense weights per
tensor; TensorRT runs int8 symmetric activations (zero point 0) and per-channel weights. The
registry below swaps those quantizers so training and deployment agree. BatchNorm is handled by
tfmot's Conv-BN(-ReLU) layout transforms: no quantizer between a conv and its BatchNorm, which is
what the exported graph has once the BatchNorm is folded into the conv.

After fine-tuning, the fake-quant wrappers are stripped (the fp32 weights are copied into the
plain architecture) and the learned ranges are read out per layer, as TLT did.
"""

import contextlib
import re
from typing import Dict, Iterable, Tuple

INPUT_KEY = "__input__"
OUTPUT_LAYER = "logits"


def _symmetric_scheme():
    from tensorflow_model_optimization.python.core.quantization.keras import quantizers
    from tensorflow_model_optimization.python.core.quantization.keras.default_8bit import (
        default_8bit_quantize_registry as registry,
        default_8bit_quantize_scheme as scheme,
    )
    import tf_keras as keras

    def symmetric():
        return quantizers.MovingAverageQuantizer(num_bits=8, per_axis=False, symmetric=True, narrow_range=True)

    class SymmetricRegistry(registry.Default8BitQuantizeRegistry):
        def get_quantize_config(self, layer):
            config = super().get_quantize_config(layer)
            if hasattr(config, "activation_quantizer"):
                config.activation_quantizer = symmetric()
            if isinstance(layer, keras.layers.DepthwiseConv2D):
                config.weight_quantizer = depthwise_channel_quantizer()
            elif isinstance(getattr(config, "weight_quantizer", None), quantizers.LastValueQuantizer) and not isinstance(
                layer, keras.layers.Conv2D
            ):  # Dense: per output channel, as deployed (tfmot's conv quantizer is per-axis already)
                config.weight_quantizer = quantizers.LastValueQuantizer(
                    num_bits=8, per_axis=True, symmetric=True, narrow_range=True
                )
            if isinstance(config, registry.Default8BitActivationQuantizeConfig):
                config.get_output_quantizers = lambda _layer: [symmetric()]
            return config

    class SymmetricScheme(scheme.Default8BitQuantizeScheme):
        def get_quantize_registry(self):
            return SymmetricRegistry(disable_per_axis=self._disable_per_axis)

    return SymmetricScheme()


def depthwise_channel_quantizer():
    """A depthwise kernel's quantizer, one range per output channel, as deployed.

    tfmot's per-axis conv quantizer keeps the kernel's last axis; a depthwise kernel is
    (h, w, channels, multiplier), so that is one range for the whole kernel (multiplier 1), while
    ONNX Runtime and TensorRT quantize the exported depthwise conv per output channel: another
    grid than the one QAT trained. This one ranges over channel x multiplier, in the exported
    conv's output-channel order (channel-major)."""
    import tensorflow as tf
    import tf_keras as keras
    from tensorflow_model_optimization.python.core.quantization.keras import quantizers

    class DepthwiseChannelQuantizer(quantizers.LastValueQuantizer):
        def __init__(self):
            super().__init__(num_bits=8, per_axis=True, symmetric=True, narrow_range=True)

        def build(self, tensor_shape, name, layer):
            channels = int(tensor_shape[-2]) * int(tensor_shape[-1])

            def bound(suffix, start):  # tfmot's names and starting range (-6, 6)
                return layer.add_weight(
                    f"{name}_{suffix}", shape=(channels,), initializer=keras.initializers.Constant(start), trainable=False
                )

            return {"min_var": bound("min", -6.0), "max_var": bound("max", 6.0)}

        def __call__(self, inputs, training, weights, **kwargs):
            height, width, channels, multiplier = inputs.shape
            flat = tf.reshape(inputs, (height, width, 1, channels * multiplier))
            return tf.reshape(super().__call__(flat, training, weights, **kwargs), tf.shape(inputs))

        def get_config(self):
            return {}

    return DepthwiseChannelQuantizer()


def refresh_weight_ranges(qat_model) -> int:
    """Set every weight quantizer's range from the weights the model holds now; returns how many.

    tfmot's weight quantizers record each kernel's range in the forward pass of a training step,
    before the optimizer updates the kernel, so after training the stored ranges are one step
    behind the final weights. The export quantizes the final weights by their own ranges, so the
    QAT model is brought to that state before it is scored: on ResNet-50 the stale ranges alone
    changed 0.3% of its test predictions. Running each quantizer once in training mode is tfmot's
    own range computation."""
    count = 0
    for layer in qat_model.layers:
        for weight, quantizer, quantizer_vars in getattr(layer, "_weight_vars", ()):
            quantizer(weight, True, weights=quantizer_vars)
            count += 1
    return count


def quantize_model(keras, model, exclude: Iterable[str]):
    """(QAT model, layers left in float): every layer tfmot can quantize is wrapped, except
    `exclude` and the output layer. A layer tfmot has no quantize config for (e.g. Rescaling in a
    user's EfficientNet) stays in float and is reported, instead of failing with tfmot's traceback.
    tfmot decides support itself (BatchNorm, say, only through its Conv-BN patterns), so a layer
    it refuses is found from its refusal and left out, one at a time."""
    skip = set(exclude) | {OUTPUT_LAYER}
    left_float = []
    for _ in range(len(model.layers)):
        try:
            return _quantize_all_but(keras, model, skip | {name for name, _ in left_float}), [
                f"{name} ({kind})" for name, kind in left_float
            ]
        except RuntimeError as err:
            refused = _UNSUPPORTED.search(str(err))
            if refused is None or refused.group(1) in skip | {name for name, _ in left_float}:
                raise
            left_float.append((refused.group(1), refused.group(2).rsplit(".", 1)[-1]))
    raise RuntimeError(f"tfmot refused every layer of {model.name}")


_UNSUPPORTED = re.compile(r"Layer (\S+?):<class '([^']+)'> is not supported")


def _quantize_all_but(keras, model, skip):
    import tensorflow_model_optimization as tfmot

    annotate = tfmot.quantization.keras.quantize_annotate_layer

    def clone(layer):  # returning the layer itself keeps its trained weights
        return layer if layer.name in skip or isinstance(layer, keras.layers.InputLayer) else annotate(layer)

    annotated = keras.models.clone_model(model, clone_function=clone)
    with tfmot.quantization.keras.quantize_scope(), _symmetric_input_and_pattern_quantizers():
        return tfmot.quantization.keras.quantize_apply(annotated, scheme=_symmetric_scheme())


@contextlib.contextmanager
def _symmetric_input_and_pattern_quantizers():
    """The quantizers tfmot builds outside its registry, made symmetric like the deployed graph:
    the model input's (uint8-style [min, max] by default) and the output quantizer its Conv-BN
    patterns put after a BatchNorm with no activation (asymmetric moving average by default).
    tfmot has no option for either, so they are swapped for the duration of quantize_apply."""
    from tensorflow_model_optimization.python.core.quantization.keras import quantizers
    from tensorflow_model_optimization.python.core.quantization.keras.default_8bit import default_8bit_quantize_configs as configs
    from tensorflow_model_optimization.python.core.quantization.keras.default_8bit import default_8bit_transforms as transforms

    input_replacement = transforms.InputLayerQuantize.replacement
    output_quantizers = configs.Default8BitOutputQuantizeConfig.get_output_quantizers

    def replacement(self, match_layer):
        node = input_replacement(self, match_layer)
        node.layer["config"]["quantizer"]["config"].update(symmetric=True, narrow_range=True)
        return node

    def symmetric_outputs(self, layer):
        return [
            quantizers.MovingAverageQuantizer(num_bits=8, per_axis=False, symmetric=True, narrow_range=True)
            for _ in output_quantizers(self, layer)
        ]

    transforms.InputLayerQuantize.replacement = replacement
    configs.Default8BitOutputQuantizeConfig.get_output_quantizers = symmetric_outputs
    try:
        yield
    finally:
        transforms.InputLayerQuantize.replacement = input_replacement
        configs.Default8BitOutputQuantizeConfig.get_output_quantizers = output_quantizers


def learned_ranges(qat_model) -> Dict[str, Tuple[float, float]]:
    """{layer name: (min, max)} of every learned activation range; the model input as INPUT_KEY."""
    ranges = {}
    for layer in qat_model.layers:
        values = {
            v.name.split("/")[-1].split(":")[0]: float(v.numpy().reshape(-1)[0])
            for v in layer.weights
            if v.name.split("/")[-1].split(":")[0].endswith(("_min", "_max")) and "kernel" not in v.name
        }
        if type(layer).__name__ == "QuantizeLayer":  # its variables carry the layer's own (numbered) name
            values = {name.replace(layer.name, "quantize_layer", 1): value for name, value in values.items()}
        target = INPUT_KEY if type(layer).__name__ == "QuantizeLayer" else getattr(getattr(layer, "layer", None), "name", None)
        for prefix in ("post_activation", "output", "quantize_layer"):
            if target and f"{prefix}_min" in values:
                ranges[target] = (values[f"{prefix}_min"], values[f"{prefix}_max"])
    return ranges


def strip(qat_model, fp32_model):
    """Copy the fine-tuned weights out of the QAT wrappers into the plain fp32 architecture."""
    # A QuantizeWrapper holds the wrapped layer's kernel itself (the inner layer keeps only the
    # rest), so weights are looked up on the wrapper, by the wrapped layer's name.
    trained = {getattr(layer, "layer", layer).name: layer for layer in qat_model.layers}
    for layer in fp32_model.layers:
        if layer.weights and layer.name in trained:
            source = trained[layer.name]
            layer.set_weights([_variable_named(source, v) for v in layer.weights])
    return fp32_model


def _variable_named(layer, variable):
    short = variable.name.split("/")[-1]
    for candidate in layer.weights:
        if candidate.name.split("/")[-1] == short:
            return candidate.numpy()
    raise KeyError(f"{layer.name}: no trained variable {short}")
