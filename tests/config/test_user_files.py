"""Mistakes inside a user's own configuration files (--config-dir) are named with file, line, key
path and the closest valid key or choice (config/user_files.py), before anything composes."""

import pytest

from precisionflow.config import user_files
from precisionflow.errors import ConfigError


@pytest.mark.parametrize(
    "group, text, message",
    [
        (
            "dataset",
            "name: digits\nmax_sample: 900\n",
            r"bad\.yaml:2: dataset\.max_sample: no such key\. Did you mean 'max_samples'\?",
        ),
        ("model", "name: resnet_mini\nwidth: wide\n", r"bad\.yaml:2: model\.width: expected float, found 'wide'"),
        (
            "experiment",
            "# @package _global_\ndefaults:\n  - override /model: resnet_mini\ncalibration:\n  method: entropi\n",
            r"bad\.yaml:5: calibration\.method: expected one of \[entropy, minmax, percentile\], found 'entropi'\. Did you mean 'entropy'\?",
        ),
        (
            "experiment",
            "# @package _global_\nevaluate:\n  budget:\n    max_top1: 3\n",
            r"bad\.yaml:4: evaluate\.budget\.max_top1: no such key\. Did you mean 'max_top1_drop'\?",
        ),
        ("train", "epochs: [3\n", r"bad\.yaml:\d+: not valid YAML"),
    ],
)
def test_a_mistake_in_a_user_file_names_file_line_key_and_fix(tmp_path, group, text, message):
    (tmp_path / group).mkdir()
    (tmp_path / group / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        user_files.check_folder(tmp_path)


def test_the_starter_folder_and_free_form_keys_pass(tmp_path):
    from precisionflow.starter import write_starter

    write_starter(tmp_path / "pf")
    (tmp_path / "pf" / "experiment" / "gpu.yaml").write_text(
        "# @package _global_\ntarget_defs:\n  mine: {device: cuda, expect_device: L4}\nevaluate:\n  budgets:\n    int8: {min_speedup: 1.2}\n"
    )
    assert user_files.check_folder(tmp_path / "pf") is None  # free-form keys (a new target, a budget per precision) pass
    # ... and the same file is read: a typo beside them is refused (the check is not blind to it)
    gpu = tmp_path / "pf" / "experiment" / "gpu.yaml"
    gpu.write_text(gpu.read_text() + "  budget:\n    max_top1: 3\n")
    with pytest.raises(ConfigError, match=r"gpu\.yaml:\d+: evaluate\.budget\.max_top1: no such key"):
        user_files.check_folder(tmp_path / "pf")


def test_the_command_line_reports_it_before_composing(tmp_path):
    import subprocess
    import sys

    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "bad_digits.yaml").write_text("name: digits\nmax_sample: 900\n")
    command = [sys.executable, "-m", "precisionflow.cli", "plan", "--config-dir", str(tmp_path), "dataset=bad_digits"]
    done = subprocess.run(command, capture_output=True, text=True)
    assert (
        done.returncode == 2 and "bad_digits.yaml:2: dataset.max_sample: no such key. Did you mean 'max_samples'?" in done.stderr
    )
