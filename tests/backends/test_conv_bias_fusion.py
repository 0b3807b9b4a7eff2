"""The CUDA build keeps cuDNN's Conv+bias fusion only where it measured faster (the CUDA provider
does not run here: the rates are the H200's, benchmarks/results/h200/engine_vs_plain_2026-12-02)."""

from precisionflow.backends.onnxruntime_backend import kept_conv_bias_fusion

H200_CUDA = {"prefer_nhwc": True, "cuda_graph": True, "cudnn_conv_algo_search": "EXHAUSTIVE", "use_tf32": True}


def search(with_per_s, without_per_s):
    built = []
    rates = {True: with_per_s, False: without_per_s}
    cuda, found = kept_conv_bias_fusion(built.append, dict(H200_CUDA, fuse_conv_bias=True), lambda s: rates[s["fuse_conv_bias"]])
    return cuda, found, built


def test_fusion_is_kept_where_faster_and_the_engine_rebuilt_with_it():
    cuda, found, built = search(18499, 12792)  # ResNet-50 fp16 at b128
    assert cuda["fuse_conv_bias"] and found == {"batch": 32, "with_per_s": 18499, "without_per_s": 12792, "kept": True}
    assert built[-1]["fuse_conv_bias"]  # the saved engine is the one with fusion


def test_fusion_is_left_off_where_slower():
    cuda, found, built = search(6561, 16085)  # MobileNetV2 fp32 (TF32) at b128
    assert not cuda["fuse_conv_bias"] and found["kept"] is False and not built[-1]["fuse_conv_bias"]


def test_no_search_when_fusion_is_not_asked_for_or_on_a_cpu():
    assert kept_conv_bias_fusion(lambda s: None, dict(H200_CUDA, fuse_conv_bias=False), lambda s: 1 / 0) == (
        dict(H200_CUDA, fuse_conv_bias=False),
        None,
    )
    assert kept_conv_bias_fusion(lambda s: None, None, lambda s: 1 / 0) == (None, None)
