"""`precisionflow init DIR`: a starter configuration folder for `--config-dir DIR`.

Each file is a choice of a configuration group, found beside the built-in ones (a file named like
a built-in choice replaces it). The folder works as written: `precisionflow run --config-dir DIR
experiment=my_first` runs a small sweep on scikit-learn's digits; my_images.yaml shows where your
own image folder goes."""

import sys
from pathlib import Path

FILES = {
    "README.md": """# Your precisionflow configuration

Every sub-folder is a configuration group; every YAML file in it is a choice of that group,
used beside precisionflow's built-in choices (a file with a built-in's name replaces it):

    precisionflow run --config-dir {folder} experiment=my_first          # this folder's preset
    precisionflow run --config-dir {folder} dataset=my_images dataset.path=/data/photos
    precisionflow config --config-dir {folder} experiment=my_first       # what a run would use

Or set PRECISIONFLOW_CONFIG_DIR={folder} once. `precisionflow config` prints the composed
configuration; every key is checked against the schema before anything runs.
""",
    "dataset/my_digits.yaml": """# A copy of the built-in digits data set (1,797 images of 8x8): 450 test images, 45 per class --
# enough for the budgets in experiment/my_first.yaml to be decided (fewer images only widen intervals).
name: digits
val_fraction: 0.1
test_fraction: 0.25
seed: 0
max_samples: null
cache: memory
""",
    "dataset/my_images.yaml": """# Your images: <path>/<class>/*.png|jpg, or <path>/{train,val,test}/<class>/...
name: image_folder
path: ~/data/my_images  # change this, or pass dataset.path=... on the command line
image_size: [64, 64]
channels: 3
val_fraction: 0.15
test_fraction: 0.15
seed: 0
max_samples: null
cache: disk
""",
    "model/my_resnet.yaml": """# The built-in small ResNet at half width.
name: resnet_mini
width: 0.5
stages: 3
blocks_per_stage: 1
bn_momentum: 0.9
""",
    "experiment/my_first.yaml": """# @package _global_
# An experiment preset: choices of other groups, and any keys, in one name.
defaults:
  - override /dataset: my_digits
  - override /model: my_resnet
precisions: [fp32, fp16, int8]
train:
  epochs: 8
evaluate:
  duration_s: 0.3
  warmup_s: 0.05
  ratio_rounds: 6  # a first look's side-by-side speed: half the default's rounds, intervals ~1.6x as wide
  # A first look's budgets, loose enough for this data to decide them: with 450 test images an
  # int8 engine that loses a few images has a top-1 interval about 2 points wide each side, with 45
  # per class about 8 (precisionflow warns when a budget is finer). Tighten them for a release gate.
  budget:
    max_top1_drop: 5.0
    min_agreement: 0.90
    max_class_drop: 25.0
  serving:  # short LoadGen runs for a first look: not MLPerf-valid (the output says so)
    min_duration_ms: 500
    search_precision: 0.25
""",
}


def write_starter(folder: Path) -> int:
    """Write the starter files into a new (or empty) folder; never overwrite anything."""
    folder = folder.expanduser()
    if folder.exists() and any(folder.iterdir()):
        print(
            f"precisionflow: error: init: {folder} exists and is not empty; expected a new folder "
            "(nothing was written). Name another folder.",
            file=sys.stderr,
        )
        return 2
    for relative, text in FILES.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{folder}", str(folder)))
    print(
        f"Wrote a starter configuration to {folder}/ ({', '.join(sorted(FILES))}).\n"
        f"Try: precisionflow plan --config-dir {folder} experiment=my_first"
    )
    return 0
