"""The one place TensorFlow is imported.

tensorflow-model-optimization and tf2onnx need Keras 2 (tf_keras); TF only picks it when
TF_USE_LEGACY_KERAS=1 is set before its first import, so every stage gets TF from here.
"""

import os
from pathlib import Path

VERBOSE_ENV = "PRECISIONFLOW_VERBOSE"


def import_tensorflow():
    """Return (tf, keras) with tf_keras as the Keras implementation."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    # On a machine without an NVIDIA driver, TensorFlow's CUDA probe prints oneDNN's banner, "Could
    # not find cuda drivers" and an error-level "failed call to cuInit" for every job: noise, not
    # news. Only fatal messages there (precisionflow run --verbose keeps everything).
    quiet = "3" if not Path("/proc/driver/nvidia").exists() and not os.environ.get(VERBOSE_ENV) else "2"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", quiet)
    import tensorflow as tf
    import tf_keras as keras

    return tf, keras
