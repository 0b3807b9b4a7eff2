"""The TensorRT backend's pure logic runs everywhere; its runtime needs tensorrt and a GPU."""

from pathlib import Path

import pytest

from precisionflow.backends import get_backend
from precisionflow.backends import tensorrt_backend as trt_backend
from precisionflow.errors import ConfigError, EngineMismatchError

ENGINE = {
    "min_batch": 1,
    "opt_batch": 32,
    "max_batch": 64,
    "min_spatial": [],
    "opt_spatial": [],
    "max_spatial": [],
    "trt_builder_optimization_level": 3,
    "trt_workspace_mb": 1024,
    "sparse_weights": False,
}


def test_profiles_cover_batch_range_and_keep_static_dims():
    shapes = trt_backend.profile_shapes([None, 8, 8, 1], ENGINE)
    assert shapes == {"min": (1, 8, 8, 1), "opt": (32, 8, 8, 1), "max": (64, 8, 8, 1)}


def test_dynamic_spatial_dims_take_configured_sizes():
    params = dict(ENGINE, min_spatial=[64, 64], opt_spatial=[224, 224], max_spatial=[320, 320])
    shapes = trt_backend.profile_shapes([None, None, None, 3], params)
    assert shapes["opt"] == (32, 224, 224, 3) and shapes["max"] == (64, 320, 320, 3)


def test_bad_profiles_are_config_errors():
    with pytest.raises(ConfigError, match="dynamic non-batch dimension"):
        trt_backend.profile_shapes([None, None, 8, 1], ENGINE)
    with pytest.raises(ConfigError, match="min <= opt <= max"):
        trt_backend.profile_shapes([None, 8, 8, 1], dict(ENGINE, opt_batch=128))


@pytest.mark.parametrize("version, flags", [("10.14.1.48", ["STRONGLY_TYPED"]), ("11.4.0", [])])
def test_strongly_typed_flag_only_where_it_exists(version, flags):
    assert trt_backend.network_flag_names(version) == flags


def test_old_tensorrt_is_refused():
    with pytest.raises(EngineMismatchError, match="expected 10.x or 11.x"):
        trt_backend.check_version("8.6.1")


def test_tf32_cleared_only_for_fp32_and_sparse_on_request():
    assert trt_backend.builder_flag_changes("fp32", ENGINE) == {"TF32": False}
    assert trt_backend.builder_flag_changes("fp16", dict(ENGINE, sparse_weights=True)) == {"TF32": True, "SPARSE_WEIGHTS": True}


def test_timing_cache_is_keyed_by_gpu_and_exact_version(tmp_path):
    h100 = trt_backend.timing_cache_path(tmp_path, "NVIDIA H100 80GB HBM3", "10.14.1.48")
    assert h100 == tmp_path / "trt-timing" / "NVIDIA-H100-80GB-HBM3-trt10.14.1.48.cache"
    assert h100 != trt_backend.timing_cache_path(tmp_path, "NVIDIA H100 80GB HBM3", "10.14.2.1")
    assert h100 != trt_backend.timing_cache_path(tmp_path, "NVIDIA A100-SXM4-80GB", "10.14.1.48")


def add_timings(path: str, writer: int, builds: int) -> None:
    """What `builds` engine builds of one job do to the shared timing cache: merge their entries in.
    The cache here is a JSON list standing in for TensorRT's serialized cache (combine = union);
    the pause between reading and writing is where an unlocked writer would lose another's entries."""
    import json
    import time

    def merged(current: bytes, entry: str) -> bytes:
        entries = json.loads(current or b"[]")
        time.sleep(0.002)
        return json.dumps(entries + [entry]).encode()

    for build in range(builds):
        trt_backend.read_shared(Path(path))
        trt_backend.merge_shared(Path(path), lambda current, build=build: merged(current, f"w{writer}-b{build}"))


def test_parallel_builds_lose_no_timing_cache_entries(tmp_path):
    import json
    import multiprocessing

    cache = tmp_path / "trt-timing" / "gpu-trt10.cache"
    cache.parent.mkdir()
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=add_timings, args=(str(cache), writer, 25)) for writer in range(6)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
    assert [writer.exitcode for writer in writers] == [0] * 6
    entries = json.loads(cache.read_bytes())
    assert sorted(entries) == sorted(f"w{w}-b{b}" for w in range(6) for b in range(25))  # all 150, once each
    assert [p.name for p in cache.parent.iterdir() if p.suffix == ".tmp"] == []


def test_engine_metadata_and_provenance_check():
    gpu = {"device_name": "NVIDIA H200", "compute_capability": "9.0", "driver": "580.1"}
    profiles = {"image": trt_backend.profile_shapes([None, 8, 8, 1], ENGINE)}
    described = trt_backend.describe("10.14.1", gpu, "int8", profiles, ENGINE, 12.3, 4096)
    assert described["profiles"]["image"]["max"] == [64, 8, 8, 1] and described["compute_capability"] == "9.0"
    trt_backend.check_provenance(described, "10.14.1", gpu, "eng")
    with pytest.raises(EngineMismatchError, match="backend_version '10.14.1', this machine has '11.4.0'"):
        trt_backend.check_provenance(described, "11.4.0", gpu, "eng")
    with pytest.raises(EngineMismatchError, match="device_name 'NVIDIA H200'"):
        trt_backend.check_provenance(described, "10.14.1", dict(gpu, device_name="NVIDIA A100"), "eng")


def _tensorrt_runtime_available() -> str:
    try:
        import tensorrt  # noqa: F401
    except ImportError as err:
        return f"tensorrt does not import here ({err}); PyPI holds only a stub for its libraries"
    from precisionflow.devices import has_nvidia_gpu

    return "" if has_nvidia_gpu() else "no NVIDIA GPU visible to nvidia-smi"


@pytest.mark.skipif(bool(_tensorrt_runtime_available()), reason=_tensorrt_runtime_available() or "available")
def test_tensorrt_builds_and_runs_a_tiny_engine(tiny_onnx, tmp_path, tiny_images):
    import numpy as np
    import onnxruntime as ort

    backend = get_backend("tensorrt")
    description = backend.build(tiny_onnx, tmp_path, ENGINE, {"expect_device": ""}, "fp32", cache_root=tmp_path)
    engine = backend.load(tmp_path, description, {})
    expected = ort.InferenceSession(str(tiny_onnx), providers=["CPUExecutionProvider"]).run(None, {"image": tiny_images})[0]
    np.testing.assert_allclose(engine.run(tiny_images), expected, rtol=1e-3, atol=1e-3)
    assert (tmp_path / trt_backend.INSPECTOR_FILE).exists()


def test_missing_tensorrt_gives_an_actionable_error():
    if not _tensorrt_runtime_available().startswith("tensorrt does not import"):
        pytest.skip("tensorrt imports here")
    with pytest.raises(trt_backend.TensorRTUnavailable, match="pip install tensorrt"):
        get_backend("tensorrt").describe_runtime({})


FIXTURES = Path(__file__).parent / "fixtures"


def real_inspector(name: str):
    import json

    return json.loads((FIXTURES / name).read_text())


def test_labels_count_compute_layers_of_real_tensorrt_10_inspector_output():
    """NVIDIA's own int8 QAT MobileNetV2 engine JSON: 5 convolutions (one of them the classifier),
    all on int8 inputs; the Q/DQ reformats, the pooling and the fp32 engine output are no compute."""
    from precisionflow.backends import executed

    inspector = real_inspector("trt10_mobilenet_qat.engine.graph.json")
    counts = executed.trt_layer_types(inspector)
    assert counts == {"int8": 5}
    label = executed.label("int8", counts, "TensorRT", trt_backend.typing_of("int8", ENGINE, "10.14.1"))
    assert label["as_requested"] and label["executed_precision"] == "int8"
    assert label["label"] == "int8 graph, ran int8 on TensorRT, strongly typed (the graph's types)"
    # the words TensorRT 10 really writes
    assert executed.trt_type("Row major linear FP32") == "fp32"
    assert executed.trt_type("Thirty-two wide channel vectorized row major FP16 format") == "fp16"
    assert executed.trt_type("Four wide channel vectorized row major Int8 format") == "int8"


def test_fp16_engine_with_fp32_io_reads_fp16():
    """An fp16 engine keeps fp32 inputs/outputs (reformats, not compute) and is not flagged '(!)'."""
    from precisionflow.backends import executed

    layers = [
        {"LayerType": "Reformat", "ParameterType": "Reformat", "Inputs": [{"Format/Datatype": "Row major linear FP32"}]},
        {
            "LayerType": "CaskConvolution",
            "ParameterType": "Convolution",
            "Inputs": [{"Format/Datatype": "Thirty-two wide channel vectorized row major FP16 format"}],
        },
        {
            "LayerType": "CaskGemmConvolution",
            "ParameterType": "Convolution",
            "Inputs": [{"Format/Datatype": "Channel major FP16 format where channel % 8 == 0"}],
        },
        {"LayerType": "Shuffle", "ParameterType": "Shuffle", "Inputs": [{"Format/Datatype": "Row major linear Int32"}]},
        {"LayerType": "Reformat", "ParameterType": "Reformat", "Inputs": [{"Format/Datatype": "Row major linear FP16 format"}]},
    ]
    counts = executed.trt_layer_types({"Layers": layers})
    assert counts == {"fp16": 2}  # the shape tensor (Int32) and the I/O reformats are not counted
    assert executed.label("fp16", counts, "TensorRT")["as_requested"]


def test_tensorrt_11_data_type_field_is_read():
    """TensorRT 11's inspector gives a tensor's data type its own field beside Format (schema of
    NVIDIA's 10.x-to-11.x IEngineInspector migration guide; no real 11.x engine JSON was found)."""
    from precisionflow.backends import executed

    layer = {
        "LayerType": "CaskConvolution",
        "ParameterType": "Convolution",
        "Inputs": [{"Name": "x", "DataType": "Half", "Format": "Row major linear FP32 format (kLINEAR)"}],
    }
    assert executed.trt_layer_types({"Layers": [layer]}) == {"fp16": 1}  # DataType wins over the format's words
    layer["Inputs"][0]["DataType"] = "Int8"
    assert executed.trt_layer_types({"Layers": [layer]}) == {"int8": 1}


@pytest.mark.parametrize(
    "precision, version, allow, network, builder",
    [
        ("int8", "10.14.1", True, [], {"TF32": True, "INT8": True, "FP16": True}),  # trtexec --int8 --fp16, asked for
        ("int8_qat", "10.14.1", True, [], {"TF32": True, "INT8": True, "FP16": True}),
        ("int8_mixed", "10.14.1", True, ["STRONGLY_TYPED"], {"TF32": True}),  # never: its float ops were chosen in fp32
        ("int8", "10.14.1", False, ["STRONGLY_TYPED"], {"TF32": True}),
        ("int8", "11.4.0", True, [], {"TF32": True}),  # 11.x: always strongly typed, no fp16 fallback
        ("fp16", "10.14.1", True, ["STRONGLY_TYPED"], {"TF32": True}),
    ],
)
def test_weak_typing_only_when_asked_on_10_and_never_for_int8_mixed(precision, version, allow, network, builder):
    params = dict(ENGINE, trt_int8_fp16=allow)
    assert trt_backend.network_flag_names(version, precision, params) == network
    assert trt_backend.builder_flag_changes(precision, params, version) == builder
    typing = trt_backend.typing_of(precision, params, version)
    assert typing.startswith("weakly" if "INT8" in builder else "strongly")


def test_strongly_typed_is_the_default():
    from precisionflow.config.compose import expand

    [cfg] = expand(["engine=tensorrt"])
    assert cfg["engine"]["trt_int8_fp16"] is False
    assert trt_backend.network_flag_names("10.14.1", "int8", cfg["engine"]) == ["STRONGLY_TYPED"]


def test_a_fixed_batch_is_kept_in_the_profile():
    shapes = trt_backend.profile_shapes([8, 32, 32, 3], ENGINE)
    assert shapes == {"min": (8, 32, 32, 3), "opt": (8, 32, 32, 3), "max": (8, 32, 32, 3)}


@pytest.mark.parametrize("result", [None, False, -1])
def test_failure_values_of_tensorrt_calls_are_refused_with_advice(result):
    with pytest.raises(trt_backend.TensorRTCallFailed, match="BuilderConfig.add_optimization_profile failed .* check engine"):
        trt_backend.checked(result, "BuilderConfig.add_optimization_profile", "check engine.min/opt/max_batch.")
    assert trt_backend.checked(0, "x", "") == 0 and trt_backend.checked(True, "x", "") is True


def test_an_engine_tensorrt_cannot_deserialize_says_rebuild():
    class Runtime:
        def deserialize_cuda_engine(self, plan):
            return None  # what TensorRT returns for a plan of another version or GPU

    with pytest.raises(trt_backend.TensorRTCallFailed, match="delete the engine folder and run again"):
        trt_backend.deserialized(Runtime(), b"plan", "results/build_engine/x/engine.plan")


def test_cuda_failures_are_cuda_errors_not_engine_mismatches():
    from precisionflow.backends import cuda_clock
    from precisionflow.errors import CudaError

    class ErrorString:  # a ctypes function of libcudart: restype is set before the call
        restype = None

        def __call__(self, status):
            return b"an illegal memory access was encountered"

    class Cudart:
        cudaGetErrorString = ErrorString()

    with pytest.raises(CudaError, match="CUDA error 700 .an illegal memory access.*rebuilding will not help") as caught:
        cuda_clock.check_status(Cudart(), 700, "cudaEventSynchronize")
    assert not isinstance(caught.value, EngineMismatchError)


@pytest.mark.parametrize(
    "environ, chosen",
    [
        ({}, "0"),
        ({"CUDA_VISIBLE_DEVICES": "3"}, "3"),
        ({"CUDA_VISIBLE_DEVICES": "2,5"}, "2"),
        ({"CUDA_VISIBLE_DEVICES": "GPU-8b1c2d3e-aaaa-bbbb-cccc-0123456789ab"}, "GPU-8b1c2d3e-aaaa-bbbb-cccc-0123456789ab"),
        ({"CUDA_VISIBLE_DEVICES": ""}, None),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, None),
        ({"SLURM_JOB_GPUS": "6,7"}, "6"),  # SLURM without CUDA_VISIBLE_DEVICES
    ],
)
def test_the_gpu_asked_about_is_the_one_the_job_was_given(environ, chosen):
    from precisionflow import devices

    assert devices.visible_gpu(environ) == chosen


def test_engine_provenance_records_the_timing_cache_state_it_was_built_with(tmp_path):
    cache_file = trt_backend.timing_cache_path(tmp_path, "NVIDIA H200", "10.14.1")
    empty = trt_backend.timing_cache_state(cache_file, b"")
    warm = trt_backend.timing_cache_state(cache_file, b"timings")
    assert empty == {"file": ".cache/trt-timing/NVIDIA-H200-trt10.14.1.cache", "bytes_read": 0, "sha256_read": None}
    assert warm["bytes_read"] == 7 and len(warm["sha256_read"]) == 64


def test_tensorrt_version_comes_from_whichever_distribution_provides_it(monkeypatch):
    from importlib.metadata import PackageNotFoundError

    from precisionflow import identity

    def version(name):
        if name == "tensorrt-cu12":
            return "10.14.1.48"
        raise PackageNotFoundError(name)

    monkeypatch.setattr(identity, "version", version)
    assert identity.installed_version("tensorrt") == "10.14.1.48"
