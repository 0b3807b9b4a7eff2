"""Samples that represent their split (datasets/sampling.py, calibrate, quantize_onnx's report
sample) and the verdict rules (reporting/verdict_rules.py): speed judged with its interval,
per-class budgets with a multiplicity correction, class names from the data node."""

import re

import numpy as np
import pytest

from precisionflow.datasets import sampling
from precisionflow.datasets.store import Split, write_arrays
from precisionflow import stats
from precisionflow.stats import geometric_mean
from precisionflow.reporting import verdict_rules

PRE_SPLIT_COUNTS = {"ants": 300, "bees": 100, "cats": 100}  # listed class by class, the first the largest


def class_by_class_node(folder, counts=PRE_SPLIT_COUNTS):
    """A data node whose train split lists its images class by class (as a pre-split folder does)."""
    labels = np.concatenate([np.full(count, index) for index, count in enumerate(counts.values())])
    pixels = (labels[:, None, None, None] * 40 + np.zeros((1, 4, 4, 1))).astype(np.uint8)
    small = (pixels[:30], labels[:30])
    write_arrays(folder, {"train": (pixels, labels), "val": (pixels, labels), "test": small}, list(counts))
    return folder


def test_the_first_n_files_of_a_pre_split_folder_hold_one_class(tmp_path):
    split = Split(class_by_class_node(tmp_path / "data"), "train")
    drawn = sampling.sample_split(split, 256, "first", 0)
    assert drawn["per_class"] == {"ants": 256, "bees": 0, "cats": 0}  # what calibration used to see


@pytest.mark.parametrize("count", [256, 60, 7])
def test_a_stratified_sample_holds_every_class_in_the_splits_proportions(tmp_path, count):
    split = Split(class_by_class_node(tmp_path / "data"), "train")
    drawn = sampling.sample_split(split, count, "stratified", 0)
    total = sum(PRE_SPLIT_COUNTS.values())
    assert sum(drawn["per_class"].values()) == count
    for name, size in PRE_SPLIT_COUNTS.items():
        assert drawn["per_class"][name] >= 1
        assert abs(drawn["per_class"][name] - count * size / total) < 1.0 + 1e-9
    assert list(drawn["indices"]) == sorted(drawn["indices"])
    again = sampling.sample_split(split, count, "stratified", 0)
    other_seed = sampling.sample_split(split, count, "stratified", 1)
    assert (again["indices"] == drawn["indices"]).all() and not (other_seed["indices"] == drawn["indices"]).all()


def test_allocation_never_asks_a_class_for_more_than_it_has():
    assert sampling.allocation({"a": 2, "b": 1000}, 500) == {"a": 1, "b": 499}
    assert sampling.allocation({"a": 5, "b": 5, "c": 0}, 100) == {"a": 5, "b": 5, "c": 0}
    assert sampling.allocation({"a": 50, "b": 30, "c": 20}, 2) == {"a": 1, "b": 1, "c": 0}


def test_calibration_records_its_sample_per_class(tmp_path):
    from precisionflow.stages.calibrate import calibration_samples

    data = class_by_class_node(tmp_path / "data")
    params = {"split": "train", "num_samples": 256, "sampling": "stratified", "seed": 0}
    images, drawn = calibration_samples(data, params)
    assert images.shape == (256, 4, 4, 1) and drawn["per_class"] == {"ants": 154, "bees": 51, "cats": 51}
    # the images are those of the recorded classes (each class's pixels are its label * 40)
    assert sorted(np.unique(np.round(images * 255 / 40)).tolist()) == [0, 1, 2]


def test_int8_mixeds_ranking_sample_is_drawn_like_calibrations(tmp_path):
    from precisionflow.precisions.static_int8 import report_sample

    split = Split(class_by_class_node(tmp_path / "data"), "val")
    images, drawn = report_sample(split, {"report_samples": 128, "sampling": {"rule": "stratified", "seed": 0}})
    assert len(images) == 128 and min(drawn["per_class"].values()) >= 25


def test_planning_names_the_classes_a_calibration_sample_would_barely_see():
    from precisionflow.stages.calibrate import thin_class_warning

    counts = {"ants": 300, "bees": 100, "cats": 4}
    calibration = {"num_samples": 256, "sampling": "stratified", "min_per_class": 8, "split": "train"}
    warning = thin_class_warning(counts, calibration)
    assert re.search(r"cats \([23]\)", warning) and "bees" not in warning
    first = thin_class_warning(counts, dict(calibration, sampling="first"))
    assert "bees (0)" in first and "cats (0)" in first
    assert thin_class_warning({"a": 100, "b": 100}, calibration) is None


# ---- speed ------------------------------------------------------------------------------------


def ratio(rounds):
    return {"geomean": geometric_mean(rounds), "rounds": list(rounds)}


def test_speed_is_judged_by_the_interval_of_its_rounds():
    clear_win = ratio([2.02, 1.98, 2.05, 1.97, 2.01, 2.0])
    clear_loss = ratio([0.71, 0.69, 0.70, 0.72, 0.68, 0.70])
    overlapping = ratio([1.6, 0.9, 1.4, 0.8, 1.7, 1.1])
    assert verdict_rules.speed_check(clear_win, 1.5, "bmax", 0.95, True)["verdict"] == stats.PASS
    assert verdict_rules.speed_check(clear_loss, 1.0, "bmax", 0.95, True)["verdict"] == stats.FAIL
    undecided = verdict_rules.speed_check(overlapping, 1.0, "bmax", 0.95, True)
    assert undecided["verdict"] == stats.UNDECIDED and "rounds cannot tell" in undecided["text"]
    low, high = verdict_rules.speed_interval(clear_win["rounds"], 0.95)
    assert low < 2.0 < high and high - low < 0.1


def test_an_untimed_row_gets_no_speed_verdict_and_a_missing_ratio_is_not_a_failure():
    assert verdict_rules.speed_check(None, 1.0, "bmax", 0.95, timed=False) is None
    assert verdict_rules.speed_check(None, 1.0, "bmax", 0.95, timed=True)["verdict"] == stats.UNDECIDED


def test_a_simulation_row_with_min_speedup_is_judged_on_accuracy_alone():
    from precisionflow.reporting import budget

    metrics = {"top1": 0.9, "agreement": 1.0, "flipped": 0, "test_images": 100}
    limits = {key: None for key in budget.BUDGET_KEYS} | {"min_speedup": 1.0, "speedup_at": "bmax", "confidence": 0.95}
    untimed = budget.checks(metrics, metrics, limits, {}, None, timed=False)
    assert [entry["verdict"] for entry in untimed] == [verdict_rules.NOT_APPLIED]  # named, not dropped
    assert verdict_rules.overall(untimed) == verdict_rules.NO_BUDGET  # and never a PASS
    timed = budget.checks(metrics, metrics, limits, {}, None, timed=True)
    assert [entry["verdict"] for entry in timed] == [stats.UNDECIDED]


def speed(name, rounds):
    low, high = verdict_rules.speed_interval(rounds, 0.95)
    return {"name": name, "geomean": geometric_mean(rounds), "low": low, "high": high}


def test_a_fastest_engine_is_named_only_beyond_the_intervals():
    same_kernels = [
        speed("int8 a", [1.64, 1.3, 1.9, 1.5, 1.7, 1.4]),
        speed("int8 b", [1.47, 1.6, 1.3, 1.8, 1.5, 1.4]),
        speed("int8 c", [2.04, 1.4, 1.8, 1.6, 1.5, 1.9]),
    ]
    tie = verdict_rules.fastest(same_kernels)
    assert "winner" not in tie and {c["name"] for c in tie["tied"]} == {"int8 a", "int8 b", "int8 c"}
    clear = verdict_rules.fastest([speed("int8", [3.0, 3.1, 2.9, 3.05]), speed("fp16", [1.2, 1.25, 1.15, 1.2])])
    assert clear["winner"]["name"] == "int8"


def test_the_headline_names_a_tie_instead_of_the_luckiest_engine():
    from precisionflow.stages.report import trade_offs

    def entry(precision, rounds):
        low, high = verdict_rules.speed_interval(rounds, 0.95)
        return {
            "target": "local",
            "verdict": "PASS",
            "precision": precision,
            "ran": "int8",
            "speed": {"geomean": round(geometric_mean(rounds), 2), "low": round(low, 2), "high": round(high, 2)},
            "speedup_at": "bmax",
            "accuracy_name": "top-1",
            "drop_points": 0.1,
        }

    tied = trade_offs([entry("int8", [1.64, 1.3, 1.9, 1.5]), entry("int8_mixed", [2.04, 1.4, 1.8, 1.6])])
    assert "no single fastest engine" in tied[0] and "int8_mixed" in tied[0] and "int8 (int8)" in tied[0]
    fp16_on_fp32_kernels = dict(entry("fp16", [1.23, 1.2, 1.25, 1.24]), ran_reference_kernels=True)
    clear = trade_offs([entry("int8", [3.0, 3.1, 2.9, 3.05]), fp16_on_fp32_kernels])
    assert clear[0].startswith("local: fastest within budget: int8 (int8), 3.01x") and "fp16" not in clear[0]


# ---- per class --------------------------------------------------------------------------------


def test_holm_on_constructed_p_values():
    # Holm: sorted p (0.01, 0.02, 0.03, 0.04) times (4, 3, 2, 1), kept monotone
    assert verdict_rules.holm([0.04, 0.01, 0.03, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert verdict_rules.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def drops_of(per_class_counts):
    """{class: PairedDrop} from (both, b, c, neither) per class."""
    return {name: stats.drop_from_counts(*counts, confidence=0.95) for name, counts in per_class_counts.items()}


def test_one_marginal_class_among_ten_does_not_fail_after_the_correction():
    # nine clean classes and one whose drop clears a 20-point budget alone (one-sided p 0.016 < 0.025) but not after Holm
    counts = {f"c{i}": (50, 0, 0, 0) for i in range(9)} | {"c9": (30, 18, 0, 2)}
    found = verdict_rules.group_drop_checks(drops_of(counts), 20.0, 0.95, "class", "classes")
    assert found[0]["verdict"] == stats.UNDECIDED and "not after the Holm-corrected across 10 classes" in found[0]["text"]
    clear = counts | {"c9": (10, 40, 0, 0)}
    failed = verdict_rules.group_drop_checks(drops_of(clear), 20.0, 0.95, "class", "classes")
    assert [entry["verdict"] for entry in failed] == [stats.FAIL] and "class 'c9'" in failed[0]["text"]


def test_per_class_drops_use_the_data_nodes_class_names_not_the_metrics_key_order(tmp_path):
    from precisionflow.reporting import budget
    from precisionflow.reporting.compare import PER_SAMPLE_FILE

    # label 0 is "zebra", label 1 is "apple": a metrics file sorting its keys would swap them
    labels = np.array([0] * 40 + [1] * 40)
    reference_right = np.ones(80, bool)
    engine_right = np.ones(80, bool)
    engine_right[:20] = False  # the engine loses half of "zebra"
    for name, right in (("fp32", reference_right), ("int8", engine_right)):
        folder = tmp_path / name
        folder.mkdir()
        predictions = np.where(right, labels, 1 - labels)
        np.savez(folder / PER_SAMPLE_FILE, predictions=predictions, labels=labels)
    pairs = budget.paired_drops(tmp_path / "int8", tmp_path / "fp32", 0.95, ["zebra", "apple"])
    assert pairs["per_class"]["zebra"].b == 20 and pairs["per_class"]["apple"].b == 0
    assert budget.worst_class({}, {}, pairs) == ("zebra", 50.0)


def test_planning_warns_when_int8_mixeds_search_split_cannot_resolve_its_budget():
    from precisionflow.precisions.int8_mixed import search_warning

    params = {"int8": {"mixed_max_val_drop": 2.0, "confidence": 0.95, "report_split": "val"}}
    assert "its 144 images cannot resolve" in search_warning(params, lambda: {"val": 144})
    assert search_warning(params, lambda: {"val": 5000}) is None


def test_four_images_with_no_spurious_box_do_not_pass_a_tight_budget():
    """A bootstrap of four zeros is [0, 0]; the exact Poisson bound on a total of 0 over 4 images is 0.92."""
    found = verdict_rules.mean_check([0, 0, 0, 0], 0.0, 0.05, 0.95, "spurious boxes per image")
    assert found["verdict"] == stats.UNDECIDED and "[0.000, 0.922]" in found["text"]
    small = verdict_rules.group_mean_checks({"dusk": [0, 0, 0, 0], "day": [0] * 400}, 0.05, 0.95, "spurious", "conditions")
    assert [entry["verdict"] for entry in small] == [stats.UNDECIDED] and "'dusk'" in small[0]["text"]


def test_no_interval_is_never_a_pass():
    missing = verdict_rules.mean_check([], 0.0, 0.1, 0.95, "spurious boxes per image")
    assert missing["verdict"] == stats.UNDECIDED and "no per-image series" in missing["text"]
    one_round = verdict_rules.speed_check({"geomean": 3.0, "rounds": [3.0]}, 1.2, "bmax", 0.95, True)
    assert one_round["verdict"] == stats.UNDECIDED and "fewer than the 2 an interval needs" in one_round["text"]
    assert verdict_rules.overall([]) == verdict_rules.NO_BUDGET != stats.PASS
