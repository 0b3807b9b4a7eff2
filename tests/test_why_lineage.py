"""`plan --why` compares like with like (issue 62, item 2): each node against the node holding the
same place in its lineage in the configuration its changed keys were changed from -- never
against another sweep's node or a QAT twin's export that happens to sit in results/."""

from precisionflow.config.compose import expand
from precisionflow.pipeline.plan import build_plan
from precisionflow.pipeline.why import baseline_overrides, explain


def why(tmp_path, overrides):
    results = str(tmp_path / "results")
    kept = baseline_overrides(overrides)
    plan = build_plan(expand(overrides), results, overrides)
    return explain(plan, build_plan(expand(kept), results, kept))


def reasons_of(lines, prefix):
    start = next(i for i, line in enumerate(lines) if line.startswith(prefix))
    following = []
    for line in lines[start + 1 :]:
        if not line.startswith(" "):
            break
        following.append(line.strip())
    return lines[start], following


def test_a_changed_key_is_explained_against_the_configurations_own_value(tmp_path):
    lines = why(tmp_path, ["calibration.num_samples=64"])
    head, reasons = reasons_of(lines, "calibrate/ptq-entropy-n64")
    assert "[vs ptq-entropy-n256-" in head and "num_samples: 256 -> 64" in reasons


def test_the_main_export_is_paired_with_the_main_export_not_the_twins(tmp_path):
    lines = why(tmp_path, ["train.epochs=4"])
    main_exports = [line for line in lines if line.startswith("export_onnx/resnet_mini-fp32-e4")]
    assert main_exports and all("[vs resnet_mini-fp32-e12-" in line for line in main_exports), main_exports


def test_only_the_keys_changed_leave_the_baseline():
    assert baseline_overrides(["experiment=shadow_shift", "calibration.num_samples=64", "precisions=[fp32,int8]"]) == [
        "experiment=shadow_shift"
    ]
