"""The CUDA build keeps cuDNN's Conv+bias fusion only where it measured faster (the CUDA provider
does not run here: the rates are the H200's, benchmarks/results/h200/engine_vs_plain_2026-12-02)."""

from precisionflow.backends.onnxruntime_backend import kept_conv_bias_fusion

H200_CUDA = {"prefer_nhwc": True, "cuda_graph": True, "cudnn_conv_algo_search": "EXHAUSTIVE", "use_tf32": True}


def search(with_per_s, without_per_s, rebuild=lambda settings: (settings, None)):
    """The search on constructed rates (per round, in FUSION_ORDER's order for each side) and a
    constructed build that returns (the settings it built with, its error) as the real one does."""
    built, rates = [], {True: iter(with_per_s), False: iter(without_per_s)}

    def attempt(settings):
        built.append(settings)
        return rebuild(settings)

    cuda, found = kept_conv_bias_fusion(attempt, dict(H200_CUDA, fuse_conv_bias=True), lambda s: next(rates[s["fuse_conv_bias"]]))
    return cuda, found, built


def test_fusion_is_kept_where_faster_beyond_doubt_and_the_engine_rebuilt_with_it():
    cuda, found, built = search([18499, 18320, 18611], [12792, 12900, 12650])  # ResNet-50 fp16 at b128
    assert cuda["fuse_conv_bias"] and found["kept"] and found["ratio_interval"][0] > 1.0
    assert found["batch"] == 128 and len(found["with_per_s"]) == len(found["without_per_s"]) == 3
    assert built[-1]["fuse_conv_bias"]  # the saved engine is the one with fusion


def test_fusion_is_left_off_where_slower():
    cuda, found, built = search([6561, 6600, 6490], [16085, 16000, 16200])  # MobileNetV2 fp32 (TF32) at b128
    assert not cuda["fuse_conv_bias"] and found["kept"] is False and not built[-1]["fuse_conv_bias"]


def test_fusion_is_left_off_where_the_rounds_cannot_tell():
    """One 0.5-s window per side once decided: rounds that straddle 1 keep the runtime's default."""
    cuda, found, _ = search([15000, 12000, 16000], [14000, 15500, 13000])
    assert not cuda["fuse_conv_bias"] and found["kept"] is False and found["ratio_interval"][0] < 1.0


def test_the_rebuilds_own_outcome_is_what_is_recorded():
    """A rebuild that refused CUDA graphs once came back recorded as cuda_graph: True."""
    refused = lambda settings: (dict(settings, cuda_graph=False), None)  # noqa: E731
    cuda, found, _ = search([18499, 18320, 18611], [12792, 12900, 12650], rebuild=refused)
    assert cuda["cuda_graph"] is False and found["rebuilt_with"]["cuda_graph"] is False


def test_no_search_when_fusion_is_not_asked_for_or_on_a_cpu():
    assert kept_conv_bias_fusion(lambda s: None, dict(H200_CUDA, fuse_conv_bias=False), lambda s: 1 / 0) == (
        dict(H200_CUDA, fuse_conv_bias=False),
        None,
    )
    assert kept_conv_bias_fusion(lambda s: None, None, lambda s: 1 / 0) == (None, None)
