"""Detection arithmetic on hand-made boxes: pycocotools' AP, spurious/lost/shadow counting, decoding."""

import numpy as np
import pytest

from precisionflow.detection import boxes, metrics
from precisionflow.detection.boxes import Detections

CLASSES = ["car", "van"]


def found(*items):
    """Detections from (x0, y0, x1, y1, score, class) tuples."""
    array = np.asarray(items, np.float64).reshape(-1, 6)
    return Detections(array[:, :4], array[:, 4], array[:, 5].astype(int))


def truth(*items, shadows=()):
    array = np.asarray(items, np.float64).reshape(-1, 5)
    return {"boxes": array[:, :4], "classes": array[:, 4].astype(int), "shadows": np.asarray(shadows, np.float64).reshape(-1, 4)}


def test_perfect_detections_score_ap_one():
    gt = [truth((0, 0, 10, 10, 0), (20, 20, 30, 34, 1))]
    result = metrics.coco_map(gt, [found((0, 0, 10, 10, 0.9, 0), (20, 20, 30, 34, 0.8, 1))], CLASSES)
    assert result["map"] == pytest.approx(1.0) and result["map50"] == pytest.approx(1.0)
    assert result["per_class_ap"] == {"car": pytest.approx(1.0), "van": pytest.approx(1.0)}


def test_half_the_objects_found_is_cocos_101_point_value():
    """Two cars, one found exactly, nothing else: precision 1 up to recall 0.5, then nothing --
    COCO's 101-point interpolation gives 51/101."""
    gt = [truth((0, 0, 10, 10, 0)), truth((40, 40, 50, 50, 0))]
    result = metrics.coco_map(gt, [found((0, 0, 10, 10, 0.9, 0)), found()], CLASSES)
    assert result["map50"] == pytest.approx(51 / 101) and result["per_class_ap"]["van"] == -1.0


def test_a_box_at_iou_0_6_counts_at_0_5_but_not_above_0_6():
    """10x10 truth, detection shifted 2.5 px: IoU 75/125 = 0.6 -> matches at thresholds .50-.60 (3 of 10)."""
    gt = [truth((0, 0, 10, 10, 0))]
    result = metrics.coco_map(gt, [found((2.5, 0, 12.5, 10, 0.9, 0))], CLASSES)
    assert result["map50"] == pytest.approx(1.0) and result["map"] == pytest.approx(0.3)


def test_nothing_detected_is_ap_zero():
    assert metrics.coco_map([truth((0, 0, 10, 10, 0))], [found()], CLASSES)["map"] == 0.0


def test_spurious_lost_and_shadow_boxes_against_fp32():
    objects = truth((0, 0, 10, 10, 0), (30, 30, 40, 40, 0), shadows=[(10, 0, 20, 10)])
    reference = found((0, 0, 10, 10, 0.9, 0), (30, 30, 40, 40, 0.8, 0), (50, 50, 60, 60, 0.7, 1))
    engine = found(
        (0, 0, 10, 10, 0.9, 0),  # the first car, as fp32
        (11, 1, 19, 9, 0.6, 0),  # a box on the first car's shadow: spurious, on a shadow
        (50, 50, 60, 60, 0.5, 1),  # fp32's own false box: not new, not spurious
        (0, 50, 8, 58, 0.4, 1),
    )  # a new box on nothing: spurious
    row = metrics.image_changes(engine, reference, objects, 0.5)
    # the second car: fp32 found it, the engine did not -> lost
    assert row == {"spurious": 2, "lost": 1, "shadow": 1, "reference_boxes": 3, "matched_reference": 2, "engine_boxes": 4}
    total = metrics.summary([row, metrics.image_changes(found(), found(), truth(), 0.5)])
    assert (
        total["spurious_per_100"] == 100.0
        and total["shadow_per_100"] == 50.0
        and total["box_agreement"] == pytest.approx(2 / 3, abs=1e-4)
    )


def test_with_a_shadow_mask_a_box_is_on_a_shadow_when_half_its_pixels_are():
    mask = np.zeros((64, 64), bool)
    mask[10:20, 30:50] = True  # a shadow blob
    objects = {**truth((0, 0, 10, 10, 0)), "shadow_mask": mask}
    engine = found(
        (30, 10, 50, 20, 0.9, 0),  # exactly on the shadow
        (25, 10, 45, 20, 0.8, 1),  # 15 of 20 columns on it: 75%
        (40, 15, 60, 35, 0.7, 0),
    )  # 10 x 5 of 20 x 20 pixels: 12.5%, not on a shadow
    row = metrics.image_changes(engine, found(), objects, 0.5)
    assert row["spurious"] == 3 and row["shadow"] == 2


def test_a_duplicate_box_on_one_object_is_spurious():
    objects = truth((0, 0, 10, 10, 0))
    row = metrics.image_changes(
        found((0, 0, 10, 10, 0.9, 0), (0.5, 0, 10.5, 10, 0.8, 0)), found((0, 0, 10, 10, 0.9, 0)), objects, 0.5
    )
    assert row["spurious"] == 1 and row["lost"] == 0


def test_score_threshold_applies_to_both_sides():
    rows = metrics.changes([found((0, 0, 10, 10, 0.2, 0))], [found((0, 0, 10, 10, 0.9, 0))], [truth((0, 0, 10, 10, 0))], 0.3, 0.5)
    assert rows[0]["lost"] == 1 and rows[0]["spurious"] == 0


def test_decode_finds_the_peak_its_box_and_suppresses_neighbours():
    output = np.full((16, 16, 2 + 4), -10.0, np.float32)
    output[5, 7, 0] = 3.0  # a car centred in cell (x 7, y 5)
    output[5, 8, 0] = 2.0  # a weaker neighbour: not a 3x3 maximum
    output[5, 7, 2:] = [4.0, 2.0, 0.5, 0.25]  # 16 x 8 px, centre at (7.5, 5.25) cells
    [detections] = boxes.decode(output[None], 2, {"min_score": 0.05, "top_k": 10, "nms_iou": 0.5})
    assert len(detections) == 1 and detections.classes[0] == 0
    assert np.allclose(detections.boxes[0], [30 - 8, 21 - 4, 30 + 8, 21 + 4])
    assert detections.scores[0] == pytest.approx(1 / (1 + np.exp(-3.0)))


def test_non_finite_outputs_decode_without_crashing():
    output = np.full((1, 8, 8, 6), np.nan, np.float32)
    assert len(boxes.decode(output, 2, {"min_score": 0.05, "top_k": 10, "nms_iou": 0.5})[0]) == 0


def test_nms_keeps_the_best_of_overlapping_boxes_per_class_only():
    keep = boxes.class_nms(
        np.asarray([[0, 0, 10, 10], [1, 0, 11, 10], [1, 0, 11, 10.0]]), np.asarray([0.9, 0.8, 0.7]), np.asarray([0, 0, 1]), 0.5
    )
    assert list(keep) == [0, 2]


def test_map50_per_condition_scores_each_condition_on_its_own_images():
    """Four images, one car each; the engine misses the car of the one dusk image: dusk mAP@.5 0
    against fp32's 1, the other condition untouched."""
    from precisionflow.detection.evaluation import map50_by_condition

    gt = [truth((0, 0, 10, 10, 0)) for _ in range(4)]
    reference = [found((0, 0, 10, 10, 0.9, 0)) for _ in range(4)]
    engine = reference[:3] + [found((30, 30, 40, 40, 0.9, 0))]  # a spurious box instead of the car
    tags = [["clear"], ["clear"], [], ["dusk"]]
    per = map50_by_condition(gt, engine, reference, CLASSES, tags)
    assert per["dusk"] == {"map50": 0.0, "reference_map50": 1.0, "images": 1}
    assert per["clear"] == {"map50": 1.0, "reference_map50": 1.0, "images": 2}
    assert map50_by_condition(gt, engine, reference, CLASSES, None) == {}


def test_the_worst_images_are_kept_per_condition_for_its_gallery(tmp_path):
    import json

    from precisionflow.detection.evaluation import write_changes

    gt = [truth((0, 0, 10, 10, 0)) for _ in range(4)]
    reference = [found((0, 0, 10, 10, 0.9, 0)) for _ in range(4)]
    engine = [reference[0], found((0, 0, 10, 10, 0.9, 0), (30, 30, 40, 40, 0.8, 0)), reference[2], found()]
    rows = metrics.changes(engine, reference, gt, 0.5, 0.5)
    write_changes(tmp_path, rows, engine, reference, gt, 0.5, [["dusk"], ["dusk"], ["noon"], ["noon", "dusk"]])
    by_condition = json.loads((tmp_path / "worst_boxes_by_condition.json").read_text())
    assert [entry["test_index"] for entry in by_condition["dusk"]] == [1, 3]  # a spurious box; a lost one
    assert [entry["test_index"] for entry in by_condition["noon"]] == [3]  # image 2 did not change
    (tmp_path / "plain").mkdir()
    write_changes(tmp_path / "plain", rows, engine, reference, gt, 0.5)  # a data set without conditions
    assert not (tmp_path / "plain" / "worst_boxes_by_condition.json").exists()
