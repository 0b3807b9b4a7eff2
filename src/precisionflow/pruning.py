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

A layer type this does not know, on a path whose channels could change, is an error naming the
layer and its type: never a silently broken model.
"""

import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from precisionflow.errors import ConfigError

PRODUCERS = {"Conv2D", "Dense"}
PASS_THROUGH = {"BatchNormalization", "Activation", "ReLU", "LeakyReLU", "ELU", "PReLU", "Softmax", "Dropout",
                "SpatialDropout2D", "GaussianNoise", "MaxPooling2D", "AveragePooling2D", "GlobalAveragePooling2D",
                "GlobalMaxPooling2D", "ZeroPadding2D", "Cropping2D", "DepthwiseConv2D", "Rescaling", "Identity"}
JOINS = {"Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum"}
WEIGHTED_PASS_THROUGH = {"BatchNormalization", "DepthwiseConv2D", "PReLU"}


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


def _inbound(layer_config: Dict[str, Any]) -> List[str]:
    nodes = layer_config.get("inbound_nodes") or []
    if len(nodes) > 1:
        raise PruneError(f"layer '{layer_config['name']}' is called more than once (shared layer): not supported")
    return [entry[0] for entry in nodes[0]] if nodes else []


def channel_score(kernel: np.ndarray, criterion: str) -> np.ndarray:
    """Per output channel: L1 or L2 norm of its filter (the kernel's last axis is the output)."""
    flat = np.abs(kernel.reshape(-1, kernel.shape[-1]))
    if criterion == "l1":
        return flat.sum(axis=0)
    if criterion == "l2":
        return np.sqrt((flat ** 2).sum(axis=0))
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
    config = model.get_config()
    keep = set(settings.get("exclude_layers") or []) | set(_output_layer_names(config))
    groups, layouts, produced = _Groups(), {}, {}
    weights = {layer.name: layer.get_weights() for layer in model.layers}
    for layer_config in config["layers"]:
        name, kind, inner = layer_config["name"], layer_config["class_name"], layer_config["config"]
        inputs = [layouts[source] for source in _inbound(layer_config)]
        layouts[name] = _layer_layout(model, groups, produced, weights, name, kind, inner, inputs, keep, settings)
    return groups, layouts, produced


def _output_layer_names(config) -> List[str]:
    return [entry[0] for entry in config["output_layers"]]


def _layer_layout(model, groups, produced, weights, name, kind, inner, inputs: List[Layout], keep, settings) -> Layout:
    if kind == "InputLayer":
        return [(groups.new(int(inner["batch_input_shape"][-1]), fixed=True), int(inner["batch_input_shape"][-1]))]
    if kind in PRODUCERS:
        channels = int(inner["filters"] if kind == "Conv2D" else inner["units"])
        fixed = name in keep or (kind == "Conv2D" and inner.get("groups", 1) != 1)
        score = None if fixed else channel_score(weights[name][0], settings["criterion"])
        group = groups.new(channels, fixed, score)
        produced[name] = group
        return [(group, channels)]
    if kind == "DepthwiseConv2D" and inner.get("depth_multiplier", 1) != 1:
        raise PruneError(f"layer '{name}' ({kind}, depth_multiplier {inner['depth_multiplier']}): channel pruning "
                         "supports depthwise convolutions with multiplier 1 only; use prune=none for this model")
    if kind in PASS_THROUGH:
        if kind == "BatchNormalization" and settings.get("bn_scale") and inner.get("scale", True):
            _scale_by_gamma(groups, inputs[0], weights[name][0])
        if name in keep:
            for group, _ in inputs[0]:
                groups.fixed[groups.find(group)] = True
        return inputs[0]
    if kind in JOINS:
        if any(len(layout) != 1 for layout in inputs):
            raise PruneError(f"layer '{name}' ({kind}) joins concatenated tensors: not supported")
        merged = inputs[0][0][0]
        for layout in inputs[1:]:
            merged = groups.union(merged, layout[0][0], f"layer '{name}' ({kind})")
        return [(merged, inputs[0][0][1])]
    if kind == "Concatenate":
        if inner.get("axis", -1) not in (-1, 3):
            raise PruneError(f"layer '{name}' (Concatenate on axis {inner.get('axis')}): only the channel axis is supported")
        return [segment for layout in inputs for segment in layout]
    if kind == "Flatten":
        positions = int(np.prod(model.get_layer(name).input_shape[1:-1]))
        return [("flatten", positions, inputs[0])]  # type: ignore[list-item]
    raise PruneError(f"layer '{name}' has type {kind}, which channel pruning does not know: prune only models "
                     "built from Conv2D/Dense/DepthwiseConv2D/BatchNorm/activations/pooling/Add/Concatenate, "
                     "or use prune=none")


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
    report = {"layers": {name: {"kept": int(len(kept[groups.find(group)])), "of": int(groups.size[groups.find(group)])}
                         for name, group in produced.items() if not groups.fixed[groups.find(group)]},
              "params_before": int(model.count_params()), "params_after": int(pruned.count_params()),
              "flops_before": flops(model), "flops_after": flops(pruned)}
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
        raise PruneError(f"{where}.threshold: expected a score relative to the best channel in [0, 1], found {settings['threshold']}")
    if settings["granularity"] < 1 or settings["min_channels"] < 1:
        raise PruneError(f"{where}.granularity and {where}.min_channels: expected >= 1, found "
                         f"{settings['granularity']} and {settings['min_channels']}")

