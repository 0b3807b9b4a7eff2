"""Node identity: each config key changes exactly the stages that read it.

The keys are generated from the composed default configuration (every leaf of the schema as
instantiated, target_defs included), each flipped to another valid value; the stages whose node
ids change are compared with EXPECTED, the test's data. A new config key fails the test until
someone writes down which stages read it.
"""

import copy

import pytest

from precisionflow import identity
from precisionflow.pipeline import flow, plan as planning
from precisionflow.config.compose import expand, validate

# The stages a change reaches, read from the stage table (pipeline/flow.py): a stage and every
# stage fed by it, of those the default plan has (prune_model reads train_model but is not planned).
# A new stage in the table joins these sets by its declared inputs, with no edit here.
DEFAULT_PLAN_STAGES = {"prepare_dataset", *(stage.name for stage in flow.STAGES if stage.name != "prune_model")}


def reached_from(stage: str) -> set:
    reached, frontier = {stage}, [stage]
    while frontier:
        source = frontier.pop()
        for row in flow.STAGES:
            feeds = any(source in sources for sources in row.inputs.values())
            if feeds and row.name not in reached and row.name in DEFAULT_PLAN_STAGES:
                reached.add(row.name)
                frontier.append(row.name)
    return reached


TRAINED = reached_from("train_model")
EVERYTHING = reached_from("prepare_dataset")
# the QAT fine-tune feeds int8_qat's chain, not the TensorFlow baseline (which times the main model)
QAT_BRANCH = reached_from("finetune_model") - {"benchmark_framework"}
GRAPHS = reached_from("quantize_onnx")
ENGINES = reached_from("build_engine")
# the sweep-wide stages (the report, MLflow) read every measurement: from the table, not a list here
AGGREGATES = set(flow.AGGREGATING)
SERVING = reached_from("serve_engine")
TIMED_WINDOWS = {"evaluate_engine", "benchmark_framework"} | AGGREGATES
ALL_TIMING = TIMED_WINDOWS | {"compare_speed"}
NOTHING = set()

# Flips that need a particular value to stay valid (the others: numbers change, booleans negate,
# strings and lists get another element).
FLIP_VALUES = {
    **{f"target_defs.{name}.cpu_dot_product": "avx512_vnni" for name in ("local", "cpu", "a100", "h100", "h200")},
    "dataset.name": None,  # a data set choice: see CONDITIONAL (image_folder needs a folder)
    "model.name": "small_cnn",
    "evaluate.serving.server_next_batch": "when_gpu_frees",
    "engine.backend": "tensorrt",
    "calibration.method": "minmax",
    "calibration.sampling": "random",
    "evaluate.serving.scenarios": ["SingleStream", "Server", "Offline"],
    "evaluate.serving.latency_bound_ms": 20.0,
    "evaluate.serving.percentile": 0.9,  # doubled, 0.99 would be refused (a fraction below 1)
    "evaluate.serving.search_duration_ms": 500,
    "target_defs.local.serving": {"min_duration_ms": 500},
    "calibration.split": "val",
    "int8.report_split": "train",
    "train.lr_schedule": "cosine",
    "train.optimizer": "sgd",
    "train.precision_policy": "mixed_bfloat16",
    "finetune.mode": "fp32",
    "engine.optimization_level": "extended",
    "precisions": ["fp32", "fp16", "int8"],
    "targets": ["local", "cpu"],
    "target_defs.local.device": "cpu",
    "calibration.tensorrt_version": "10.13.0",
    "tracking.uri": "http://127.0.0.1:5000",
    "dataset.max_samples": 700,
    "dataset.cache": "disk",
    "fp16.op_block_list": ["Softmax"],
    "int8.exclude_nodes": ["some_node"],
    "finetune.exclude_layers": ["conv0"],
    "results_dir": "/tmp/elsewhere",
    "dataset.channels": 1,
    "evaluate.budget.speedup_at": "b1",
    "evaluate.budget.min_qat_agreement": 0.99,
    "evaluate.budget.min_speedup": 1.5,
    "evaluate.budgets": {"fp16": {"min_speedup": 1.5}},
    "evaluate.confidence": 0.9,
    "stage_resources": {"train_model": {"slurm_partition": "gpu", "gpu": 1}},
    "engine.onnxruntime.cudnn_conv_algo_search": "HEURISTIC",
    "train.at_chance": "stop",
    "prune.criterion": "l2",
    "target_defs.local.backend_version": "9.9.9",
}

# Which stages' node ids change when the key flips, under the default configuration
# (resnet_mini on digits, precisions fp32/fp16/int8/int8_qat, target local, ONNX Runtime).
EXPECTED = {
    "dataset.name": None,
    "dataset.path": None,  # read only by image_folder: set for digits it is refused
    "dataset.image_size": NOTHING,
    "dataset.channels": NOTHING,
    "dataset.val_fraction": EVERYTHING,
    "dataset.test_fraction": EVERYTHING,
    "dataset.seed": EVERYTHING,
    "dataset.max_samples": EVERYTHING,
    "dataset.cache": TRAINED,  # how training reads (memory/disk) sets the order it sees samples in
    "task": None,
    "dataset.num_images": None,  # detection only: refused with digits (see CONDITIONAL)
    **{f"evaluate.detection.{key}": NOTHING for key in ("min_score", "top_k", "nms_iou", "score_threshold", "match_iou")},
    # the default model is resnet_mini: small_cnn's keys are not read (see CONDITIONAL for them)
    "model.name": TRAINED,
    "model.width": TRAINED,
    "model.filters": NOTHING,
    "model.dense_units": NOTHING,
    "model.dropout": NOTHING,
    "model.stages": TRAINED,
    "model.blocks_per_stage": TRAINED,
    "model.weights": NOTHING,
    "model.path": None,
    "model.trust": NOTHING,  # model.path: read only by keras_file (refused otherwise)
    "model.bn_momentum": TRAINED,
    **{
        f"train.{key}": TRAINED
        for key in (
            "keep_best_epoch",
            "epochs",
            "batch_size",
            "learning_rate",
            "lr_schedule",
            "optimizer",
            "seed",
            "early_stopping_patience",
            "precision_policy",
        )
    },
    # an fp32 fine-tune on the main path is the node int8_qat's twin already planned (same settings), so its
    # export is shared too: what changes is every graph, engine and measurement built from the main export
    "finetune.mode": TRAINED - {"train_model", "finetune_model", "export_onnx"},
    **{f"finetune.{key}": QAT_BRANCH for key in ("epochs", "batch_size", "learning_rate", "seed", "exclude_layers")},
    "export.opset": TRAINED - {"train_model", "finetune_model", "benchmark_framework"},
    "export.max_abs_diff": NOTHING,
    "export.rtol": NOTHING,  # thresholds: re-checked, never re-exported
    "precisions": AGGREGATES,  # int8_qat's nodes leave the plan; the others keep their ids
    "fp16.op_block_list": GRAPHS,
    "calibration.method": {"calibrate"} | GRAPHS,
    "calibration.percentile": NOTHING,
    "calibration.num_samples": {"calibrate"} | GRAPHS,
    "calibration.batch_size": {"calibrate"} | GRAPHS,
    "calibration.sampling": {"calibrate"} | GRAPHS,  # the calibration sample and the per-tensor report's
    "calibration.seed": {"calibrate"} | GRAPHS,
    "calibration.min_per_class": NOTHING,  # a planning warning's threshold
    "calibration.split": None,  # val has 179 images, fewer than the default 256 samples: see CONDITIONAL
    "calibration.tensorrt_version": {"track_mlflow"},
    "int8.exclude_nodes": GRAPHS,
    "int8.keep_output_layer": GRAPHS,
    "int8.mixed_keep_fp": NOTHING,
    "int8.simulate_tensorrt": AGGREGATES,  # the simulation rows leave the plan and its report
    "int8.report_samples": GRAPHS,
    "int8.report_split": GRAPHS,
    "int8.mixed_max_val_drop": NOTHING,
    "engine.backend": ENGINES,
    "engine.optimization_level": ENGINES,
    "engine.intra_op_threads": ENGINES | {"benchmark_framework"},
    **{
        f"engine.{key}": NOTHING
        for key in (
            "trt_builder_optimization_level",
            "trt_workspace_mb",
            "min_batch",
            "opt_batch",
            "max_batch",
            "min_spatial",
            "opt_spatial",
            "max_spatial",
            "sparse_weights",
            "trt_int8_fp16",
        )
    },
    "targets": AGGREGATES,  # the cpu target's nodes join; local's keep their ids
    # conditions: the default data (digits) has none, so these are refused at planning (see test_conditions.py)
    "dataset.conditions": None,
    **{f"dataset.scene.{key}": NOTHING for key in ("shadow_reach", "shadow_darkness", "vehicle_scale", "vehicle_colour")},
    "calibration.exclude_conditions": None,
    "evaluate.budget.max_condition_drop": None,
    "evaluate.budget.max_condition_spurious_per_image": None,
    "evaluate.budget.condition_limits": None,
    "evaluate.budget.min_server_speedup": AGGREGATES,
    # serving: the serve_engine jobs' own settings; switched off, they leave the plan (the report's inputs change)
    "evaluate.serving.enabled": AGGREGATES,
    **{
        f"evaluate.serving.{key}": SERVING
        for key in (
            "scenarios",
            "latency_bound_ms",
            "percentile",
            "min_duration_ms",
            "min_query_count",
            "max_batch",
            "max_wait_ms",
            "workers",
            "server_next_batch",
            "search_precision",
            "search_repeats",
            "search_duration_ms",
            "coalesce_queries",
            "seed",
        )
    },
    # the climb exists only with short probes (see CONDITIONAL): unset, it leaves every id alone
    "evaluate.serving.full_length_climb": NOTHING,
    "target_defs.local.serving": SERVING,
    "target_defs.cpu.serving": NOTHING,
    **{
        f"target_defs.{name}.serving.{key}": NOTHING
        for name in ("a100", "h100", "h200")
        for key in ("min_duration_ms", "search_duration_ms", "full_length_climb", "max_batch")
    },
    # A GPU's timing and serving defaults: read only where a target runs on a GPU (none on this
    # machine, held so: see gpu_free_planner; CONDITIONAL plans a `cuda` target for them)
    "on_gpu.timing": NOTHING,
    **{
        f"on_gpu.serving.{key}": NOTHING
        for key in ("max_batch", "min_duration_ms", "search_duration_ms", "full_length_climb", "search_repeats")
    },
    # The CPU's integer dot product, declared: the CPU-placed int8 graphs and all they feed.
    "target_defs.local.cpu_dot_product": GRAPHS,
    **{f"target_defs.{name}.cpu_dot_product": NOTHING for name in ("cpu", "a100", "h100", "h200")},
    "target_defs.local.device": ENGINES | {"benchmark_framework"},
    "target_defs.local.expect_device": ENGINES | {"benchmark_framework"},
    "target_defs.local.resources": NOTHING,
    "target_defs.local.timing": TIMED_WINDOWS,
    **{
        f"target_defs.{name}.{key}": NOTHING
        for name in ("cpu", "a100", "h100", "h200")
        for key in ("device", "expect_device", "resources", "timing", "backend_version", "framework")
    },
    # The engine backend's version there: every engine and measurement of the target; TensorFlow's stays.
    "target_defs.local.backend_version": ENGINES,
    # No TensorFlow timed there: its baseline leaves the plan, the ratios lose their TensorFlow side.
    "target_defs.local.framework": {"compare_speed"} | AGGREGATES,
    # CUDA provider settings: read only where an engine runs on a GPU (none here; see CONDITIONAL).
    **{
        f"engine.onnxruntime.{key}": NOTHING
        for key in ("prefer_nhwc", "cuda_graph", "cudnn_conv_algo_search", "use_tf32", "fuse_conv_bias")
    },
    "evaluate.batch_size": {"evaluate_engine"} | AGGREGATES,
    "evaluate.timing_batch_sizes": ALL_TIMING,
    "evaluate.warmup_s": ALL_TIMING,
    "evaluate.duration_s": TIMED_WINDOWS,
    "evaluate.min_iterations": TIMED_WINDOWS,
    "evaluate.repeats": TIMED_WINDOWS,
    "evaluate.streams": ALL_TIMING,
    "evaluate.stream_batch_size": ALL_TIMING,
    "evaluate.ratio_rounds": {"compare_speed"} | AGGREGATES,
    "evaluate.ratio_window_s": {"compare_speed"} | AGGREGATES,
    # budgets are thresholds: precisionflow check re-reads finished results, nothing reruns
    # budgets are thresholds: nothing measured reruns; the report (whose page starts with the
    # verdicts) is redrawn, and MLflow logs that page with the sweep
    **{
        f"evaluate.budget.{key}": AGGREGATES
        for key in (
            "max_top1_drop",
            "min_agreement",
            "max_class_drop",
            "min_qat_agreement",
            "min_speedup",
            "speedup_at",
            "max_map_drop",
            "max_spurious_per_image",
        )
    },
    "evaluate.budgets": AGGREGATES,
    # how sure a verdict must be: a threshold too (the report's verdicts change, nothing is measured again)
    "evaluate.confidence": AGGREGATES,
    "evaluate.accept_undecided": AGGREGATES,
    "tracking.enabled": NOTHING,  # the tracking node leaves the plan; no other node changes
    "tracking.uri": {"track_mlflow"},
    "tracking.experiment": {"track_mlflow"},
    "results_dir": NOTHING,
    "stage_resources": NOTHING,  # where jobs run (scheduler), never what they compute
    "train.at_chance": NOTHING,  # a threshold: the finished training is re-checked, never retrained
    "prune.method": None,  # needs a fine-tune to retrain: see CONDITIONAL
    **{
        f"prune.{key}": NOTHING
        for key in (
            "criterion",
            "ratio",
            "threshold",
            "granularity",
            "min_channels",
            "bn_scale",
            "exclude_layers",
            "epochs",
            "batch_size",
            "learning_rate",
            "seed",
        )
    },  # where jobs run (scheduler), never what they compute
}

# Keys that matter only when a component reads them: (base overrides, key, flipped value, expected).
CONDITIONAL = [
    (["model=resnet_mini"], "model.stages", 2, TRAINED),
    (["model=resnet_mini"], "model.blocks_per_stage", 2, TRAINED),
    (["model=resnet_mini"], "model.bn_momentum", 0.99, TRAINED),
    (["model=resnet_mini"], "model.filters", [8, 8], NOTHING),
    (["model=small_cnn"], "model.filters", [8, 8], TRAINED),
    (["model=small_cnn"], "model.dense_units", 32, TRAINED),
    (["model=small_cnn"], "model.dropout", 0.5, TRAINED),
    (["model=small_cnn"], "model.stages", 2, NOTHING),
    (["model=small_cnn"], "model.bn_momentum", 0.99, NOTHING),
    (["calibration=percentile"], "calibration.percentile", 99.9, {"calibrate"} | GRAPHS),
    (["calibration.num_samples=128"], "calibration.split", "val", {"calibrate"} | GRAPHS),
    (["engine=tensorrt"], "engine.trt_builder_optimization_level", 5, ENGINES),
    (["engine=tensorrt"], "engine.max_batch", 128, ENGINES),
    (["engine=tensorrt"], "engine.trt_int8_fp16", True, ENGINES),
    (["engine=tensorrt"], "engine.optimization_level", "basic", NOTHING),
    (["precisions=[fp32,int8,int8_mixed]", "int8.mixed_max_val_drop=null"], "int8.mixed_keep_fp", 2, GRAPHS),
    (["precisions=[fp32,int8,int8_mixed]"], "int8.mixed_keep_fp", 2, NOTHING),  # the search does not read it
    (["precisions=[fp32,int8,int8_mixed]"], "int8.mixed_max_val_drop", 0.5, GRAPHS),
    # int8_mixed's search decides by intervals: their confidence is part of its graph
    (["precisions=[fp32,int8,int8_mixed]"], "evaluate.confidence", 0.9, GRAPHS | AGGREGATES),
    (["finetune=qat"], "finetune.epochs", 5, TRAINED - {"train_model"}),
    (["evaluate.serving.search_duration_ms=200"], "evaluate.serving.full_length_climb", 2, SERVING),
    # On a GPU target the GPU's defaults and the CUDA provider settings are read (one rule: runs_on_gpu)
    (["target_defs.local.device=cuda"], "on_gpu.serving.max_batch", 64, SERVING),
    (["target_defs.local.device=cuda"], "on_gpu.timing", {"duration_s": 0.7}, ALL_TIMING),  # its batches and streams go
    (["target_defs.local.device=cuda"], "engine.onnxruntime.prefer_nhwc", False, ENGINES),
    # Pruning: the prune node and everything downstream of it; training is untouched.
    *[
        (["prune=channel", "finetune.mode=fp32"], f"prune.{key}", value, (TRAINED - {"train_model"}) | {"prune_model"})
        for key, value in (
            ("ratio", 0.25),
            ("criterion", "l2"),
            ("granularity", 4),
            ("min_channels", 4),
            ("bn_scale", True),
            ("exclude_layers", ["conv0"]),
            ("threshold", 0.1),
        )
    ],
    (["prune=channel", "finetune.mode=fp32"], "prune.epochs", 5, NOTHING),  # sparse24's: channel pruning does not read it
    (["prune=sparse24", "finetune.mode=fp32"], "prune.epochs", 5, (TRAINED - {"train_model"}) | {"prune_model"}),
    (["finetune.mode=fp32"], "prune.method", "channel", TRAINED - {"train_model"}),  # the prune node joins
    # Detection: the scenes' count changes the data node; decoding/matching settings only the evaluations.
    (["experiment=detection"], "dataset.num_images", 800, EVERYTHING),
    *[
        (["experiment=detection"], f"evaluate.detection.{key}", value, {"evaluate_engine"} | AGGREGATES)
        for key, value in (("score_threshold", 0.5), ("match_iou", 0.7), ("min_score", 0.05), ("top_k", 20), ("nms_iou", 0.6))
    ],
    *[
        (["targets=[h200]"], f"engine.onnxruntime.{key}", value, ENGINES)
        for key, value in (
            ("prefer_nhwc", False),  # the defaults are a GPU's best: each flipped off
            ("cuda_graph", False),
            ("cudnn_conv_algo_search", "HEURISTIC"),
            ("use_tf32", False),
            ("fuse_conv_bias", False),
        )
    ],
]


FREE_FORM = (".resources", ".timing", ".budgets", "stage_resources")  # Dict[str, Any] in the schema: one leaf each


def leaves(tree, prefix=""):
    if isinstance(tree, dict) and tree and not prefix.endswith(FREE_FORM):
        for key, value in tree.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix, tree


def flipped(key, value):
    if key in FLIP_VALUES:
        return FLIP_VALUES[key]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return round(value * 2, 6) if value else 0.5
    if isinstance(value, str):
        return value + "x" if value else "A100"
    if isinstance(value, list):
        return value + [value[-1] * 2] if value else [8]
    if isinstance(value, dict):
        if key.endswith(".timing"):
            return {"duration_s": 0.7}
        return {"min_duration_ms": 500} if key.endswith(".serving") else {"mem_mb": 1}
    return "/nonexistent/file"


def set_key(cfg, key, value):
    tree = cfg
    *parents, leaf = key.split(".")
    for part in parents:
        tree = tree[part]
    tree[leaf] = value


def plan_ids(points):
    built = planning.build_plan(points, "/tmp/precisionflow-identity-test")
    return set(built["nodes"])


def changed_stages(base, key, value):
    """Stages where a node was replaced by one with another id (nodes that only join or leave the
    plan, like a new target's engines, are not changes of identity)."""
    point = copy.deepcopy(base)
    set_key(point, key, value)
    validate(point)
    before, after = plan_ids([base]), plan_ids([point])
    stages = lambda keys: {node.split("/")[0] for node in keys}
    return stages(before - after) & stages(after - before)


@pytest.fixture(autouse=True)
def gpu_free_planner(monkeypatch):
    """`local` runs where it is planned: held to a machine without a GPU, whatever runs the test."""
    from precisionflow import devices

    monkeypatch.setattr(devices, "has_nvidia_gpu", lambda: False)


@pytest.fixture(scope="module")
def default_point():
    return expand([])[0]


def test_every_config_key_has_expected_stages(default_point):
    keys = {key for key, _ in leaves(default_point)}
    assert keys == set(EXPECTED), "write down which stages read the new key(s)"


@pytest.mark.parametrize("key", sorted(k for k, v in EXPECTED.items() if v is not None))
def test_flipping_a_key_changes_exactly_the_stages_that_read_it(default_point, key):
    value = dict(leaves(default_point))[key]
    assert changed_stages(default_point, key, flipped(key, value)) == EXPECTED[key]


@pytest.mark.parametrize("base, key, value, expected", CONDITIONAL, ids=[f"{c[0][0]}:{c[1]}" for c in CONDITIONAL])
def test_keys_of_a_selected_component(base, key, value, expected):
    assert changed_stages(expand(base)[0], key, value) == expected


def test_the_content_of_a_user_model_file_is_part_of_the_training_id(tmp_path):
    import zipfile

    model_file = tmp_path / "model.keras"

    def write(content: str):
        with zipfile.ZipFile(model_file, "w") as archive:
            archive.writestr("config.json", content)

    write('{"class_name": "Functional", "version": 1}')
    base = expand(["model=keras_file", f"model.path={model_file}"])[0]
    before = plan_ids([base])
    write('{"class_name": "Functional", "version": 2}')
    after = plan_ids([base])
    assert {node.split("/")[0] for node in before ^ after} == TRAINED


def test_a_package_version_changes_exactly_the_stages_that_call_it(default_point, monkeypatch):
    before = plan_ids([default_point])
    real = identity.installed_version
    monkeypatch.setattr(identity, "installed_version", lambda name: "9.9" if name == "tf2onnx" else real(name))
    after = plan_ids([default_point])
    assert {node.split("/")[0] for node in before ^ after} == TRAINED - {"train_model", "finetune_model", "benchmark_framework"}


def test_code_is_the_import_closure_of_the_stage():
    closure = identity.import_closure("precisionflow.stages.evaluate_engine")
    # imported at the top, lazily inside functions, and named in the backend registry's strings
    for needed in (
        "stages/evaluate_engine.py",
        "measure/speed.py",
        "measure/timing.py",
        "backends/onnxruntime_backend.py",
        "backends/tensorrt_backend.py",
        "backends/executed.py",
        "datasets/store.py",
        "pipeline/runner.py",
        "identity.py",
        "nodeio.py",
    ):
        assert needed in closure
    assert "pipeline/plan.py" not in closure and "stages/train_model.py" not in closure


def test_the_closure_covers_every_module_a_stage_really_loads(tmp_path):
    """Run a stage for real in a fresh interpreter and compare the package modules it loaded."""
    import json
    import subprocess
    import sys

    script = (
        "import sys, json, numpy as np\n"
        "from pathlib import Path\n"
        "from precisionflow.stages import quantize_onnx\n"
        "from tests.conftest import make_tiny_cnn\n"
        f"root = Path({str(tmp_path)!r}); (root / 'onnx').mkdir(); (root / 'out').mkdir()\n"
        "make_tiny_cnn(root / 'onnx' / 'model.onnx')\n"
        "quantize_onnx.run({'precision': 'fp16', 'fp16': {'op_block_list': []}}, {'onnx': root / 'onnx'}, root / 'out')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('precisionflow'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    closure = set(identity.source_hashes("quantize_onnx", None, "fp16"))  # the stage's closure and fp16's
    files = {str(identity.module_file(name).relative_to(identity.PACKAGE_DIR)) for name in loaded}
    assert files <= closure


def test_the_runner_refuses_a_node_planned_with_other_code(tmp_path):
    from precisionflow.pipeline import runner
    from precisionflow.errors import StageError

    built = planning.build_plan(expand(["precisions=[fp32]"]), str(tmp_path))
    key = next(k for k in built["nodes"] if k.startswith("prepare_dataset/"))
    built["nodes"][key]["identity"]["code"] = "0123456789ab"
    with pytest.raises(StageError, match="planned with code 0123456789ab"):
        runner.run_node(built, key)
    assert not (tmp_path / key).exists()


# Which stages' node ids change when one source file changes (the default plan: ONNX Runtime on this
# machine). A stage's id covers its import closure; engine stages cover only the backend they use.
SOURCE_EDITS = {
    "backends/tensorrt_backend.py": set(),  # no ONNX Runtime engine, TensorFlow baseline or training reruns
    "backends/onnxruntime_backend.py": {
        "build_engine",
        "evaluate_engine",
        "compare_speed",
        "serve_engine",
        "report",
        "track_mlflow",
    },
    "stages/report.py": AGGREGATES,  # MLflow logs the report it reads
    # the TensorFlow baseline's timing stage; the Keras runner it shares with compare_speed is a library module
    "stages/benchmark_framework.py": {"benchmark_framework"} | AGGREGATES,
    "measure/keras_runner.py": {"benchmark_framework", "compare_speed"} | AGGREGATES,
    "stages/compare_speed.py": {"compare_speed"} | AGGREGATES,
    "stages/prune_model.py": set(),  # the default experiment prunes nothing: no prune node
    "reporting/report_pages.py": AGGREGATES,
    # verdicts are drawn by the report; int8_mixed's search decides by the same intervals, but the
    # default plan has no int8_mixed node: its graphs (fp32, fp16, int8, int8_qat) never run stats.py
    "stats.py": {"build_engine", "evaluate_engine", "compare_speed", "serve_engine"} | AGGREGATES,
    # the configuration's schema: its values reach a node through its params (a new serving key
    # moves the serve nodes by their params, and no model is trained again for it)
    "schema.py": set(),
}


@pytest.mark.parametrize("edited", sorted(SOURCE_EDITS))
def test_editing_a_source_file_reruns_only_the_stages_that_run_it(default_point, edited, monkeypatch):
    from precisionflow import identity

    import functools

    before = plan_ids([default_point])
    real = identity._file_digest.__wrapped__
    edited_digest = functools.lru_cache(maxsize=None)(lambda relative: real(relative) + ("-edited" if relative == edited else ""))
    monkeypatch.setattr(identity, "_file_digest", edited_digest)
    after = plan_ids([default_point])
    changed = {key.split("/")[0] for key in before - after}
    assert changed == SOURCE_EDITS[edited]


def edited_copy(tmp_path, monkeypatch, relative: str, edit):
    """A copy of the package with one file edited by `edit(text) -> text`, made the package identity reads."""
    import shutil

    from precisionflow import identity

    copy = tmp_path / "precisionflow"
    shutil.copytree(identity.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    path = copy / relative
    path.write_text(edit(path.read_text()))
    monkeypatch.setattr(identity, "PACKAGE_DIR", copy)
    identity.clear_caches()


def prose_only(text: str) -> str:
    """A comment, a docstring and a blank line added, lines re-wrapped: no behaviour changed."""
    reworded = text.replace('"""', '"""Reworded. ', 1).replace("\nclass ", "\n# a new comment\n\n\nclass ", 1)
    return reworded.replace("\ndef ", "\n# another comment\n\n\ndef ", 1) + "\n# trailing comment\n"


@pytest.mark.parametrize("shared", ["nodeio.py", "pipeline/runner.py", "errors.py"])
def test_a_comment_or_docstring_edit_in_a_shared_module_reruns_nothing(default_point, shared, tmp_path, monkeypatch):
    from precisionflow import identity

    before = plan_ids([default_point])
    try:
        edited_copy(tmp_path, monkeypatch, shared, prose_only)
        assert plan_ids([default_point]) == before
        edited_copy(tmp_path / "code", monkeypatch, shared, lambda text: text + "\nEDITED = 1\n")
        assert plan_ids([default_point]) != before  # a change of code still reruns
    finally:
        monkeypatch.undo()
        identity.clear_caches()


def test_editing_the_report_template_reruns_the_report(default_point, tmp_path, monkeypatch):
    from precisionflow import identity

    before = plan_ids([default_point])
    try:
        edited_copy(tmp_path, monkeypatch, "reporting/templates/report.html.j2", lambda text: text + "<!-- edited -->\n")
        changed = {key.split("/")[0] for key in before - plan_ids([default_point])}
        assert changed == AGGREGATES
    finally:
        monkeypatch.undo()
        identity.clear_caches()


# ---- a node's id covers exactly the code it runs: one precision's edit, or a new precision file ----


def _ids_with(tmp_path, monkeypatch, overrides, edit=None, new_file=None):
    """Plan ids of `overrides` with the package copied, one file edited and/or one file added."""
    import shutil

    from precisionflow import identity

    copy = tmp_path / f"copy-{len(list(tmp_path.iterdir()))}" / "precisionflow"
    shutil.copytree(identity.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    if edit:
        relative, change = edit
        (copy / relative).write_text(change((copy / relative).read_text()))
    if new_file:
        relative, text = new_file
        (copy / relative).write_text(text)
    monkeypatch.setattr(identity, "PACKAGE_DIR", copy)
    identity.clear_caches()
    try:
        return plan_ids(expand(overrides))
    finally:
        monkeypatch.undo()
        identity.clear_caches()


def code_line(text: str) -> str:
    """One line of code (not a comment) under the imports."""
    return text.replace("\n\n", "\n\nCHANGED = 1\n", 1)


NEW_PRECISION = """from precisionflow.precisions.fp32 import copy_graph
from precisionflow.precisions.spec import GraphRecipe, PrecisionSpec

SPEC = PrecisionSpec(name="toy", summary="a copy of fp32", graph=GraphRecipe(make=copy_graph))
"""


@pytest.mark.parametrize("plan", [["precisions=[fp32,fp16]"], ["precisions=[fp32,fp16]", "model=small_cnn"]])
def test_another_precisions_edit_or_a_new_precision_file_changes_no_id(tmp_path, monkeypatch, plan):
    """Once: a code line in int8_qat.py changed 12 of 16 ids of an fp32+fp16 plan."""
    before = _ids_with(tmp_path, monkeypatch, plan)
    assert _ids_with(tmp_path, monkeypatch, plan, edit=("precisions/int8_qat.py", code_line)) == before
    assert _ids_with(tmp_path, monkeypatch, plan, new_file=("precisions/toy.py", NEW_PRECISION)) == before


def test_an_edit_of_fp16_changes_only_fp16s_nodes_and_their_dependants(tmp_path, monkeypatch):
    plan = ["precisions=[fp32,fp16]"]
    before = _ids_with(tmp_path, monkeypatch, plan)
    after = _ids_with(tmp_path, monkeypatch, plan, edit=("precisions/fp16.py", code_line))
    gone = before - after
    built = planning.build_plan(expand(plan), "/tmp/precisionflow-identity-test")["nodes"]
    fp16_and_after = {key for key in before if "fp16" in key} | {
        key for key in before if key.split("/")[0] in ("report", "track_mlflow")
    }
    assert gone and gone <= fp16_and_after, sorted(gone - fp16_and_after)
    assert not any("fp32" in key and key.split("/")[0] in ("quantize_onnx", "build_engine") for key in gone)
    assert all(key in built for key in before)
