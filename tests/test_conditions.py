"""Conditions on data (datasets/conditions.py, shadow_cars' tags), judged per condition with a
multiplicity correction (reporting/budget.py, verdict_rules.py), and the calibration sample's
coverage of them (datasets/sampling.py, the planning warning)."""

import numpy as np
import pytest

from precisionflow.datasets import conditions, sampling
from precisionflow.datasets.store import Split, write_arrays
from precisionflow.errors import ConfigError
from precisionflow import stats


def sidecar(tmp_path, text):
    path = tmp_path / "conditions.csv"
    path.write_text(text)
    return path


KNOWN = ["cat/001.png", "cat/002.png", "dog/001.png"]


def test_sidecar_rows_become_sorted_tags(tmp_path):
    found = conditions.read_sidecar(sidecar(tmp_path, "file,conditions\ncat/001.png,dusk;camera_2\ndog/001.png,dusk\n"), KNOWN)
    assert found == {"cat/001.png": ["camera_2", "dusk"], "dog/001.png": ["dusk"]}
    assert conditions.counts([found.get(name, []) for name in KNOWN]) == {"camera_2": 1, "dusk": 2}


@pytest.mark.parametrize(
    "text, message",
    [
        ("file,conditions\ncat/01.png,dusk\n", r"conditions.csv:2: 'cat/01.png' is not an image .* Did you mean 'cat/001.png'"),
        ("file,conditions\ncat/001.png,\n", r"conditions.csv:2: expected tags like 'dusk;camera_2'"),
        ("file,conditions\ncat/001.png,du sk\n", r"conditions.csv:2: expected tags"),
        ("path,tags\ncat/001.png,dusk\n", r"conditions.csv:1: expected the header 'file,conditions'"),
    ],
)
def test_bad_sidecars_say_where_and_what(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        conditions.read_sidecar(sidecar(tmp_path, text), KNOWN)


def test_a_missing_sidecar_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="found no file at"):
        conditions.read_sidecar(tmp_path / "nope.csv", KNOWN)


def test_a_budget_naming_an_unknown_condition_gets_the_closest():
    with pytest.raises(ConfigError, match="no condition 'shadow_lng'.*Did you mean 'shadow_long'"):
        conditions.check_named(["shadow_lng"], {"shadow_long": 3, "cluttered": 2}, "evaluate.budget condition_limits")


def test_shadow_cars_tags_come_from_what_the_generator_drew():
    from precisionflow.detection import shadow_cars

    tags = [shadow_cars.scene_conditions(shadow_cars.sample_scene(0, index, 64)) for index in range(200)]
    found = conditions.counts(tags)
    for tag in ("shadow_dark", "small_vehicle", "cluttered", "low_contrast"):
        assert 10 <= found[tag] <= 150, (tag, found[tag])  # each a minority of scenes, none empty
    assert "shadow_long" not in found  # the default scenes' shadows reach at most one vehicle length
    longer = {"shadow_reach": [1.5, 1.8]}
    assert all(
        "shadow_long" in shadow_cars.scene_conditions(shadow_cars.sample_scene(0, i, 64, longer))
        for i in range(20)
        if shadow_cars.sample_scene(0, i, 64, longer)["vehicles"]
    )


def test_default_scene_settings_draw_the_scenes_drawn_before():
    from precisionflow.detection import shadow_cars

    assert shadow_cars.sample_scene(3, 7, 64) == shadow_cars.sample_scene(3, 7, 64, dict(shadow_cars.DEFAULT_SETTINGS))


# ---- judged per condition ---------------------------------------------------------------------


def evaluation(folder, right, labels):
    from precisionflow.reporting.compare import PER_SAMPLE_FILE

    folder.mkdir(parents=True)
    np.savez(folder / PER_SAMPLE_FILE, predictions=np.where(right, labels, 1 - labels), labels=labels)
    top1 = float(np.mean(right))
    return {"top1": top1, "test_images": len(labels), "flipped": int((~right).sum()), "agreement": 1.0, "per_class_top1": {}}


def test_a_loss_on_five_percent_of_images_fails_that_condition_while_the_average_passes(tmp_path):
    from precisionflow.reporting import budget, condition_context

    n = 2000
    labels = np.arange(n) % 2
    tags = [["shadow_long"] if i < 100 else (["dusk"] if i < 600 else []) for i in range(n)]
    reference_right = np.ones(n, bool)
    engine_right = reference_right.copy()
    engine_right[:30] = False  # 30 of the 100 long-shadow images lost: 1.5 points overall
    fp32 = evaluation(tmp_path / "evaluate_engine" / "fp32", reference_right, labels)
    engine = evaluation(tmp_path / "evaluate_engine" / "int8", engine_right, labels)
    limits = {key: None for key in budget.BUDGET_KEYS} | {
        "max_top1_drop": 3.0,
        "max_condition_drop": 10.0,
        "speedup_at": "bmax",
        "confidence": 0.95,
    }
    found = budget.judge(
        tmp_path, "evaluate_engine/int8", "evaluate_engine/fp32", engine, fp32, limits, {}, ["a", "b"], True, tags
    )
    verdicts = [entry["verdict"] for entry in found["checks"]]
    assert verdicts == [stats.PASS, stats.FAIL] and found["verdict"] == stats.FAIL
    assert (
        "condition 'shadow_long' top-1 drop +30.00" in found["checks"][1]["text"]
        and "Holm-corrected across 2 conditions" in found["checks"][1]["text"]
    )
    per = found["pairs"]["per_condition"]
    assert per["shadow_long"].n == 100 and per["dusk"].b == 0
    # the agreement with fp32 per condition, with its interval: 70 of 100 long-shadow images
    figures = condition_context.condition_figures(found["pairs"], tmp_path, tags, 0.95)["per_condition"]
    assert figures["shadow_long"]["agreement"] == 0.7 and figures["dusk"]["agreement"] == 1.0
    assert figures["shadow_long"]["agreement_low"] < 0.7 < figures["shadow_long"]["agreement_high"] < 0.8


def test_spurious_boxes_per_condition_fail_only_where_they_are():
    from precisionflow.reporting import verdict_rules

    values = {"shadow_long": [1.0, 2.0, 1.0, 0.0, 2.0, 1.0] * 10, "cluttered": [0.0] * 60}
    found = verdict_rules.group_mean_checks(values, 0.2, 0.95, "spurious boxes per image", "conditions")
    assert [entry["verdict"] for entry in found] == [stats.FAIL] and "'shadow_long'" in found[0]["text"]
    calm = verdict_rules.group_mean_checks({"cluttered": [0.0] * 60}, 0.2, 0.95, "spurious boxes per image", "conditions")
    assert calm[0]["verdict"] == stats.PASS


def test_lost_and_shadow_boxes_are_shown_per_condition_beside_the_spurious_ones(tmp_path):
    from precisionflow.reporting import condition_context

    rows = ["test_index,spurious,lost,shadow,reference_boxes,matched_reference,engine_boxes"]
    rows += [f"{i},{1 if i < 2 else 0},{2 if i % 2 else 0},{1 if i == 0 else 0},2,1,2" for i in range(4)]
    (tmp_path / "box_changes.csv").write_text("\n".join(rows) + "\n")
    tags = [["shadow_long"], ["shadow_long"], [], ["small_vehicle"]]
    figures = condition_context.condition_figures(None, tmp_path, tags, 0.95)["per_condition"]
    assert figures["shadow_long"]["spurious_per_image"] == 1.0 and figures["small_vehicle"]["spurious_per_image"] == 0.0
    assert figures["shadow_long"]["lost_per_image"] == 1.0 and figures["small_vehicle"]["lost_per_image"] == 2.0
    assert figures["shadow_long"]["shadow_per_image"] == 0.5 and figures["small_vehicle"]["shadow_per_image"] == 0.0


def test_the_worst_boxes_gallery_names_each_image_s_conditions(tmp_path):
    """The gallery's captions carry a second line with the image's tags: where the loss lives."""
    from PIL import Image

    from precisionflow.reporting import report_pages

    class Scenes:
        image_shape = (16, 16, 3)

        def __getitem__(self, index):
            return np.full((16, 16, 3), 0.5, np.float32)

    box = {"boxes": [[2, 2, 8, 8]]}
    worst = [
        {"test_index": i, "spurious": 1, "shadow": 1, "lost": 0, "truth": box, "reference": box, "engine": box} for i in (0, 2)
    ]
    tags = [["shadow_long"], [], ["small_vehicle", "cluttered"]]
    report_pages.boxes_grid(Scenes(), worst, ["car"], "int8", tmp_path / "tagged.png", tags=tags)
    report_pages.boxes_grid(Scenes(), worst, ["car"], "int8", tmp_path / "plain.png")
    tagged, plain = Image.open(tmp_path / "tagged.png"), Image.open(tmp_path / "plain.png")
    assert tagged.height == plain.height + 14  # one caption line more per row of pictures
    below = np.asarray(tagged.convert("L"))[24 + 48 + 15 : 24 + 48 + 26, 8 : 8 + 48]  # the first picture's tag line
    assert (below < 200).any()  # something is written there


def test_each_engine_gets_a_gallery_of_its_most_damaged_conditions_images(tmp_path):
    """Classification: the flipped samples of one condition's images alone; a condition without a
    loss gets none, and at most GALLERY_CONDITIONS per engine."""
    import json

    from PIL import Image

    from precisionflow.reporting import report_galleries

    figures = {tag: {"drop": drop} for tag, drop in {"a": 5.0, "b": 0.0, "c": 9.0, "d": 1.0, "e": 2.0}.items()}
    assert report_galleries.most_damaged(figures) == ["c", "a", "e"]
    data = tagged_node(tmp_path / "prepare_dataset" / "d")
    test_tags = [["dusk"] if i % 4 == 0 else ["noon"] for i in range(40)]
    conditions.save(data, "test", test_tags)
    engine = tmp_path / "evaluate_engine" / "e"
    engine.mkdir(parents=True)
    (engine / "node.json").write_text(json.dumps({"inputs": {"data": "prepare_dataset/d"}}))
    rows = ["test_index,label,fp32_prediction,fp32_confidence,engine_prediction,engine_confidence,right"]
    rows += [f"{i},{i % 4},{i % 4},0.9,{(i + 1) % 4},0.6,fp32" for i in (0, 4, 5)]  # two dusk images, one noon
    (engine / "flipped.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "out" / report_galleries.FIGURES).mkdir(parents=True)
    found = [{"node": "evaluate_engine/e", "per_condition": {"dusk": {"drop": 20.0}, "noon": {"drop": 0.0}}}]
    pictures = report_galleries.condition_galleries(found, [engine], tmp_path / "out", {})
    assert pictures == [f"{report_galleries.FIGURES}/condition-dusk-e.png"]
    grid = Image.open(tmp_path / "out" / pictures[0])
    import numpy as np

    pixels, top = np.asarray(grid.convert("L")), 8 + 12 * 4  # below the four header lines
    cells = [pixels[top : top + 72, 8 + k * 80 : 8 + k * 80 + 72] for k in range(3)]
    drawn = [cell.size and bool((cell < 250).any()) for cell in cells]
    assert drawn == [True, True, False]  # the two dusk images, not the noon one


# ---- calibration coverage ---------------------------------------------------------------------


def tagged_node(folder):
    labels = np.arange(400) % 4
    pixels = np.zeros((400, 4, 4, 1), np.uint8)
    write_arrays(
        folder, {"train": (pixels, labels), "val": (pixels[:40], labels[:40]), "test": (pixels[:40], labels[:40])}, list("abcd")
    )
    tags = [["dusk"] if i % 10 == 0 else [] for i in range(400)]  # 10% of the images
    conditions.save(folder, "train", tags)
    return folder


def test_the_calibration_sample_records_and_stratifies_its_conditions(tmp_path):
    split = Split(tagged_node(tmp_path / "data"), "train")
    drawn = sampling.sample_split(split, 100, "stratified", 0)
    assert drawn["per_condition"] == {"dusk": 10} and sum(drawn["per_class"].values()) == 100
    without = sampling.sample_split(split, 100, "stratified", 0, exclude=["dusk"])
    assert without["per_condition"] == {"dusk": 0} and without["eligible"] == 360


def test_planning_warns_about_a_condition_the_calibration_sample_lacks():
    from precisionflow.stages.calibrate import coverage_warning

    calibration = {"num_samples": 256, "min_per_class": 8, "exclude_conditions": ["shadow_long"]}
    text = coverage_warning({"shadow_long": 40, "cluttered": 60}, {"shadow_long": 300, "cluttered": 400}, calibration, 1000)
    assert "shadow_long (test 40, calibration about 0, excluded)" in text and "cluttered" not in text
    rare = coverage_warning({"dusk": 30}, {"dusk": 10}, dict(calibration, exclude_conditions=[]), 1000)
    assert "dusk (test 30, calibration about 2)" in rare
    assert coverage_warning({"dusk": 30}, {"dusk": 300}, dict(calibration, exclude_conditions=[]), 1000) is None


def test_a_condition_budget_on_a_data_set_without_conditions_is_refused(tmp_path):
    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan

    with pytest.raises(ConfigError, match="the data set has no conditions"):
        build_plan(expand(["evaluate.budget.max_condition_drop=5"]), str(tmp_path / "results"))


def test_a_typo_in_a_named_condition_fails_at_planning(tmp_path):
    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan

    points = expand(
        [
            "experiment=detection",
            "dataset.num_images=200",
            "calibration.num_samples=64",
            "+evaluate.budget.condition_limits={shadow_drk: 0.2}",
        ]
    )
    with pytest.raises(ConfigError, match="no condition 'shadow_drk'.*Did you mean 'shadow_dark'"):
        build_plan(points, str(tmp_path / "results"))


def test_a_relative_sidecar_is_found_beside_its_data_folder(tmp_path, monkeypatch):
    """dataset.conditions=conditions.csv with the CSV next to the data folder, run from elsewhere:
    the current folder first, then beside the data folder, then inside it; a miss names the rule."""
    data = tmp_path / "project" / "photos"
    data.mkdir(parents=True)
    beside = sidecar(tmp_path / "project", "file,conditions\ncat/001.png,dusk\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert conditions.sidecar_path("conditions.csv", str(data)) == beside.resolve()
    (elsewhere / "conditions.csv").write_text("file,conditions\n")
    assert conditions.sidecar_path("conditions.csv", str(data)) == (elsewhere / "conditions.csv").resolve()  # cwd first
    missing = conditions.sidecar_path("other.csv", str(data))
    with pytest.raises(ConfigError, match="current folder, then beside the data folder, then in it"):
        conditions.read_sidecar(missing, KNOWN)


def test_the_worst_condition_is_the_one_its_budget_would_fail_first():
    """The budget reads a condition's drop by its interval's upper end: a condition that flipped 12
    of 64 images both ways (estimate 0, interval about +-11 points) is nearer to failing than one
    that lost 1 of 120 (estimate 0.83, interval about 3 points), and is the one named worst."""
    from precisionflow.reporting import verdict_rules

    drops = {
        "normal": stats.drop_from_counts(both=100, b=1, c=0, neither=19, confidence=0.95),
        "noisy": stats.drop_from_counts(both=40, b=6, c=6, neither=12, confidence=0.95),
    }
    assert drops["normal"].drop > drops["noisy"].drop and drops["noisy"].high > drops["normal"].high
    assert verdict_rules.worst_group(drops) == ("noisy", 0.0)
    assert verdict_rules.worst_group({}) is None
