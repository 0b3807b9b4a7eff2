"""Training and scoring a detector inside train_model / finetune_model (task=detection).

The same fit as classification -- same optimiser, NaN stop, cache choice -- with the CenterNet
loss on targets encoded from the data node's boxes, and mAP (pycocotools) instead of top-1 in the
summary: on the validation split for the "learned nothing" check (a decision never looks at the
test split), on the test split for the record.
"""

import dataclasses
from pathlib import Path
from typing import Any, Dict


from precisionflow.detection.boxes import DetectionEvalConf
from precisionflow.datasets.store import Split, predict_in_batches
from precisionflow.detection import boxes, center_net, metrics
from precisionflow.detection.data import load_objects

# Decoding for the training summary: evaluate.detection's defaults (engines use the configured values).
SUMMARY_DECODE = dataclasses.asdict(DetectionEvalConf())
LEARNED_NOTHING_MAP50 = 0.05


def _targets(split: Split):
    return center_net.encode_many(load_objects(split.data_dir, split.name, len(split)), split.image_shape, len(split.classes))


def fit(tf, keras, model, data_dir: Path, settings: Dict[str, Any], opt, cache: str, callbacks):
    """model.fit on (images, encoded targets); returns Keras' History."""
    train, val = Split(data_dir, "train"), Split(data_dir, "val")
    model.compile(optimizer=opt, loss=center_net.loss(tf, len(train.classes)))
    if cache == "memory":
        return model.fit(
            train.array(),
            _targets(train),
            validation_data=(val.array(), _targets(val)),
            epochs=settings["epochs"],
            batch_size=settings["batch_size"],
            shuffle=True,
            verbose=2,
            callbacks=callbacks,
        )
    from precisionflow.datasets import streaming

    def streamed(split: Split, shuffle: bool, seed: int):
        objects = load_objects(split.data_dir, split.name, len(split))
        encode = lambda indices: center_net.encode_many([objects[i] for i in indices], split.image_shape, len(split.classes))
        shape = center_net.encode_many(objects[:1], split.image_shape, len(split.classes)).shape[1:]
        return streaming.dataset(tf, split, settings["batch_size"], shuffle, seed, streaming.Targets(encode, shape, "float32"))

    return model.fit(
        streamed(train, True, settings["seed"]),
        validation_data=streamed(val, False, 0),
        epochs=settings["epochs"],
        verbose=2,
        callbacks=callbacks,
    )


def split_map(model, data_dir: Path, split_name: str) -> Dict[str, Any]:
    split = Split(data_dir, split_name)
    outputs = predict_in_batches(lambda batch: model.predict_on_batch(batch), split, 64)
    found = boxes.decode(outputs, len(split.classes), SUMMARY_DECODE)
    return metrics.coco_map(load_objects(data_dir, split_name, len(split)), found, split.classes)


def summary(model, data_dir: Path) -> Dict[str, Any]:
    val, test = split_map(model, data_dir, "val"), split_map(model, data_dir, "test")
    return {
        "val_map50": round(val["map50"], 4),
        "val_map": round(val["map"], 4),
        "test_map50": round(test["map50"], 4),
        "test_map": round(test["map"], 4),
    }


def learned_nothing(summary: Dict[str, Any]) -> str:
    """'' or why this detector learned nothing (validation mAP@.5 below 0.05)."""
    if summary.get("val_map50", 1.0) >= LEARNED_NOTHING_MAP50:
        return ""
    return (
        f"validation mAP@.5 {summary['val_map50']:.3f} is below {LEARNED_NOTHING_MAP50}: the detector learned nothing, "
        "and its engines' mAP and spurious/lost boxes compare noise. Train longer (train.epochs) or check the data"
    )
