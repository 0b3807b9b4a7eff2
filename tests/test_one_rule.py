"""One rule, one place (issue 59) and a GPU's settings by default (issue 60), on constructed inputs:
whether a target runs on a GPU is decided by devices.runs_on_gpu alone, and what follows
from it (engine settings, serving bound, batches and run lengths, GPU slots) follows everywhere."""

import json

import pytest

from precisionflow import precisions
from precisionflow import devices
from precisionflow.config.compose import expand
from precisionflow.errors import ConfigError
from precisionflow.pipeline import gpuslots, plan as planning
from precisionflow.pipeline.flow import gpu_stages
from precisionflow.precisions.spec import GraphRecipe, PrecisionSpec


@pytest.fixture
def gpu_host(monkeypatch):
    """This machine, as planning sees it, has an H200."""
    facts = {"device_name": "NVIDIA H200", "compute_capability": "9.0", "driver": "580.1", "gpu": "0"}
    monkeypatch.setattr(devices, "gpu_facts", lambda selector=None: dict(facts))
    monkeypatch.setattr(devices, "has_nvidia_gpu", lambda: True)


@pytest.fixture
def cpu_host(monkeypatch):
    monkeypatch.setattr(devices, "has_nvidia_gpu", lambda: False)
    monkeypatch.setattr(devices, "gpu_facts", lambda selector=None: {"device_name": devices.UNKNOWN_GPU, "gpu": "none"})


def planned(overrides):
    builder = planning.PlanBuilder()
    for point in expand(overrides):
        builder.add_point(point)
    return builder.nodes


def params_of(nodes, stage, precision="fp16"):
    found = [node.params for key, node in nodes.items() if key.startswith(f"{stage}/{precision}-")]
    assert found, sorted(nodes)
    return found[0]


@pytest.mark.parametrize(
    "device, gpu_here, expected", [("cuda", False, True), ("cpu", True, False), ("auto", True, True), ("auto", False, False)]
)
def test_runs_on_gpu_is_the_one_rule(monkeypatch, device, gpu_here, expected):
    monkeypatch.setattr(devices, "has_nvidia_gpu", lambda: gpu_here)
    assert devices.runs_on_gpu({"device": device}) is expected


def test_the_default_target_on_a_gpu_machine_takes_the_gpus_engine_and_serving_settings(gpu_host):
    nodes = planned(["precisions=[fp32,fp16]"])
    engine = params_of(nodes, "build_engine")["engine"]
    assert engine["cuda"]["prefer_nhwc"] and engine["cuda"]["cuda_graph"] and engine["cuda"]["fuse_conv_bias"]
    serve = params_of(nodes, "serve_engine")
    assert serve["settings_for"] == "gpu"
    assert serve["serving"]["latency_bound_ms"] == 15.0 and serve["serving"]["max_batch"] == 128
    assert serve["serving"]["min_duration_ms"] >= 20000 and serve["serving"]["search_repeats"] >= 3
    assert 128 in params_of(nodes, "evaluate_engine")["evaluate"]["timing_batch_sizes"]


def test_the_default_target_on_a_cpu_machine_keeps_the_cpus_settings(cpu_host):
    nodes = planned(["precisions=[fp32,fp16]"])
    assert "cuda" not in params_of(nodes, "build_engine")["engine"]
    serve = params_of(nodes, "serve_engine")
    assert serve["settings_for"] == "cpu" and serve["serving"]["latency_bound_ms"] == 33.0
    assert serve["serving"]["max_batch"] == 8 and 128 not in params_of(nodes, "evaluate_engine")["evaluate"]["timing_batch_sizes"]


def test_a_gpu_targets_plan_is_the_same_with_or_without_a_gpu_where_it_is_planned(monkeypatch):
    overrides = ["precisions=[fp32,fp16]", "targets=[h200]", "target_defs.h200.framework=false"]
    monkeypatch.setattr(devices, "has_nvidia_gpu", lambda: False)
    monkeypatch.setattr(devices, "gpu_facts", lambda selector=None: {"device_name": devices.UNKNOWN_GPU, "gpu": "none"})
    on_login_node = sorted(planned(overrides))
    monkeypatch.setattr(devices, "has_nvidia_gpu", lambda: True)
    monkeypatch.setattr(devices, "gpu_facts", lambda selector=None: {"device_name": "NVIDIA H200", "gpu": "0"})
    on_gpu_node = sorted(planned(overrides))
    assert on_login_node == on_gpu_node


def test_a_named_gpu_target_serves_with_the_gpu_defaults_under_its_own_settings(cpu_host):
    """on_gpu.serving, then the target's own: h200 sets its 60-s runs and no search count, so it takes
    the GPU defaults' searches (docs/hardware.md counts its serving cost from them), not
    evaluate.serving's."""
    overrides = ["precisions=[fp32,fp16]", "targets=[h200]", "target_defs.h200.framework=false"]
    cfg = expand(overrides)[0]
    gpu_searches, cpu_searches = (cfg[where]["serving"]["search_repeats"] for where in ("on_gpu", "evaluate"))
    assert gpu_searches != cpu_searches  # else the test could not tell which layer the target took
    nodes = planned(overrides)
    for precision in ("fp32", "fp16"):
        serving = params_of(nodes, "serve_engine", precision)["serving"]
        assert serving["min_duration_ms"] == 60000 and serving["search_repeats"] == gpu_searches
    mine = planned(["precisions=[fp32]", "targets=[h200]", "target_defs.h200.framework=false",
                    "+target_defs.h200.serving.search_repeats=2"])  # fmt: skip
    assert params_of(mine, "serve_engine", "fp32")["serving"]["search_repeats"] == 2


@pytest.mark.parametrize(
    "override, where",
    [
        ("+target_defs.local.serving={latency_bond_ms: 5}", "target_defs.local.serving.latency_bond_ms"),
        ("+target_defs.local.timing={duraton_s: 5}", "target_defs.local.timing.duraton_s"),
    ],
)
def test_a_targets_override_keys_are_checked_with_the_closest_name(override, where):
    with pytest.raises(ConfigError) as refused:
        expand([override])
    assert where in str(refused.value) and "Did you mean" in str(refused.value)


def test_gpu_slots_and_shipping_read_the_stage_table():
    assert set(gpu_stages()) == {"build_engine", "evaluate_engine", "compare_speed", "serve_engine"}
    cuda, cpu = {"target_def": {"device": "cuda"}}, {"target_def": {"device": "cpu"}}
    nodes = planned(["precisions=[fp32,fp16]", "targets=[h200]", "target_defs.h200.framework=false"])
    flags = {node.stage: node.to_json()["runs_engine"] for node in nodes.values()}
    assert {stage for stage, flag in flags.items() if flag} == set(gpu_stages())
    assert gpuslots.needs_slot({"stage": "serve_engine", "runs_engine": True, "params": cuda}, environ={})
    assert not gpuslots.needs_slot({"stage": "serve_engine", "runs_engine": True, "params": cpu}, environ={})
    assert not gpuslots.needs_slot({"stage": "train_model", "runs_engine": False, "params": {}}, environ={})


def test_a_plug_in_building_on_int8_gets_int8s_graph_for_its_placement(cpu_host, monkeypatch):
    base = precisions.get("int8")
    recipe = GraphRecipe(make=base.graph.make, builds_on="int8")
    toy = PrecisionSpec(name="int8_toy", summary="int8's graph, again", graph=recipe)
    monkeypatch.setitem(precisions.REGISTRY, "int8", base)
    registered = precisions.register(toy)
    try:
        assert registered.graph.per_placement  # inherited from int8, which has a graph per placement
        nodes = planned(["precisions=[fp32,int8,int8_toy]", "int8.simulate_tensorrt=false"])
        toy_graphs = [node for key, node in nodes.items() if key.startswith("quantize_onnx/int8_toy")]
        assert toy_graphs and all(node.inputs["int8"].split("/")[1].startswith("int8-ortcpu") for node in toy_graphs), [
            node.inputs for node in toy_graphs
        ]
    finally:
        precisions.REGISTRY.pop("int8_toy", None)


def test_the_version_recorded_is_that_of_the_module_imported(tmp_path, monkeypatch):
    """A GPU image: a CPU build ('pfprobe' 1.30) in site-packages, the GPU build ('pfprobe-gpu'
    1.31) first on the path. The first distribution found by name is the CPU one; the import is the GPU one."""
    from precisionflow import identity

    for folder, dist, version in (("bundle", "pfprobe_gpu", "1.31.1"), ("site", "pfprobe", "1.30.0")):
        root = tmp_path / folder
        (root / "pfprobe").mkdir(parents=True)
        (root / "pfprobe" / "__init__.py").write_text("")
        info = root / f"{dist}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.syspath_prepend(str(tmp_path / "bundle"))
    monkeypatch.setitem(identity.ALTERNATIVES, "pfprobe", ("pfprobe", "pfprobe-gpu"))
    assert identity.installed_version("pfprobe") == "1.31.1"


def test_plan_json_of_a_gpu_default_is_plain_data(gpu_host):
    serve = params_of(planned(["precisions=[fp32,fp16]"]), "serve_engine")
    assert json.loads(json.dumps(serve)) == serve


def graph_ids(nodes, precision="int8"):
    return sorted(key for key in nodes if key.startswith(f"quantize_onnx/{precision}-ortcpu"))


def test_a_cpu_targets_int8_graph_is_the_same_wherever_the_plan_is_made(cpu_host, monkeypatch):
    """The CPU's integer dot product is the target's fact: declared (in the graph's id), else read
    where the graph is made (recorded there) -- never the planning machine's flags."""
    from precisionflow import cpu_features

    overrides = ["precisions=[fp32,int8]", "targets=[cpu]"]
    ids = []
    for here in ("avx512_vnni", None):  # two planning machines, one with VNNI and one without
        monkeypatch.setattr(cpu_features, "integer_dot_product", lambda here=here: here)
        ids.append(graph_ids(planned(overrides)))
    assert ids[0] == ids[1] and len(ids[0]) == 1
    assert params_of(planned(overrides), "quantize_onnx", "int8")["cpu_dot_product"] == cpu_features.READ_WHERE_MADE
    # Declared: in the id, and two CPU targets that declare different CPUs get a graph each.
    declared = planned(overrides[:1] + ["targets=[local,cpu]", "target_defs.cpu.cpu_dot_product=avx512_vnni"])
    assert len(graph_ids(declared)) == 2 and any(key.startswith("quantize_onnx/int8-ortcpu-avx512_vnni") for key in declared)


@pytest.mark.parametrize(
    "override, message",
    [
        ("target_defs.a100.device=auto", "target_defs.a100.device: auto would take the device of whichever machine"),
        ("target_defs.cpu.cpu_dot_product=vnni", "target_defs.cpu.cpu_dot_product: expected one of avx512_vnni"),
    ],
)
def test_a_named_target_declares_its_device_and_cpu(override, message):
    target = override.split(".")[1].split("=")[0]
    with pytest.raises(ConfigError, match=message):
        expand([override, f"targets=[{target}]"])


def test_an_8_bit_cpu_graph_is_refused_on_a_cpu_that_would_saturate_it(monkeypatch):
    """A graph read-where-made on a VNNI machine, landed on one without (a results folder moved, a
    cluster of mixed CPUs): refused with what to do, never measured as if it were the target's."""
    from precisionflow import cpu_features
    from precisionflow.errors import EngineMismatchError
    from precisionflow.stages.build_engine import check_weight_bits

    graph = {"cpu_weight_bits": 8, "cpu_dot_product": "avx512_vnni", "cpu_dot_product_from": "this machine"}
    params = {"target": "cpu", "target_def": {"device": "cpu"}}
    monkeypatch.setattr(cpu_features, "integer_dot_product", lambda: None)
    with pytest.raises(EngineMismatchError, match="target_defs.cpu.cpu_dot_product=none"):
        check_weight_bits(graph, params)
    check_weight_bits(dict(graph, cpu_weight_bits=7), params)  # 7-bit weights cannot saturate anywhere
    monkeypatch.setattr(cpu_features, "integer_dot_product", lambda: "avx_vnni")
    check_weight_bits(graph, params)
