"""Structured channel pruning of Keras functional models: the network really gets smaller.

How it works, on the model's config (its layer graph) and weights:
1. Channel groups. Every conv/dense layer that may be pruned starts a group of output channels.
   Layers that keep channels one to one (BatchNorm, activations, pooling, padding, dropout,
   depthwise convs with multiplier 1) pass their input's group on; element-wise joins (Add, ...)
   merge their inputs' groups into one, so a residual block's branches keep the same channels
   (one decision per group); Concatenate and Flatten lay groups side by side. A group containing
   a layer that must not change (the input, the head, a listed layer) is kept whole.
2. Decision per group: each output channel scores the L1 or L2 norm of its filter weights summed
   over the group's producers (optionally times |gamma| of the BatchNorm right after); the top
   channels are kept, by `ratio` (fraction removed) or `threshold` (score relative to the best),
   rounded up to a multiple of `granularity` and at least `min_channels`.
3. Rebuild: the producers get their new filter/unit counts, every consumer is rebuilt with the
   matching input channels, and each surviving weight is copied over (sliced on the kept output
   and input channels).

The families of keras.applications are covered: MobileNetV2 (ReLU6), EfficientNet (Rescaling and
Normalization in front, swish, squeeze-excite: global pool -> Reshape to 1x1xC -> two 1x1 convs ->
Multiply gating the block's channels, so the expand conv joins the block's group) and MobileNetV3
(hard-swish written as `x * relu6(x + 3) / 6`: element-wise ops with a constant, TFOpLambda layers).

A layer type this does not know, on a path whose channels could change, is an error naming the
layer and its type: never a silently broken model. `check_config` runs that analysis on a saved
model's config.json alone (no TensorFlow, no weights), so planning refuses such a model before any
job runs.
"""

import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from precisionflow.errors import ConfigError

PRODUCERS = {"Conv2D", "Dense"}
PASS_THROUGH = {
    "BatchNormalization",
    "Activation",
    "ReLU",
    "LeakyReLU",
    "ELU",
    "PReLU",
    "Softmax",
    "Dropout",
    "SpatialDropout2D",
    "GaussianNoise",
    "MaxPooling2D",
    "AveragePooling2D",
    "GlobalAveragePooling2D",
    "GlobalMaxPooling2D",
    "ZeroPadding2D",
    "Cropping2D",
    "DepthwiseConv2D",
    "Rescaling",
    "Normalization",
    "Identity",
}
JOINS = {"Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum"}
# Per-channel constants in a layer's config (not its weights) cannot be sliced from the weights file:
# a layer holding them keeps its channels whole.
PER_CHANNEL_CONFIG = {"Rescaling": ("scale", "offset"), "Normalization": ("mean", "variance")}
# TFOpLambda functions that act on each element alone (with a constant as the other operand).
ELEMENTWISE_OPS = {
    "__operators__.add",
    "__operators__.sub",
    "math.add",
    "math.subtract",
    "math.multiply",
    "math.truediv",
    "math.divide",
    "nn.relu",
    "nn.relu6",
    "math.sigmoid",
    "nn.silu",
    "nn.swish",
    "math.tanh",
    "math.minimum",
    "math.maximum",
    "clip_by_value",
}


class PruneError(ConfigError):
    pass


class _Groups:
    """Union-find over channel groups: size, whether they may shrink, and the producers' scores."""

    def __init__(self):
        self.parent: List[int] = []
        self.size: List[int] = []
        self.fixed: List[bool] = []
        self.scores: List[Optional[np.ndarray]] = []

    def new(self, size: int, fixed: bool, score: Optional[np.ndarray] = None) -> int:
        self.parent.append(len(self.parent))
        self.size.append(size)
        self.fixed.append(fixed)
        self.scores.append(score)
        return len(self.parent) - 1

    def find(self, group: int) -> int:
        while self.parent[group] != group:
            self.parent[group] = self.parent[self.parent[group]]
            group = self.parent[group]
        return group

    def union(self, a: int, b: int, where: str) -> int:
        a, b = self.find(a), self.find(b)
        if a == b:
            return a
        if self.size[a] != self.size[b]:
            raise PruneError(f"{where}: joins {self.size[a]} and {self.size[b]} channels")
        self.parent[b] = a
        self.fixed[a] = self.fixed[a] or self.fixed[b]
        if self.scores[b] is not None:
            self.scores[a] = self.scores[b] if self.scores[a] is None else self.scores[a] + self.scores[b]
        return a


Layout = List[Tuple[int, int]]  # the channels of a tensor: (group, channels) segments, in order


def _node_entries(layer_config: Dict[str, Any]) -> List[list]:
    """The [source, node, tensor, kwargs] entries of a layer's one call. TFOpLambda layers (`x + 3.0`)
    store that call one list level shallower than other layers."""
    nodes = layer_config.get("inbound_nodes") or []
    if not nodes:
        return []
    if isinstance(nodes[0], list) and nodes[0] and isinstance(nodes[0][0], str):
        return [nodes[0]]
    if len(nodes) > 1:
        raise PruneError(f"layer '{layer_config['name']}' is called more than once (shared layer): not supported")
    return nodes[0]


def _inbound(layer_config: Dict[str, Any]) -> List[str]:
    return [entry[0] for entry in _node_entries(layer_config)]


def channel_score(kernel: np.ndarray, criterion: str) -> np.ndarray:
    """Per output channel: L1 or L2 norm of its filter (the kernel's last axis is the output)."""
    flat = np.abs(kernel.reshape(-1, kernel.shape[-1]))
    if criterion == "l1":
        return flat.sum(axis=0)
    if criterion == "l2":
        return np.sqrt((flat**2).sum(axis=0))
    raise PruneError(f"prune.criterion: expected l1 or l2, found '{criterion}'")


def keep_count(channels: int, ratio: float, granularity: int, min_channels: int) -> int:
    """Channels kept by `ratio`: the rest rounded up to a multiple of `granularity`, >= min_channels."""
    wanted = math.ceil(channels * (1.0 - ratio))
    rounded = granularity * math.ceil(wanted / granularity) if granularity > 1 else wanted
    return int(min(channels, max(rounded, min_channels, 1)))


def chosen_channels(score: np.ndarray, settings: Dict[str, Any]) -> np.ndarray:
    """Sorted indices of the channels a group keeps."""
    channels = len(score)
    if settings.get("threshold") is not None:
        relative = score / max(float(score.max()), 1e-12)
        wanted = int(np.sum(relative >= settings["threshold"]))
        count = keep_count(channels, 1.0 - wanted / channels, settings["granularity"], settings["min_channels"])
    else:
        count = keep_count(channels, settings["ratio"], settings["granularity"], settings["min_channels"])
    order = np.argsort(-score, kind="stable")
    return np.sort(order[:count])


def analyse(model, settings: Dict[str, Any]):
    """(groups, layout of every layer's output, the producer group of each prunable layer)."""
    weights = {layer.name: layer.get_weights() for layer in model.layers}
    return analyse_config(model.get_config(), settings, weights)


def analyse_config(config: Dict[str, Any], settings: Dict[str, Any], weights: Optional[Dict[str, list]] = None):
    """The channel groups of a functional model's config; without `weights` (planning) the groups are
    found and unknown layers refused, but no channel is scored."""
    keep = set(settings.get("exclude_layers") or []) | set(_output_layer_names(config))
    groups, layouts, produced = _Groups(), {}, {}
    for layer_config in config["layers"]:
        inputs = [layouts[source] for source in _inbound(layer_config)]
        layouts[layer_config["name"]] = _layer_layout(groups, produced, weights, layer_config, inputs, keep, settings)
        if layer_config["name"] in keep:  # an output (or a listed layer) keeps every channel it carries
            _fix(groups, layouts[layer_config["name"]])
    return groups, layouts, produced


def _fix(groups: "_Groups", layout) -> None:
    for segment in layout:
        if segment[0] == "flatten":
            _fix(groups, segment[2])
        else:
            groups.fixed[groups.find(segment[0])] = True


def check_config(config: Dict[str, Any], settings: Dict[str, Any]) -> None:
    """Refuse, before anything runs, a model whose layers channel pruning cannot follow."""
    if config.get("layers") is None:
        raise PruneError(
            "prune=channel needs a functional Keras model (a layer graph); this model's config has no "
            "layer list (a subclassed model?). Use prune=none or prune=sparse24 for it."
        )
    analyse_config(config, settings)


def _output_layer_names(config) -> List[str]:
    return [entry[0] for entry in config["output_layers"]]


def _layer_layout(groups, produced, weights, layer_config, inputs: List[Layout], keep, settings) -> Layout:
    name, kind, inner = layer_config["name"], layer_config["class_name"], layer_config["config"]
    if kind == "InputLayer":
        return [(groups.new(int(inner["batch_input_shape"][-1]), fixed=True), int(inner["batch_input_shape"][-1]))]
    if kind in PRODUCERS:
        return _producer(groups, produced, weights, name, kind, inner, keep, settings)
    if kind == "DepthwiseConv2D" and inner.get("depth_multiplier", 1) != 1:
        raise PruneError(
            f"layer '{name}' ({kind}, depth_multiplier {inner['depth_multiplier']}): channel pruning "
            "supports depthwise convolutions with multiplier 1 only; use prune=none for this model"
        )
    if kind in PASS_THROUGH or _is_elementwise_op(layer_config):
        return _pass_through(groups, weights, name, kind, inner, inputs[0], keep, settings)
    if kind == "Reshape":
        return _reshape_layout(name, inner, inputs[0])
    if kind in JOINS:
        return _joined(groups, name, kind, inputs)
    if kind == "Concatenate":
        if inner.get("axis", -1) not in (-1, 3):
            raise PruneError(f"layer '{name}' (Concatenate on axis {inner.get('axis')}): only the channel axis is supported")
        return [segment for layout in inputs for segment in layout]
    if kind == "Flatten":
        shape = (layer_config.get("build_config") or {}).get("input_shape") or [None, 1, 1, None]
        positions = int(np.prod([int(d) for d in shape[1:-1]]))
        return [("flatten", positions, inputs[0])]  # type: ignore[list-item]
    raise PruneError(
        f"layer '{name}' has type {kind}, which channel pruning does not know: prune only models "
        "built from Conv2D/Dense/DepthwiseConv2D/BatchNorm/Normalization/Rescaling/activations/pooling/"
        "Add/Multiply/Concatenate/squeeze-excite Reshape, or use prune=none"
    )


def _producer(groups, produced, weights, name, kind, inner, keep, settings) -> Layout:
    channels = int(inner["filters"] if kind == "Conv2D" else inner["units"])
    fixed = name in keep or (kind == "Conv2D" and inner.get("groups", 1) != 1)
    score = None if fixed or weights is None else channel_score(weights[name][0], settings["criterion"])
    group = groups.new(channels, fixed, score)
    produced[name] = group
    return [(group, channels)]


def _pass_through(groups, weights, name, kind, inner, layout: Layout, keep, settings) -> Layout:
    """Layers that act on each channel alone: the output has the input's channels."""
    if kind == "BatchNormalization" and weights is not None and settings.get("bn_scale") and inner.get("scale", True):
        _scale_by_gamma(groups, layout, weights[name][0])
    per_channel = any(isinstance(inner.get(key), list) and len(inner[key]) > 1 for key in PER_CHANNEL_CONFIG.get(kind, ()))
    if per_channel:
        _fix(groups, layout)
    return layout


def _is_elementwise_op(layer_config: Dict[str, Any]) -> bool:
    """A TFOpLambda like `x + 3.0` or `tf.nn.relu6(x)`: one tensor in, constants only beside it."""
    if layer_config["class_name"] != "TFOpLambda" or layer_config["config"].get("function") not in ELEMENTWISE_OPS:
        return False
    entries = _node_entries(layer_config)
    extras = [entry[3] for entry in entries if len(entry) > 3 and isinstance(entry[3], dict)]
    constants = (value for kwargs in extras for key, value in kwargs.items() if key != "name")
    return len(entries) == 1 and all(isinstance(value, (int, float)) for value in constants)


def _reshape_layout(name: str, inner: Dict[str, Any], layout: Layout) -> Layout:
    """Squeeze-excite's Reshape (C) -> (1, 1, C): only singleton axes are added, channels stay last."""
    target = list(inner.get("target_shape") or [])
    channels = sum(size for _, size in layout) if layout and layout[0][0] != "flatten" else None
    if not target or any(int(d) != 1 for d in target[:-1]) or channels is None or int(target[-1]) != channels:
        raise PruneError(
            f"layer '{name}' (Reshape to {target}) moves channels between axes; channel pruning follows "
            "only reshapes that add singleton axes and keep the channels last (squeeze-excite's "
            "(C) -> (1, 1, C)). Use prune=none for this model, or list its producers in "
            "prune.exclude_layers."
        )
    return layout


def _joined(groups, name: str, kind: str, inputs: List[Layout]) -> Layout:
    """Element-wise joins (Add, Multiply, ...): every input's channels become one group."""
    if any(len(layout) != 1 or layout[0][0] == "flatten" for layout in inputs):
        raise PruneError(f"layer '{name}' ({kind}) joins concatenated tensors: not supported")
    merged = inputs[0][0][0]
    for layout in inputs[1:]:
        merged = groups.union(merged, layout[0][0], f"layer '{name}' ({kind})")
    return [(merged, inputs[0][0][1])]


def _scale_by_gamma(groups: _Groups, layout, gamma: np.ndarray) -> None:
    """A BatchNorm right after a producer: a channel it scales towards zero matters less."""
    if len(layout) == 1 and layout[0][0] != "flatten":
        root = groups.find(layout[0][0])
        if groups.scores[root] is not None and len(groups.scores[root]) == len(gamma):
            groups.scores[root] = groups.scores[root] * np.abs(gamma)


def kept_groups(groups: _Groups, settings: Dict[str, Any]) -> Dict[int, np.ndarray]:
    """Kept channel indices of every group root (all of them for fixed groups)."""
    kept = {}
    for group in range(len(groups.parent)):
        root = groups.find(group)
        if root in kept:
            continue
        if groups.fixed[root] or groups.scores[root] is None:
            kept[root] = np.arange(groups.size[root])
        else:
            kept[root] = chosen_channels(groups.scores[root], settings)
    return kept


def layout_indices(layout, groups: _Groups, kept: Dict[int, np.ndarray]) -> Tuple[np.ndarray, int]:
    """(kept indices into the tensor's channels, its channel count before pruning)."""
    if layout and layout[0][0] == "flatten":
        _, positions, inner = layout[0]
        channel_kept, channels = layout_indices(inner, groups, kept)
        return (np.arange(positions)[:, None] * channels + channel_kept[None, :]).reshape(-1), positions * channels
    indices, offset = [], 0
    for group, size in layout:
        indices.append(offset + kept[groups.find(group)])
        offset += size
    return np.concatenate(indices), offset


def prune(keras, model, settings: Dict[str, Any]):
    """(the pruned model, a report: kept channels per pruned layer, params and FLOPs before/after)."""
    groups, layouts, produced = analyse(model, settings)
    kept = kept_groups(groups, settings)
    config = model.get_config()
    for layer_config in config["layers"]:
        name = layer_config["name"]
        if name in produced:
            count = len(kept[groups.find(produced[name])])
            layer_config["config"]["filters" if layer_config["class_name"] == "Conv2D" else "units"] = count
        elif layer_config["class_name"] == "Reshape":  # squeeze-excite's (1, 1, C): C as kept
            source = layouts[_inbound(layer_config)[0]]
            layer_config["config"]["target_shape"] = [
                *layer_config["config"]["target_shape"][:-1],
                len(layout_indices(source, groups, kept)[0]),
            ]
    pruned = keras.Model.from_config(config)
    for layer_config in config["layers"]:
        name, kind = layer_config["name"], layer_config["class_name"]
        old = model.get_layer(name).get_weights()
        if not old:
            continue
        sources = _inbound(layer_config)
        in_kept = layout_indices(layouts[sources[0]], groups, kept)[0] if sources else None
        out_kept = kept[groups.find(produced[name])] if name in produced else None
        pruned.get_layer(name).set_weights(_sliced(kind, name, old, in_kept, out_kept))
    report = {
        "layers": {
            name: {"kept": int(len(kept[groups.find(group)])), "of": int(groups.size[groups.find(group)])}
            for name, group in produced.items()
            if not groups.fixed[groups.find(group)]
        },
        "params_before": int(model.count_params()),
        "params_after": int(pruned.count_params()),
        "flops_before": flops(model),
        "flops_after": flops(pruned),
    }
    return pruned, report


def _sliced(kind: str, name: str, weights: List[np.ndarray], in_kept, out_kept) -> List[np.ndarray]:
    if kind == "Conv2D":
        kernel = weights[0][:, :, in_kept, :][..., out_kept]
        return [kernel] + [bias[out_kept] for bias in weights[1:]]
    if kind == "Dense":
        return [weights[0][in_kept][:, out_kept]] + [bias[out_kept] for bias in weights[1:]]
    if kind == "DepthwiseConv2D":
        return [weights[0][:, :, in_kept, :]] + [bias[in_kept] for bias in weights[1:]]
    if kind in ("BatchNormalization", "PReLU"):
        return [w[..., in_kept] for w in weights]
    if kind == "Normalization":  # mean and variance per channel, the sample count a scalar
        return [w[..., in_kept] if w.ndim else w for w in weights]
    raise PruneError(f"layer '{name}' ({kind}) has weights channel pruning cannot slice")


def flops(model) -> int:
    """Multiply-adds x 2 of the conv and dense layers for one input."""
    total = 0
    for layer in model.layers:
        kind = type(layer).__name__
        if kind in ("Conv2D", "DepthwiseConv2D"):
            # kh*kw*cin*cout (conv) or kh*kw*channels*multiplier (depthwise) multiply-adds per output position
            total += 2 * int(np.prod(layer.output_shape[1:-1])) * int(np.prod(layer.get_weights()[0].shape))
        elif kind == "Dense":
            total += 2 * int(np.prod(layer.get_weights()[0].shape))
    return int(total)


def check_settings(settings: Dict[str, Any], where: str = "prune") -> None:
    if settings.get("threshold") is None and not 0.0 <= settings["ratio"] < 1.0:
        raise PruneError(f"{where}.ratio: expected a fraction of channels to remove in [0, 1), found {settings['ratio']}")
    if settings.get("threshold") is not None and not 0.0 <= settings["threshold"] <= 1.0:
        raise PruneError(
            f"{where}.threshold: expected a score relative to the best channel in [0, 1], found {settings['threshold']}"
        )
    if settings["granularity"] < 1 or settings["min_channels"] < 1:
        raise PruneError(
            f"{where}.granularity and {where}.min_channels: expected >= 1, found "
            f"{settings['granularity']} and {settings['min_channels']}"
        )


def describe(prune: Dict[str, Any]) -> str:
    """Short words for a prune node's settings (its slug, the table's `pruned` column)."""
    if prune["method"] != "channel":
        return f"{prune['method']} e{prune['epochs']}"
    return f"channel t{prune['threshold']}" if prune.get("threshold") is not None else f"channel r{prune['ratio']}"
