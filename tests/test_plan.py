from collections import Counter

from precisionflow.pipeline import plan as planning
from precisionflow.config.compose import expand


def _plan(overrides, multirun=False, versions=None):
    builder = planning.PlanBuilder(versions)
    measured = [node for point in expand(overrides, multirun) for node in builder.add_point(point)]
    return builder.nodes, [node for node in measured if node.stage == "evaluate_engine"]


def test_same_config_gives_same_ids():
    assert set(_plan(["train.epochs=3"])[0]) == set(_plan(["train.epochs=3"])[0])


def test_changing_an_evaluation_parameter_changes_only_evaluation_nodes():
    before, _ = _plan([])
    after, _ = _plan(["evaluate.duration_s=0.7"])
    changed = {key.split("/")[0] for key in set(after) - set(before)}
    assert changed == {"evaluate_engine", "benchmark_framework"}  # both time windows; ratios use their own rounds


def test_changing_a_training_parameter_keeps_the_data_node():
    before, _ = _plan([])
    after, _ = _plan(["train.learning_rate=0.01"])
    shared = {key.split("/")[0] for key in set(after) & set(before)}
    assert shared == {"prepare_dataset"}


def test_sweep_nodes_are_deduplicated():
    nodes, evals = _plan(["train.epochs=2,4", "precisions=[fp32,fp16]"], multirun=True)
    counts = Counter(key.split("/")[0] for key in nodes)
    assert counts == {
        "prepare_dataset": 1,
        "train_model": 2,
        "export_onnx": 2,
        "quantize_onnx": 4,
        "build_engine": 4,
        "evaluate_engine": 4,
        "compare_speed": 4,
        "serve_engine": 4,
        "benchmark_framework": 2,
    }
    assert len(evals) == 4


def test_calibration_is_shared_and_int8_mixed_reuses_the_int8_graph():
    nodes, _ = _plan(
        ["precisions=[fp32,int8,int8_mixed]", "int8.mixed_max_val_drop=null", "int8.mixed_keep_fp=1,3", "targets=[local]"],
        multirun=True,
    )
    counts = Counter(key.split("/")[0] for key in nodes)
    assert counts["calibrate"] == 1
    # fp32, int8, int8_mixed keep1, int8_mixed keep3 placed for this CPU's ONNX Runtime, and the three
    # int8 graphs again with TensorRT's placement (their simulation rows) -- all over one calibration
    assert counts["quantize_onnx"] == 7
    placements = Counter(n.params["int8"]["placement"] for k, n in nodes.items() if k.startswith("quantize_onnx/int8"))
    assert placements == {"onnxruntime_cpu": 3, "tensorrt": 3}
    mixed = [n for key, n in nodes.items() if key.startswith("quantize_onnx/int8_mixed")]
    assert all(n.inputs["int8"].startswith("quantize_onnx/int8-") for n in mixed)


def test_changing_mixed_count_does_not_requantize_int8():
    before, _ = _plan(["precisions=[fp32,int8,int8_mixed]", "int8.mixed_max_val_drop=null"])
    after, _ = _plan(["precisions=[fp32,int8,int8_mixed]", "int8.mixed_max_val_drop=null", "int8.mixed_keep_fp=3"])
    changed = {key for key in set(after) - set(before)}
    assert {key.split("/")[0] for key in changed} == {
        "quantize_onnx",
        "build_engine",
        "evaluate_engine",
        "compare_speed",
        "serve_engine",
    }
    assert all("int8_mixed" in key for key in changed)


def test_precision_sweep_trains_once():
    nodes, _ = _plan(["precisions=[fp32],[fp32,fp16]"], multirun=True)
    assert Counter(key.split("/")[0] for key in nodes)["train_model"] == 1


def test_code_version_change_renames_the_stage_and_its_downstream():
    versions = planning.code_hash_per_stage()
    before, _ = _plan([], versions=versions)
    after, _ = _plan([], versions=dict(versions, export_onnx="edited"))
    changed = {key.split("/")[0] for key in set(after) - set(before)}
    assert changed == {
        "export_onnx",
        "calibrate",
        "quantize_onnx",
        "build_engine",
        "evaluate_engine",
        "compare_speed",
        "serve_engine",
    }


def test_build_plan_has_one_report_and_one_tracking_node(tmp_path):
    points = expand(["train.epochs=2,4"], multirun=True)
    built = planning.build_plan(points, str(tmp_path))
    finals = [key.split("/")[0] for key in built["final"]]
    assert sorted(finals) == ["report", "track_mlflow"]
    report = built["nodes"][built["report"]]
    # 2 trainings x (fp32, fp16, int8, int8_qat, int8_qat's fp32 twin, and int8 and int8_qat with
    # TensorRT's placement simulated on this CPU) evaluations, 2 x 4 ratio jobs (the twin and the
    # simulations are judged, not timed) + 2 framework baselines + 2 x 4 serving jobs
    assert len(report["inputs"]) == 32


def test_plan_file_is_content_addressed(tmp_path):
    built = planning.build_plan(expand([]), str(tmp_path))
    assert planning.write_plan(built) == planning.write_plan(built)


def test_int8_qat_fine_tunes_from_the_trained_model_and_shares_the_fp32_reference():
    nodes, evals = _plan(["precisions=[fp32,int8_qat]"])
    [train] = [k for k in nodes if k.startswith("train_model/")]
    finetunes = {n.params["finetune"]["mode"]: n for k, n in nodes.items() if k.startswith("finetune_model/")}
    assert set(finetunes) == {"qat", "fp32"}  # the QAT fine-tune and its fp32 twin, both from the trained model
    finetune = finetunes["qat"]
    assert finetune.inputs["model"] == train and finetunes["fp32"].inputs["model"] == train
    calibrations = [n for k, n in nodes.items() if k.startswith("calibrate/")]
    assert [c.params["source"] for c in calibrations] == ["qat"]
    references = {ev.inputs["reference"] for ev in evals}
    assert len(references) == 1 and finetune.key not in references


def test_finetune_mode_qat_on_the_main_path_is_the_same_node_as_the_int8_qat_branch():
    nodes, _ = _plan(["precisions=[fp32,int8_qat]", "finetune=qat"])
    modes = sorted(n.params["finetune"]["mode"] for k, n in nodes.items() if k.startswith("finetune_model/"))
    assert modes == ["fp32", "qat"]  # one QAT fine-tune (main path and int8_qat branch), and int8_qat's fp32 twin


def test_finetune_settings_do_not_touch_plans_that_do_not_finetune():
    before, _ = _plan(["precisions=[fp32,fp16]"])
    after, _ = _plan(["precisions=[fp32,fp16]", "finetune.epochs=7"])
    assert set(before) == set(after)


def test_accuracy_batch_size_does_not_retime_the_framework():
    before, _ = _plan([])
    after, _ = _plan(["evaluate.batch_size=16"])
    assert {key.split("/")[0] for key in set(after) - set(before)} == {"evaluate_engine"}


def test_a_new_runtime_version_builds_new_engines_and_keeps_the_rest(monkeypatch):
    before, _ = _plan([])
    original = planning.PlanBuilder.runtime

    def upgraded(self, backend, target_def):
        found = original(self, backend, target_def)
        return dict(found, backend_version="99.0") if backend == "onnxruntime" else found

    monkeypatch.setattr(planning.PlanBuilder, "runtime", upgraded)
    after, _ = _plan([])
    assert {key.split("/")[0] for key in set(after) - set(before)} == {
        "build_engine",
        "evaluate_engine",
        "compare_speed",
        "serve_engine",
    }


def test_every_ratio_job_pairs_its_engine_with_the_fp32_engine_of_its_target():
    nodes, _ = _plan(["precisions=[fp16,fp32,int8]", "targets=[local,cpu]"])
    comparisons = [n for n in nodes.values() if n.stage == "compare_speed"]
    assert len(comparisons) == 6
    for node in comparisons:
        engine = nodes[node.inputs["engine"]]
        if "fp32_engine" in node.inputs:
            reference = nodes[node.inputs["fp32_engine"]]
            assert reference.id.startswith("fp32-") and reference.params["target"] == engine.params["target"]
        else:
            assert engine.id.startswith("fp32-")
        assert node.inputs["model"].startswith("train_model/")


def test_scheduler_resources_travel_with_the_node_but_not_in_its_id():
    before, _ = _plan(["targets=[h200]"])
    after, _ = _plan(["targets=[h200]", "target_defs.h200.resources.gpu_model=h200_141gb"])
    assert set(before) == set(after)
    [engine, twin] = [n for n in before.values() if n.stage == "build_engine" and n.id.startswith("fp32")]
    assert twin.resources == engine.resources  # int8_qat's fp32 twin is built where the engines are
    assert engine.resources == {"gpu": 1, "gpu_model": "h200"}


def test_real_gpu_targets_time_with_trtexec_windows():
    nodes, evals = _plan(["targets=[local,h200]"])
    windows = {ev.params["target"]: ev.params["evaluate"]["duration_s"] for ev in evals}
    assert windows == {"local": 0.5, "h200": 3.0}


def test_why_gives_each_reason_its_own_line_and_calls_only_missing_nodes_new(tmp_path):
    import json

    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan
    from precisionflow.pipeline.why import WIDTH, explain

    results = tmp_path / "results"
    first = build_plan(expand(["train.epochs=2"]), str(results))
    for key, spec in first["nodes"].items():  # every node of the first plan finished
        (results / key).mkdir(parents=True)
        (results / key / "node.json").write_text(json.dumps({**spec, "stage": spec["stage"]}))
    second = build_plan(expand(["train.epochs=3"]), str(results))
    lines = explain(second)
    train = next(i for i, line in enumerate(lines) if line.startswith("train_model/"))
    assert lines[train + 1] == "    train.epochs: 2 -> 3"
    assert all(len(line) <= WIDTH + 4 for line in lines)
    assert not any("prepare_dataset/" in line and "(new)" in line for line in lines)  # it exists: not new


def test_a_budget_finer_than_the_test_split_is_said_at_planning(tmp_path, capsys):
    """The budget's owner decides (reporting.budget.resolution_warning); the planner prints it once
    per precision, before anything runs. Digits' test split: 450 images, so 0.1 points cannot be
    resolved even with no image flipped, 5 points can."""
    from precisionflow.reporting.budget import resolution_warning

    planning.build_plan(expand(["evaluate.budget.max_top1_drop=0.1", "precisions=[fp32,int8]"]), str(tmp_path))
    printed = capsys.readouterr().err
    assert printed.count("max_top1_drop=0.1 for int8 is finer than 450 test images can resolve") == 1
    assert "for fp32 is finer" not in printed  # the reference is not judged against itself
    assert resolution_warning({"max_top1_drop": 5.0, "confidence": 0.95}, "int8", "classification", 360) is None
    assert resolution_warning({"max_top1_drop": 0.1}, "int8", "detection", 360) is None


def test_why_compares_like_with_like_and_prints_no_unchanged_budget(tmp_path):
    """`plan --why` once set an fp32 build against an int8 build, and printed 144 lines of
    `budgets.evaluate_engine/<id>.max_top1_drop: '<unset>' -> 2.0` that were not changes."""
    import json

    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan
    from precisionflow.pipeline.why import explain

    results = tmp_path / "results"
    first = build_plan(expand(["train.epochs=2", "precisions=[fp32,int8]"]), str(results))
    for key, spec in first["nodes"].items():
        (results / key).mkdir(parents=True)
        (results / key / "node.json").write_text(json.dumps(spec))
    lines = explain(build_plan(expand(["train.epochs=3", "precisions=[fp32,int8]"]), str(results)))
    assert not any("budgets.evaluate_engine/" in line for line in lines), [line for line in lines if "budgets." in line]
    for line in lines:
        if line.startswith(("build_engine/", "quantize_onnx/")) and "[vs " in line:
            planned, against = line.split("/", 1)[1].split("  [vs ")
            assert planned.rsplit("-", 1)[0] == against.rstrip("]").rsplit("-", 1)[0], line  # like with like


def _plan_on_a_machine(monkeypatch, overrides, gpu: bool, onnxruntime: str):
    """The plan a machine makes: with or without an NVIDIA GPU, with `onnxruntime` installed (or not)."""
    from precisionflow import devices, identity

    real = identity.installed_version
    monkeypatch.setattr(identity, "installed_version", lambda name: onnxruntime if name == "onnxruntime" else real(name))
    monkeypatch.setattr(devices, "has_nvidia_gpu", lambda: gpu)
    facts = {"device_name": "NVIDIA H200", "compute_capability": "9.0", "driver": "580", "gpu": "0"}
    monkeypatch.setattr(devices, "gpu_facts", lambda selector=None: facts if gpu else {})
    return _plan(overrides)[0]


def test_a_named_gpu_target_is_planned_the_same_on_a_login_node_without_gpu_or_onnx_runtime(monkeypatch):
    """h200 declared with its runtime (1.31.1, as experiment=h200 does); a100 declares none, so its engines take the version the
    building machine has (read there, recorded in engine.json). Neither the planner's GPU nor its
    ONNX Runtime enters an engine node's parameters; the graphs upstream (export, calibration, Q/DQ)
    run where the model is made and carry that machine's versions, as every node does."""
    for target, declared in (("h200", ["target_defs.h200.backend_version=1.31.1"]), ("a100", [])):
        overrides = [f"targets=[{target}]", "precisions=[fp32,fp16]", f"target_defs.{target}.framework=false", *declared]
        on_login_node = _plan_on_a_machine(monkeypatch, overrides, gpu=False, onnxruntime="1.32.0")
        on_gpu_node = _plan_on_a_machine(monkeypatch, overrides, gpu=True, onnxruntime="1.32.0")
        assert set(on_login_node) == set(on_gpu_node), target
        expected = "1.31.1" if target == "h200" else "read where built"
        engine_params = []
        for onnxruntime in ("not installed", "1.31.1", "9.9.9"):
            nodes = _plan_on_a_machine(monkeypatch, overrides, gpu=False, onnxruntime=onnxruntime)
            engines = {key.split("-")[0]: node.params for key, node in nodes.items() if key.startswith("build_engine/")}
            assert engines and all(params["runtime"]["backend_version"] == expected for params in engines.values())
            engine_params.append(engines)
        assert engine_params[0] == engine_params[1] == engine_params[2], target


def test_an_engine_read_where_built_is_built_with_any_version_and_a_declared_one_with_its_own():
    import pytest

    from precisionflow.backends import READ_WHERE_BUILT, check_runtime
    from precisionflow.errors import EngineMismatchError

    found = {"backend": "onnxruntime", "backend_version": "1.31.1"}
    check_runtime({"backend_version": READ_WHERE_BUILT}, found, "a100")
    check_runtime({"backend_version": "1.31.1"}, found, "h200")
    with pytest.raises(EngineMismatchError, match="planned with onnxruntime 1.32.0, this machine has 1.31.1"):
        check_runtime({"backend_version": "1.32.0"}, found, "h200")
