"""Every error class's advice works when followed. Each case causes the error in a real run, checks
that the message says what to do, does exactly that, and checks that the next plain
`precisionflow run` gets past it. (slow: real Snakemake, TensorFlow, ONNX Runtime, MLflow)

ConfigError, DataError: refused at planning; LineageError: a finished node edited (a calibration
cache or an engine copied in); EngineMismatchError: an engine folder built by another runtime;
StageError: a training that learned nothing (train.at_chance=stop), a training whose loss diverged.
"""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from precisionflow.nodeio import content_hashes, file_stats
from tests.test_end_to_end import TINY

pytestmark = pytest.mark.slow

# What is tested is each error's advice, not the verdicts: a model at chance cannot be judged.
BASE = [override for override in TINY if not override.startswith("precisions=")] + [
    "precisions=[fp32,int8]",
    "evaluate.accept_undecided=true",
    "evaluate.serving.enabled=false",
    "target_defs.local.framework=false",
]
# Measured here: 1 epoch at a learning rate of 1e-9 leaves seed 3's small_cnn at validation top-1 0.071
# (chance 0.1; "at chance" is below 0.15).
# (its engines' agreement compares noise -- entropy-calibrated int8 flips a quarter of it -- so no
# agreement budget: this test is about the at-chance flag, not a verdict)
LEARNED_NOTHING = ["train.learning_rate=1e-9", "train.epochs=1", "train.seed=3", "evaluate.budget.min_agreement=null"]
UNTIL_TRAINING = ["--", "--until", "train_model"]


def precisionflow(results: Path, *overrides: str, after=()) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "precisionflow.cli",
        "run",
        "--cores",
        "2",
        f"results_dir={results}",
        *BASE,
        *overrides,
        *after,
    ]
    results.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.run(command, capture_output=True, text=True, cwd=results.parent)


def succeeded(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def refused(done: subprocess.CompletedProcess, *says: str) -> str:
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    for text in says:
        assert text in output, output[-3000:]
    return output


def refused_before_any_job(done: subprocess.CompletedProcess, *says: str) -> str:
    output = refused(done, *says)
    assert "precisionflow: error:" in done.stderr and "Building DAG" not in output and "rule " not in output
    return output


@pytest.fixture(scope="module")
def finished(tmp_path_factory, node_store) -> Path:
    results = tmp_path_factory.mktemp("advice") / "results"
    node_store.seed(results, BASE)  # the trained model and graphs: the session's (the advice is about what follows)
    succeeded(precisionflow(results))
    return results


def test_config_error_did_you_mean(tmp_path):
    results = tmp_path / "results"
    done = precisionflow(results, "train.epoch=3", after=["--dry-run"])
    refused_before_any_job(done, "train.epoch: no such key. Did you mean train.epochs")  # (or train.keep_best_epoch?)
    suggested = re.search(r"Did you mean (\S+?)(?:\?| or )", done.stderr).group(1)
    succeeded(precisionflow(results, f"{suggested}=3", after=["--dry-run"]))


def test_data_error_names_the_number_that_fits(tmp_path):
    results = tmp_path / "results"
    done = precisionflow(results, "dataset.max_samples=400", "calibration.num_samples=300", after=["--dry-run"])
    refused_before_any_job(done, "lower calibration.num_samples")
    available = re.search(r"the train split has (\d+) images", done.stderr).group(1)
    succeeded(precisionflow(results, "dataset.max_samples=400", f"calibration.num_samples={available}", after=["--dry-run"]))


def test_data_error_names_the_file_to_remove(tmp_path):
    images = tmp_path / "images"
    for name in ("a", "b"):
        (images / name).mkdir(parents=True)
        for index in range(30):
            Image.new("RGB", (8, 8), (index * 8, 100 if name == "a" else 200, 30)).save(images / name / f"{index}.png")
    (images / "b" / "scan.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"cut short")
    folder = ["dataset=image_folder", f"dataset.path={images}", "dataset.image_size=[8,8]", "calibration.num_samples=8"]
    done = precisionflow(tmp_path / "results", *folder, after=["--dry-run"])
    refused_before_any_job(done, "cannot be read as an image", "Remove or replace the file.")
    Path(re.search(r"error: (\S+): cannot be read", done.stderr).group(1)).unlink()
    succeeded(precisionflow(tmp_path / "results", *folder, after=["--dry-run"]))


@pytest.mark.parametrize("stage, name", [("calibrate", "ranges.json"), ("build_engine", "engine.onnx")])
def test_lineage_error_delete_the_folder_and_run_again(finished, stage, name):
    edited = sorted(finished.glob(f"{stage}/*/{name}"))[0]
    edited.write_bytes(edited.read_bytes().replace(b"1", b"2", 1))  # another model's file copied in
    done = precisionflow(finished)
    refused_before_any_job(
        done, f"{name} changed after the node finished", "delete that folder and run precisionflow run again, which recomputes it"
    )
    folder = Path(re.search(r"error: (\S+): \S+ changed after", done.stderr).group(1))
    assert folder == edited.parent
    shutil.rmtree(folder)
    output = succeeded(precisionflow(finished))
    assert (folder / "node.json").is_file() and f"{stage}/{folder.name}" in output


def test_engine_mismatch_delete_the_engine_folder_and_run_again(finished):
    engine_dir = sorted(finished.glob("build_engine/*/engine.json"))[0].parent
    evaluation = [
        p.parent
        for p in finished.glob("evaluate_engine/*/node.json")
        if engine_dir.name in json.loads(p.read_text())["inputs"]["engine"]
    ]
    assert evaluation
    for folder in evaluation:  # not evaluated yet: the engine folder arrives from another machine
        shutil.rmtree(folder)
    description = json.loads((engine_dir / "engine.json").read_text())
    (engine_dir / "engine.json").write_text(json.dumps(dict(description, backend_version="1.16.3")))
    record = json.loads((engine_dir / "node.json").read_text())  # built there: its own record is consistent
    (engine_dir / "node.json").write_text(
        json.dumps(dict(record, files=content_hashes(engine_dir), file_stats=file_stats(engine_dir)))
    )
    output = refused(precisionflow(finished), "was built with backend_version '1.16.3'", "delete the engine folder")
    assert "the run FAILED (evaluate_engine/" in output and ".log)" in output  # what failed, and its log
    shutil.rmtree(engine_dir)
    succeeded(precisionflow(finished))
    assert json.loads((engine_dir / "engine.json").read_text())["backend_version"] == description["backend_version"]


def test_stage_error_at_chance_stops_and_warn_builds_the_engines_flagged(tmp_path):
    results = tmp_path / "results"
    refused(
        precisionflow(results, *LEARNED_NOTHING, "train.at_chance=stop"),
        "the model learned nothing",
        "set train.at_chance=warn to build engines anyway",
    )
    assert not list(results.glob("export_onnx/*/node.json"))  # stopped before any engine
    output = succeeded(precisionflow(results, *LEARNED_NOTHING, "train.at_chance=warn"))
    assert "WARNING: validation top-1 0.071 is at chance" in output  # the console, as training ends
    [report] = results.glob("report/*/")
    flag = re.compile(r"\(!\) train_model/\S+: validation top-1 0.071 is at chance")
    assert flag.search(output) and flag.search((report / "summary.txt").read_text())  # the table's notes
    assert "validation top-1 0.071 is at chance" in (report / "report.html").read_text()


def test_stage_error_diverged_training_lower_the_learning_rate(tmp_path):
    results = tmp_path / "results"
    diverging = ["train.optimizer=sgd", "train.learning_rate=1e38", "train.precision_policy=mixed_float16"]
    done = precisionflow(results, *diverging, after=UNTIL_TRAINING)
    output = refused(done, "Try a lower learning rate")
    assert re.search(r"Training loss became \S+ at epoch 1, step \d+", output)
    succeeded(
        precisionflow(
            results,
            "train.optimizer=sgd",
            "train.learning_rate=0.05",
            "train.precision_policy=mixed_float16",
            after=UNTIL_TRAINING,
        )
    )
