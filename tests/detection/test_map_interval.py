"""The mAP change's paired interval: each image's matches computed once by pycocotools, a
bootstrap resample re-weights them (hand-made boxes)."""

import numpy as np

from precisionflow.detection import metrics
from precisionflow.detection.boxes import Detections
from precisionflow import stats
from precisionflow.reporting import verdict_rules

CLASSES = ["car", "person"]


def scene(rng, n_images):
    """Ground truth (one or two objects per image) and two detectors: the reference finds each
    object with a small jitter; the engine also adds a stray box on some images and misses some."""
    truth, reference, engine = [], [], []
    for image in range(n_images):
        count = 1 + image % 2
        boxes = np.array([[10 + 30 * k, 10, 30 + 30 * k, 40] for k in range(count)], dtype=float)
        labels = np.array([k % 2 for k in range(count)])
        truth.append({"boxes": boxes, "classes": labels})
        jitter = boxes + rng.uniform(-2, 2, boxes.shape)
        reference.append(Detections(jitter, rng.uniform(0.6, 1.0, count), labels))
        keep = rng.uniform(size=count) > 0.1
        stray = np.array([[70.0, 60, 90, 80]]) if image % 3 == 0 else np.zeros((0, 4))
        engine.append(
            Detections(
                np.concatenate([jitter[keep], stray]),
                np.concatenate([rng.uniform(0.5, 1.0, int(keep.sum())), rng.uniform(0.7, 0.9, len(stray))]),
                np.concatenate([labels[keep], np.zeros(len(stray), dtype=int)]),
            )
        )
    return truth, reference, engine


def test_the_reweighted_matches_give_pycocotools_own_map():
    truth, reference, engine = scene(np.random.default_rng(0), 40)
    for found in (reference, engine):
        table = metrics.with_order(metrics.match_table(truth, found, CLASSES))
        scored = metrics.coco_map(truth, found, CLASSES)
        ones = np.ones(len(truth))
        assert abs(metrics.weighted_map(table, ones) - scored["map"]) < 1e-6
        assert abs(metrics.weighted_map(table, ones, slice(0, 1)) - scored["map50"]) < 1e-6


def test_a_map_change_whose_interval_straddles_the_budget_is_undecided():
    truth, reference, engine = scene(np.random.default_rng(1), 30)
    drops = metrics.paired_map_drops(
        metrics.match_table(truth, reference, CLASSES),
        metrics.match_table(truth, engine, CLASSES),
        range(30),
        resamples=verdict_rules.MIN_RESAMPLES,
    )
    point = 100 * (metrics.coco_map(truth, reference, CLASSES)["map"] - metrics.coco_map(truth, engine, CLASSES)["map"])
    low, high = np.quantile(drops["map"], [0.025, 0.975])
    assert low < point < high and high - low > 1.0  # 30 images: a wide interval around the change
    inside = verdict_rules.map_drop_check(point, drops["map"], (low + high) / 2, 0.95, "mAP")
    assert inside["verdict"] == stats.UNDECIDED
    assert verdict_rules.map_drop_check(point, drops["map"], high + 1, 0.95, "mAP")["verdict"] == stats.PASS
    assert verdict_rules.map_drop_check(point, [], high + 1, 0.95, "mAP")["verdict"] == stats.UNDECIDED  # no resamples


def test_asking_for_one_figure_resamples_the_same_images():
    """The mix search asks for one key per judged subset (mAP, or a condition's mAP@.5): the same
    draws as the evaluation's two-key call, so its interval is the verdict's, at half the cost."""
    truth, reference, engine = scene(np.random.default_rng(2), 30)
    tables = metrics.match_table(truth, reference, CLASSES), metrics.match_table(truth, engine, CLASSES)
    both = metrics.paired_map_drops(*tables, range(0, 30, 2), resamples=200)
    assert metrics.paired_map_drops(*tables, range(0, 30, 2), resamples=200, keys=("map50",)) == {"map50": both["map50"]}
    assert metrics.paired_map_drops(*tables, range(0, 30, 2), resamples=200, keys=("map",)) == {"map": both["map"]}
    # and the estimate on a subset of images is pycocotools' own figure on those images alone
    members = list(range(0, 30, 2))
    weights = np.bincount(members, minlength=30).astype(float)
    alone = metrics.coco_map([truth[i] for i in members], [engine[i] for i in members], CLASSES)["map50"]
    assert abs(metrics.weighted_map(metrics.with_order(tables[1]), weights, slice(0, 1)) - alone) < 1e-6


def with_junk(rng, found):
    """Each image's detections plus 20 low-scored boxes anywhere: what a detector's last 100 hold."""
    xy = rng.uniform(0, 150, (20, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(5, 30, (20, 2))], axis=1)
    return Detections(
        np.concatenate([found.boxes, boxes]),
        np.concatenate([found.scores, rng.uniform(0.0, 0.55, 20)]),
        np.concatenate([found.classes, rng.integers(0, 2, 20)]),
    )


def test_many_samples_at_once_give_pycocotools_own_map_on_each_subset():
    """weighted_maps weighs samples together and leaves out the detections below every true
    positive; on each subset of images (weights 0 and 1) its figure is still COCOeval's own."""
    rng = np.random.default_rng(3)
    truth, _, engine = scene(rng, 24)
    engine = [with_junk(rng, found) for found in engine]
    table = metrics.with_order(metrics.match_table(truth, engine, CLASSES))
    subsets = [sorted(rng.choice(24, size=size, replace=False)) for size in (3, 8, 16, 24)]
    weights = np.asarray([np.bincount(members, minlength=24) for members in subsets], dtype=float)
    for thresholds, key in ((slice(None), "map"), (slice(0, 1), "map50")):
        found = metrics.weighted_maps(table, weights, thresholds)
        for members, value in zip(subsets, found, strict=True):
            alone = metrics.coco_map([truth[i] for i in members], [engine[i] for i in members], CLASSES)[key]
            assert abs(value - alone) < 1e-9, (key, members)
