"""Where an int8 graph's Q/DQ nodes are placed: as TensorRT fuses them, or as ONNX Runtime's CPU
kernels do. One name each, compared by these constants everywhere (quant/qdq.py builds them). A
module of its own so that the stage contract (stages/__init__.py), in every node's code, carries
three names and not the graph code."""

TENSORRT = "tensorrt"
ORT_CPU = "onnxruntime_cpu"
PLACEMENTS = (TENSORRT, ORT_CPU)
