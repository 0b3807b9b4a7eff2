"""An fp16 engine that overflows: a digits classifier whose logits reach ~1e5 (beyond fp16's 65,504),
run through the workflow. On this CPU ONNX Runtime computes the fp16 graph in fp32, so nothing
overflows and the row passes its budget; on the H200 the fp16 engine's logits become inf and the
evaluation, the table's notes and the budget verdict say so. As run for the README (raw outputs in
benchmarks/results/fp16_overflow/):

    python benchmarks/fp16_overflow.py model benchmarks/out/fp16_overflow/overflow.keras
    O="experiment=h200 $(python benchmarks/fp16_overflow.py) model.path=$PWD/benchmarks/out/fp16_overflow/overflow.keras \
       results_dir=$PWD/benchmarks/out/fp16_overflow/results"
    precisionflow run $O -- --omit-from build_engine && precisionflow ship --target h200 --to bundle $O
    # on the H200 (onnxruntime-gpu 1.31.1 on PYTHONPATH, as in benchmarks/gpu_node.sh):
    #   python -m precisionflow.pipeline.remote run bundle; python -m precisionflow.pipeline.remote collect bundle collected --without-engine-files
    precisionflow land --from collected $O && precisionflow run $O             # -> h200_run.txt
    precisionflow run $O "targets=[local]"                                       # -> cpu_run.txt

The model: Conv(16) -> ReLU -> Dense(64) -> ReLU -> Dense(10), trained 30 epochs on digits, then its
last layer's kernel and bias multiplied by one positive factor (so every argmax, hence fp32's top-1,
is unchanged) chosen to put the median largest |logit| at 1e5; training in the workflow is 1 epoch at
a learning rate of 1e-9 (the weights stay), and export.max_abs_diff=1.0 (logits of 1e5 differ by
~0.06 between Keras and ONNX Runtime in fp32: 6e-7 relative).
"""

import sys
from pathlib import Path

import numpy as np

OVERRIDES = [
    "train.epochs=1",
    "train.learning_rate=1e-9",
    "precisions=[fp32,fp16]",
    "export.max_abs_diff=1.0",
    "model=keras_file",
]
TARGET_MEDIAN_LOGIT = 1e5


def make_model(path: Path) -> None:
    from sklearn.datasets import load_digits

    from precisionflow.modeling.tfenv import import_tensorflow

    tf, keras = import_tensorflow()
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, name="logits"),
        ]
    )
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(images, digits.target, epochs=30, batch_size=64, verbose=0)
    largest = np.median(np.max(np.abs(model.predict(images, verbose=0)), axis=1))
    factor = TARGET_MEDIAN_LOGIT / largest
    kernel, bias = model.get_layer("logits").get_weights()
    model.get_layer("logits").set_weights([kernel * factor, bias * factor])
    logits = model.predict(images, verbose=0)
    print(
        f"scaled the last layer by {factor:.0f}: median largest |logit| {np.median(np.max(np.abs(logits), axis=1)):.0f}, "
        f"{np.mean(np.max(np.abs(logits), axis=1) > 65504):.2%} of images beyond fp16's 65,504; "
        f"largest |weight| {max(np.abs(kernel).max(), np.abs(bias).max()) * factor:.0f}"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)


if __name__ == "__main__":
    if sys.argv[1:2] == ["model"]:
        make_model(Path(sys.argv[2]))
    else:
        print(" ".join(OVERRIDES))
