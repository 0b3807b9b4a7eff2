"""Feed numpy batches to ONNX Runtime's calibrators and debug tools."""

import numpy as np


def array_reader(input_name: str, images: np.ndarray, batch_size: int):
    """A CalibrationDataReader over `images` in batches (rewindable)."""
    from onnxruntime.quantization import CalibrationDataReader

    class ArrayReader(CalibrationDataReader):
        def __init__(self):
            self.position = 0

        def get_next(self):
            if self.position >= len(images):
                return None
            batch = images[self.position : self.position + batch_size]
            self.position += batch_size
            return {input_name: np.ascontiguousarray(batch, dtype=np.float32)}

        def rewind(self):
            self.position = 0

    return ArrayReader()


def graph_input_name(path) -> str:
    import onnx

    return onnx.load(str(path), load_external_data=False).graph.input[0].name
