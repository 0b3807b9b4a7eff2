"""prune_model: make the trained model cheaper before it is retrained (finetune_model) and exported.

  channel   structured filter pruning (pruning.py): fewer channels, a smaller network
  sparse24  2:4 structured sparsity (tensorflow-model-optimization, sparsity_m_by_n=(2, 4)) on the
            eligible layers, trained in for `prune.epochs` epochs and stripped: plain weights with
            at most 2 non-zeros in every 4 along the input channels. Layers that cannot take it
            (depthwise convolutions, input channels not a multiple of 4, the head) stay dense.

Writes model.keras and prune.json (parameters and FLOPs before/after, kept channels per layer,
sparsity). `prune=none` adds no node at all.
"""

from pathlib import Path
from typing import Any, Dict, List

import numpy as np

from precisionflow.nodeio import write_json_atomic
from precisionflow.stages import NodeContext

PACKAGES = ("tensorflow", "tf-keras", "tensorflow-model-optimization", "numpy", "h5py")
CHANNEL_KEYS = ("method", "criterion", "ratio", "threshold", "granularity", "min_channels", "bn_scale", "exclude_layers")
SPARSE_KEYS = ("method", "epochs", "batch_size", "learning_rate", "seed", "exclude_layers")


def node_params(at: NodeContext) -> Dict[str, Any]:
    cfg = at.cfg
    prune = cfg["prune"]
    return {"prune": {key: prune[key] for key in (CHANNEL_KEYS if prune["method"] == "channel" else SPARSE_KEYS)}}


def sparse24_eligible(layer) -> bool:
    """Conv/dense layers whose input channels split into groups of 4 (not depthwise, not the head)."""
    kind = type(layer).__name__
    if kind not in ("Conv2D", "Dense") or layer.name == "logits":
        return False
    if kind == "Conv2D" and layer.groups != 1:
        return False
    return layer.get_weights()[0].shape[-2] % 4 == 0


def m_by_n_sparsity(kernel: np.ndarray) -> float:
    """The largest share of non-zeros in any group of 4 along the input-channel axis (<= 0.5 for 2:4)."""
    moved = np.moveaxis(kernel, -2, -1)  # input channels last
    groups = moved.reshape(-1, moved.shape[-1] // 4, 4)
    return float((groups != 0).sum(axis=-1).max() / 4.0)


def prune_sparse24(tf, keras, model, params: Dict[str, Any], data_dir: Path):
    """Train 2:4 masks in, strip the wrappers; (model, per-layer report, layers left dense)."""
    import tensorflow_model_optimization as tfmot

    from precisionflow.datasets.store import Split

    prune = params["prune"]
    excluded = set(prune["exclude_layers"] or [])
    dense = [
        layer.name
        for layer in model.layers
        if type(layer).__name__ in ("Conv2D", "Dense", "DepthwiseConv2D")
        and (not sparse24_eligible(layer) or layer.name in excluded)
    ]

    def wrap(layer):
        if sparse24_eligible(layer) and layer.name not in excluded:
            return tfmot.sparsity.keras.prune_low_magnitude(layer, sparsity_m_by_n=(2, 4))
        return layer

    keras.utils.set_random_seed(prune["seed"])
    wrapped = keras.models.clone_model(model, clone_function=wrap)  # wrappers hold the trained layers themselves
    train = Split(data_dir, "train")
    x, y = train.array(), train.labels  # sparse24's short fine-tune: in memory (see README, data at scale)
    wrapped.compile(
        optimizer=keras.optimizers.Adam(prune["learning_rate"]),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    wrapped.fit(
        x,
        y,
        batch_size=prune["batch_size"],
        epochs=prune["epochs"],
        verbose=2,
        callbacks=[tfmot.sparsity.keras.UpdatePruningStep()],
    )
    stripped = tfmot.sparsity.keras.strip_pruning(wrapped)
    layers = {
        layer.name: {
            "max_nonzero_per_4": m_by_n_sparsity(layer.get_weights()[0]),
            "zeros": float(np.mean(layer.get_weights()[0] == 0)),
        }
        for layer in stripped.layers
        if sparse24_eligible(layer) and layer.name not in excluded
    }
    return stripped, layers, dense


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    from precisionflow.modeling import pruning
    from precisionflow.modeling.tfenv import import_tensorflow

    tf, keras = import_tensorflow()
    model = keras.models.load_model(inputs["model"] / "model.keras", compile=False)
    method = params["prune"]["method"]
    if method == "channel":
        pruned, report = pruning.prune(keras, model, params["prune"])
    else:
        pruned, layers, dense = prune_sparse24(tf, keras, model, params, inputs["data"])
        report = {
            "layers": layers,
            "left_dense": dense,
            "params_before": int(model.count_params()),
            "params_after": int(pruned.count_params()),
            "flops_before": pruning.flops(model),
            "flops_after": pruning.flops(pruned),
        }
    report["weights_zero_fraction"] = zero_fraction(pruned)
    report["method"] = method
    pruned.save(out / "model.keras")
    write_json_atomic(out / "prune.json", report)
    summary = {
        key: report[key]
        for key in ("method", "params_before", "params_after", "flops_before", "flops_after", "weights_zero_fraction")
    }
    return summary


def zero_fraction(model) -> float:
    kernels: List[np.ndarray] = [
        layer.get_weights()[0] for layer in model.layers if type(layer).__name__ in ("Conv2D", "Dense") and layer.get_weights()
    ]
    return float(sum(int(np.sum(k == 0)) for k in kernels) / max(sum(k.size for k in kernels), 1))
