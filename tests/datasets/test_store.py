"""Data nodes on disk: uint8 pixels written and read in bounded pieces, file lists for cache=none,
the same values as the float32 arrays of before, and the training stream's epochs."""

import json

import numpy as np
import pytest
from PIL import Image

from precisionflow.datasets import store
from precisionflow.datasets.store import Split, SplitWriter, write_arrays
from precisionflow.errors import DataError
from precisionflow.stages import prepare_dataset
from precisionflow import data_splits as splits
from tests.datasets.test_image_folder import make_folder, prepare


def numbered_pixels(count, shape=(3, 4)):
    """Image i holds i % 256 in channel 0 and i // 256 in channel 1: which image came back is visible."""
    return np.stack(
        [np.stack([np.full(shape, i % 256), np.full(shape, i // 256)], -1).astype(np.uint8) for i in range(count)]
    ), np.arange(count) % 7


def index_of(images):
    """The image numbers of float32 images made by numbered_pixels."""
    pixels = np.rint(images[:, 0, 0, :] * 255).astype(int)
    return pixels[:, 0] + 256 * pixels[:, 1]


@pytest.fixture
def node(tmp_path):
    pixels, labels = numbered_pixels(600)
    write_arrays(tmp_path, {"train": (pixels, labels)}, [str(i) for i in range(7)])
    return tmp_path


def test_indices_come_back_in_the_order_asked_across_read_chunks(node):
    split = Split(node, "train")
    order = np.random.default_rng(0).permutation(600)
    assert np.array_equal(index_of(split.floats(split.pixels(order))), order)
    run = np.arange(10, 10 + store.READ_CHUNK_IMAGES + 40)  # one run longer than a read chunk
    assert np.array_equal(index_of(split.floats(split.pixels(run))), run)
    assert len(split) == 600 and split.head(5000).shape == (600, 3, 4, 2)


def test_batches_cover_the_split_once_in_order_as_float32(node):
    split = Split(node, "train")
    batches = list(split.batches(256))
    assert [len(b) for b in batches] == [256, 256, 88] and all(b.dtype == np.float32 for b in batches)
    assert np.array_equal(index_of(np.concatenate(batches)), np.arange(600))


def test_pixels_to_float_is_the_arithmetic_of_the_float_arrays_before(tmp_path):
    """Images were stored as np.asarray(image, float32) / 255.0 (digits: / 16.0): the same values come back."""
    root = make_folder(tmp_path / "images", per_class=4)
    _, node = prepare(tmp_path, root)
    train = Split(node, "train")
    files = sorted((root / "cat").glob("*.png")) + sorted((root / "dog").glob("*.png"))
    before = {
        f.name + f.parent.name: np.asarray(Image.open(f).convert("RGB").resize((12, 12)), dtype=np.float32) / 255.0 for f in files
    }
    after = train.array()
    assert any(np.array_equal(after[0], image) for image in before.values())
    digits = splits.digits_source()
    from sklearn.datasets import load_digits

    assert np.array_equal(
        digits.pixels(list(range(10))).astype(np.float32) / np.float32(16),
        (load_digits().images[:10].astype(np.float32) / 16.0)[..., None],
    )


def test_the_digits_split_is_the_one_made_before_from_the_arrays(tmp_path):
    """Splitting indices gives the images splitting the arrays gave (same sklearn permutation)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    params = {"name": "digits", "val_fraction": 0.1, "test_fraction": 0.25, "seed": 0, "max_samples": None}
    out = tmp_path / "node"
    out.mkdir()
    prepare_dataset.run(params, {}, out)
    images, labels = load_digits().images, load_digits().target
    _, x_rest, _, y_rest = train_test_split(images, labels, test_size=0.35, stratify=labels, random_state=0)
    _, x_test, _, y_test = train_test_split(x_rest, y_rest, test_size=0.25 / 0.35, stratify=y_rest, random_state=0)
    test = Split(out, "test")
    assert np.array_equal(test.labels, y_test) and np.array_equal(test.array()[..., 0], (x_test / 16.0).astype(np.float32))


def test_a_writer_that_did_not_finish_leaves_no_split_file(tmp_path):
    writer = SplitWriter(tmp_path, "train", 10, (2, 2, 1))
    writer.append(np.zeros((4, 2, 2, 1), np.uint8))
    with pytest.raises(DataError, match="wrote 4 images, expected 10"):
        writer.close()
    assert not (tmp_path / "x_train.npy").exists()
    with pytest.raises(ValueError, match="expected uint8"):
        SplitWriter(tmp_path, "val", 1, (2, 2, 1)).append(np.zeros((1, 2, 2, 1), np.float32))


def test_a_split_file_of_the_wrong_shape_is_refused(node):
    np.save(node / "y_train.npy", np.zeros(5, np.int64))
    with pytest.raises(DataError, match="Delete this data node's folder"):
        Split(node, "train")


def test_cache_none_keeps_file_lists_and_decodes_the_same_pixels(tmp_path):
    root = make_folder(tmp_path / "images", per_class=6)
    _, pixels_node = prepare(tmp_path / "a", root)
    _, files_node = prepare(tmp_path / "b", root, storage="files", fingerprint="f00d")
    assert not list(files_node.glob("x_*.npy")) and (files_node / "files_train.json").is_file()
    meta = json.loads((files_node / "meta.json").read_text())
    assert meta["storage"] == "files" and meta["fingerprint"] == "f00d"
    for name in ("train", "val", "test"):
        assert np.array_equal(Split(files_node, name).array(), Split(pixels_node, name).array())


def test_cache_none_checks_every_file_at_prepare(tmp_path):
    root = make_folder(tmp_path / "images", per_class=6)
    (root / "cat" / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(DataError, match="broken.png: cannot be read as an image"):
        prepare(tmp_path, root, storage="files")


def test_prepare_reports_its_throughput(tmp_path):
    record, _ = prepare(tmp_path, make_folder(tmp_path / "images", per_class=5))
    assert record["summary"]["images_per_second"] > 0 and record["timings"]["peak_rss_mb"] > 0


def test_cache_choice_enters_exactly_the_ids_it_changes(tmp_path):
    """memory and disk store the same data node (training reads it differently); none stores another."""
    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan

    root = make_folder(tmp_path / "images", per_class=10)

    def ids(cache):
        cfg = expand(["dataset=image_folder", f"dataset.path={root}", f"dataset.cache={cache}", "calibration.num_samples=4"])
        plan = build_plan(cfg, str(tmp_path / "results"))
        return {spec["stage"]: key for key, spec in plan["nodes"].items() if spec["stage"] in ("prepare_dataset", "train_model")}

    memory, disk, none = ids("memory"), ids("disk"), ids("none")
    assert memory["prepare_dataset"] == disk["prepare_dataset"] != none["prepare_dataset"]
    assert len({memory["train_model"], disk["train_model"], none["train_model"]}) == 3


def test_cache_none_for_digits_is_refused_at_composition():
    from precisionflow.config.compose import expand
    from precisionflow.errors import ConfigError

    with pytest.raises(ConfigError, match="dataset.cache=none keeps image files where they are"):
        expand(["dataset.cache=none"])


def test_the_training_stream_is_a_new_permutation_every_epoch(node):
    from precisionflow.datasets import streaming
    from precisionflow.modeling.tfenv import import_tensorflow

    tf, _ = import_tensorflow()
    tf.random.set_seed(0)
    split = Split(node, "train")
    stream = streaming.dataset(tf, split, 64, shuffle=True, seed=1)
    epochs = []
    for _ in range(2):
        seen = [(images.numpy(), labels.numpy()) for images, labels in stream]
        order = np.concatenate([index_of(images) for images, _ in seen])
        labels = np.concatenate([labels for _, labels in seen])
        assert seen[0][0].dtype == np.float32 and sorted(order) == list(range(600))  # every image once
        assert np.array_equal(labels, order % 7)  # each label travels with its image
        epochs.append(order)
    assert not np.array_equal(epochs[0], epochs[1]) and not np.array_equal(epochs[0], np.arange(600))
    ordered = streaming.dataset(tf, split, 64, shuffle=False, seed=0)
    assert np.array_equal(np.concatenate([labels.numpy() for _, labels in ordered]), split.labels)


def test_max_samples_of_all_the_images_or_more_keeps_them_all():
    import numpy as np

    from precisionflow.data_splits import _stratified_split

    labels = np.repeat(np.arange(4), 25)
    params = {"seed": 0, "val_fraction": 0.2, "test_fraction": 0.2}
    for max_samples in (100, 500):
        splits = _stratified_split(np.arange(100), labels, dict(params, max_samples=max_samples))
        assert sorted(np.concatenate(list(splits.values())).tolist()) == list(range(100))
    assert sum(len(v) for v in _stratified_split(np.arange(100), labels, dict(params, max_samples=60)).values()) == 60
