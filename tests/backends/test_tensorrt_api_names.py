"""The TensorRT backend calls only API names that TensorRT 11 still has.

The lists come from NVIDIA's TensorRT 10.x-to-11.x migration guide as summarised in the project's
checked reference (REFERENCE.md, "TensorRT"): 11.x removed the weak-typing builder flags, the INT8
calibrators and a few properties; everything else the backend uses is kept. There are no 11.x
type stubs, so this static check stands beside the mypy check against the 10.x stubs.
"""

import ast
import itertools
from pathlib import Path

from precisionflow.backends import tensorrt_backend as trt_backend

SOURCE = Path(trt_backend.__file__)

# Names the backend uses, each present in TensorRT 11.x's Python API (and in 10.x).
TRT11_API = {
    # module level
    "Builder",
    "BuilderFlag",
    "Logger",
    "WARNING",
    "MemoryPoolType",
    "WORKSPACE",
    "NetworkDefinitionCreationFlag",
    "OnnxParser",
    "ProfilingVerbosity",
    "DETAILED",
    "Runtime",
    "TensorIOMode",
    "INPUT",
    "OUTPUT",
    "LayerInformationFormat",
    "JSON",
    "nptype",
    "__version__",
    # builder, network, config, profile, timing cache
    "create_network",
    "create_builder_config",
    "set_memory_pool_limit",
    "builder_optimization_level",
    "profiling_verbosity",
    "set_flag",
    "clear_flag",
    "create_optimization_profile",
    "set_shape",
    "add_optimization_profile",
    "create_timing_cache",
    "set_timing_cache",
    "get_timing_cache",
    "combine",
    "serialize",
    "build_serialized_network",
    "parse_from_file",
    "num_errors",
    "get_error",
    # engine, inspector, execution context
    "deserialize_cuda_engine",
    "create_engine_inspector",
    "get_engine_information",
    "num_io_tensors",
    "get_tensor_name",
    "get_tensor_mode",
    "get_tensor_dtype",
    "get_tensor_shape",
    "create_execution_context",
    "set_input_shape",
    "set_tensor_address",
    "execute_async_v3",
}
# BuilderFlag members the backend may set (by name, through getattr), each present in 11.x.
TRT11_BUILDER_FLAGS = {"TF32", "SPARSE_WEIGHTS"}
NETWORK_FLAGS = {"STRONGLY_TYPED"}  # set on 10.x only; 11.x ignores it (always strongly typed)
# Removed in TensorRT 11.
REMOVED_IN_11 = {
    "FP16",
    "INT8",
    "BF16",
    "FP8",
    "OBEY_PRECISION_CONSTRAINTS",
    "PREFER_PRECISION_CONSTRAINTS",
    "IInt8Calibrator",
    "IInt8EntropyCalibrator",
    "IInt8EntropyCalibrator2",
    "IInt8MinMaxCalibrator",
    "IInt8LegacyCalibrator",
    "int8_calibrator",
    "platform_has_fast_fp16",
    "platform_has_fast_int8",
    "device_memory_size",
}


def attribute_names():
    tree = ast.parse(SOURCE.read_text())
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}


def test_no_attribute_of_the_backend_is_a_name_removed_in_11():
    assert attribute_names() & REMOVED_IN_11 == set()


def test_every_tensorrt_module_name_the_backend_uses_is_on_the_11x_list():
    tree = ast.parse(SOURCE.read_text())
    used = set()
    for node in ast.walk(tree):
        # trt.X and trt.X.Y chains
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "trt":
            used.add(node.attr)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "trt"
        ):
            used.add(node.attr)
    assert used and used <= TRT11_API, used - TRT11_API


def test_the_methods_the_backend_calls_on_tensorrt_objects_exist_in_11():
    known = TRT11_API | REMOVED_IN_11
    called = attribute_names() & (known | {name for name in attribute_names() if name.startswith(("create_", "get_tensor"))})
    assert called - REMOVED_IN_11 <= TRT11_API


def test_builder_flags_on_11_are_all_kept_names_and_weak_typing_flags_only_reach_10():
    params = [{"sparse_weights": sparse, "trt_int8_fp16": weak} for sparse, weak in itertools.product([False, True], repeat=2)]
    for precision, engine in itertools.product(["fp32", "fp16", "int8", "int8_qat", "int8_mixed"], params):
        on_11 = trt_backend.builder_flag_changes(precision, engine, "11.4.0")
        assert set(on_11) <= TRT11_BUILDER_FLAGS, (precision, engine, on_11)
        assert trt_backend.network_flag_names("11.4.0", precision, engine) == []
        on_10 = trt_backend.builder_flag_changes(precision, engine, "10.14.1")
        assert set(on_10) <= TRT11_BUILDER_FLAGS | set(trt_backend.TRT10_WEAK_TYPING_FLAGS)
        assert set(trt_backend.network_flag_names("10.14.1", precision, engine)) <= NETWORK_FLAGS
