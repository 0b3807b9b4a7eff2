"""A small single-stage, anchor-free detector (CenterNet-style) and its training targets and loss.

The network maps an image to one NHWC tensor at stride 4 (boxes.py's output contract): a heatmap
logit per class, then box width/height in grid cells and the centre's offset in its cell. Only
Conv2D, BatchNormalization, ReLU and Add -- ops every ONNX Runtime provider and TensorRT run at
every precision. Decoding (peaks, boxes, NMS) happens after the engine, in numpy (boxes.py).

Targets are dense arrays of the same grid: a Gaussian peak per object on its class's heatmap,
and at each object's centre cell its size, offset and a mask bit. The loss is CenterNet's
penalty-reduced focal loss on the heatmap plus L1 on size (x0.1) and offset, at centre cells.
"""

from typing import Any, Dict, Sequence

import numpy as np

from precisionflow.detection.boxes import REGRESSION_CHANNELS, STRIDE

SIZE_WEIGHT = 0.1


def build(keras, params: Dict[str, Any], input_shape, num_classes: int):
    """Backbone to stride 4 (two strided convs, residual blocks), a 3x3 head, one 1x1 output conv."""
    layers = keras.layers
    width = max(4, int(16 * params["width"]))
    inputs = keras.Input(shape=tuple(input_shape), name="image")

    def conv_bn_relu(x, filters, stride, name):
        x = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False, name=f"{name}_conv")(x)
        x = layers.BatchNormalization(momentum=params["bn_momentum"], name=f"{name}_bn")(x)
        return layers.ReLU(name=f"{name}_relu")(x)

    x = conv_bn_relu(inputs, width, 2, "stem")
    x = conv_bn_relu(x, width * 2, 2, "down")
    for block in range(params["blocks_per_stage"]):
        y = conv_bn_relu(x, width * 2, 1, f"b{block}a")
        y = layers.Conv2D(width * 2, 3, padding="same", use_bias=False, name=f"b{block}b_conv")(y)
        y = layers.BatchNormalization(momentum=params["bn_momentum"], name=f"b{block}b_bn")(y)
        x = layers.ReLU(name=f"b{block}_out")(layers.Add(name=f"b{block}_add")([x, y]))
    x = conv_bn_relu(x, width * 2, 1, "head")
    # Heatmap biases start at -2.19 (sigmoid 0.1), as CenterNet does, so the first steps are not
    # swamped by the background cells' loss.
    bias = np.concatenate([np.full(num_classes, -2.19), np.zeros(REGRESSION_CHANNELS)]).astype(np.float32)
    # Named "logits" like every builder's output layer: QAT and int8.keep_output_layer keep it float.
    outputs = layers.Conv2D(
        num_classes + REGRESSION_CHANNELS, 1, name="logits", dtype="float32", bias_initializer=keras.initializers.Constant(bias)
    )(x)
    return keras.Model(inputs, outputs, name="center_net")


def grid_shape(image_shape: Sequence[int]):
    return (int(image_shape[0]) // STRIDE, int(image_shape[1]) // STRIDE)


def encode(objects: Dict[str, np.ndarray], image_shape, num_classes: int) -> np.ndarray:
    """One image's targets: H/4 x W/4 x (C heatmap + 4 regression + 1 mask)."""
    height, width = grid_shape(image_shape)
    target = np.zeros((height, width, num_classes + REGRESSION_CHANNELS + 1), np.float32)
    ys, xs = np.mgrid[0:height, 0:width]
    for box, label in zip(objects["boxes"], objects["classes"], strict=True):
        x0, y0, x1, y1 = np.asarray(box, np.float64) / STRIDE
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        cell_x, cell_y = min(int(cx), width - 1), min(int(cy), height - 1)
        sigma = max(0.5, np.hypot(x1 - x0, y1 - y0) / 6)
        peak = np.exp(-((xs - cell_x) ** 2 + (ys - cell_y) ** 2) / (2 * sigma**2))
        target[..., int(label)] = np.maximum(target[..., int(label)], peak)
        target[cell_y, cell_x, num_classes:] = [x1 - x0, y1 - y0, cx - cell_x, cy - cell_y, 1.0]
    return target


def encode_many(truth, image_shape, num_classes: int) -> np.ndarray:
    return (
        np.stack([encode(objects, image_shape, num_classes) for objects in truth])
        if len(truth)
        else np.zeros((0,) + grid_shape(image_shape) + (num_classes + REGRESSION_CHANNELS + 1,), np.float32)
    )


def loss(tf, num_classes: int):
    """Focal loss on the heatmap (alpha 2, beta 4) + L1 on size and offset at object centres,
    normalised by the number of objects in the batch."""

    def detection_loss(target, output):
        output = tf.cast(output, tf.float32)
        heat_target, regression_target = target[..., :num_classes], target[..., num_classes:-1]
        mask = target[..., -1:]
        heat = tf.clip_by_value(tf.sigmoid(output[..., :num_classes]), 1e-4, 1 - 1e-4)
        positive = tf.cast(tf.equal(heat_target, 1.0), tf.float32)
        positive_loss = -tf.math.log(heat) * tf.square(1 - heat) * positive
        negative_loss = -tf.math.log(1 - heat) * tf.square(heat) * tf.pow(1 - heat_target, 4) * (1 - positive)
        objects = tf.maximum(tf.reduce_sum(mask), 1.0)
        regression = tf.abs(output[..., num_classes:] - regression_target) * mask
        size_loss = tf.reduce_sum(regression[..., :2]) * SIZE_WEIGHT
        offset_loss = tf.reduce_sum(regression[..., 2:])
        return (tf.reduce_sum(positive_loss + negative_loss) + size_loss + offset_loss) / objects

    return detection_loss
