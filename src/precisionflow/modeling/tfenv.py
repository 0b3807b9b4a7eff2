"""The one place TensorFlow is imported.

tensorflow-model-optimization and tf2onnx need Keras 2 (tf_keras); TF only picks it when
TF_USE_LEGACY_KERAS=1 is set before its first import, so every stage gets TF from here.
"""

import os


def import_tensorflow():
    """Return (tf, keras) with tf_keras as the Keras implementation."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import tf_keras as keras

    return tf, keras
