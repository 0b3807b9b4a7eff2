"""benchmark_framework: the TensorFlow model itself, timed like the engines (speed.py).

One node per (model, target): every engine's speed-up is a ratio of two figures measured in the
same run on the same machine. The model runs as a tf.function (graph mode, not eager), with the
same thread count as the engines, so the baseline is the framework at its ordinary best.
"""

from pathlib import Path
from typing import Any, Dict

from precisionflow.measure import speed
from precisionflow.measure.keras_runner import KerasRunner
from precisionflow.nodeio import write_json_atomic
from precisionflow.datasets.store import Split
from precisionflow.stages import NodeContext

PACKAGES = ("tensorflow", "tf-keras", "numpy")


def node_params(at: NodeContext) -> Dict[str, Any]:
    cfg, target, runtime = at.cfg, at.target, at.runtime
    from precisionflow.measure.targets import device_params, timing_settings

    return {
        "evaluate": timing_settings(cfg, target),
        "threads": cfg["engine"]["intra_op_threads"],
        **device_params(cfg, target, runtime),
    }


def run(params: Dict[str, Any], inputs: Dict[str, Path], out: Path) -> Dict[str, Any]:
    from precisionflow.modeling.tfenv import import_tensorflow

    tf, keras = import_tensorflow()
    tf.config.threading.set_intra_op_parallelism_threads(params["threads"])
    tf.config.threading.set_inter_op_parallelism_threads(1)
    load = lambda: KerasRunner(tf, keras.models.load_model(inputs["model"] / "model.keras", compile=False))
    images = speed.timing_images(Split(inputs["data"], "test"), params["evaluate"])
    measured = speed.measure(load, images, params["evaluate"])
    devices = [d.device_type for d in tf.config.list_logical_devices()]
    metrics = {
        "framework": "tensorflow",
        "version": tf.__version__,
        "device": "gpu" if "GPU" in devices else "cpu",
        "target": params["target"],
        "threads": params["threads"],
        "speed": measured,
    }
    write_json_atomic(out / "metrics.json", metrics)
    return {"b1_throughput_sps": measured["batch"][min(measured["batch"], key=int)]["throughput_sps"]}
