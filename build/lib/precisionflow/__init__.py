"""precisionflow: train -> ONNX -> per-precision engines -> measured accuracy and speed."""

__version__ = "0.1.0"
