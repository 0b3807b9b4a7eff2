"""A model saved by Keras 3 (today's tf.keras) is refused at planning with the fix, never a
traceback at training -- also when pruning would read its layer graph first."""

import os
import subprocess
import sys

import pytest

from precisionflow.config.compose import expand
from precisionflow.errors import ConfigError

SAVE_WITH_KERAS3 = """
import os, sys
os.environ.pop("TF_USE_LEGACY_KERAS", None)
import keras
model = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3), classes=4, classifier_activation=None)
model.save(sys.argv[1])
"""


@pytest.fixture(scope="module")
def keras3_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("keras3") / "mobilenet_v2.keras"
    env = {key: value for key, value in os.environ.items() if key != "TF_USE_LEGACY_KERAS"}
    subprocess.run([sys.executable, "-c", SAVE_WITH_KERAS3, str(path)], check=True, capture_output=True, env=env, timeout=600)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["prune=channel"]])
def test_a_keras3_file_is_refused_at_planning_with_the_fix(keras3_file, extra):
    with pytest.raises(ConfigError, match=r"saved by Keras 3\.\d+.*Re-save it with tf_keras"):
        expand(["model=keras_file", f"model.path={keras3_file}", *extra])
