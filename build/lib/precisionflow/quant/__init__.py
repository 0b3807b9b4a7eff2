"""int8 machinery shared by the calibrate and quantize_onnx stages: the calibration cache
(cache.py), TensorRT-legal Q/DQ graphs and their checker (qdq.py), per-tensor error (layer_error.py)."""
