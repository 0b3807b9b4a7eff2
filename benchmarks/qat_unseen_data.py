"""Issue 43, item 3: does int8_qat deploy what QAT trained, on data unlike any measured before?

The last batch's 99.5% held on its own photo sets (digits, scikit-learn's two photos cut in four at
64x64) and came out 98.0% on another. Here three new image folders, each made from pictures that
ship inside installed packages (no download), unlike those in source, size, class count and
condition:

  portrait_terrain_48   Grace Hopper's portrait (matplotlib) and a terrain map (matplotlib's
                        Jacksboro fault elevation, drawn with a colour map), each cut 2x2:
                        8 classes, 48x48, 300 per class
  photos18_dim_32       scikit-learn's two photos each cut 3x3: 18 classes, 32x32, 180 per class,
                        every seventh image dimmed (x0.3) and tagged `dim`
  portrait9_noisy_56    the portrait cut 3x3: 9 classes, 56x56, 250 per class, every seventh image
                        with Gaussian noise (sigma 25 of 255) and tagged `noisy`

For resnet_mini and MobileNetV2 the workflow's own stages train, QAT-fine-tune, export and build
int8_qat for the CPU placement and the TensorRT placement (simulated on this CPU); each engine is
scored image by image against its QAT model on the test split (half the images), with a Wilson
95% interval and per condition.

    .venv/bin/python benchmarks/qat_unseen_data.py [SET ...] -> benchmarks/results/qat_unseen_data.json
"""

import json
import os
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, QUICK_TIMING, RESULTS, run_sweep, save  # noqa: E402

MODELS = {
    "resnet_mini": ["model=resnet_mini", "train.epochs=10", "finetune.epochs=2"],
    "mobilenet_v2": ["model=mobilenet_v2", "train.epochs=10", "finetune.epochs=2"],
}
COMMON = [
    "dataset=image_folder",
    "dataset.test_fraction=0.5",
    "dataset.val_fraction=0.05",
    "precisions=[fp32,int8_qat]",
    "int8.simulate_tensorrt=true",
    *QUICK_TIMING,
]


def sample_picture(name: str) -> np.ndarray:
    import matplotlib

    folder = Path(matplotlib.__file__).parent / "mpl-data" / "sample_data"
    if name == "terrain":
        import matplotlib.pyplot as plt

        elevation = np.load(folder / "jacksboro_fault_dem.npz")["elevation"].astype(np.float64)
        scaled = (elevation - elevation.min()) / (elevation.max() - elevation.min())
        return (255 * plt.get_cmap("gist_earth")(scaled)[..., :3]).astype(np.uint8)
    return np.asarray(Image.open(folder / "grace_hopper.jpg").convert("RGB"))


def regions(picture: np.ndarray, rows: int, columns: int):
    height, width = picture.shape[:2]
    for row in range(rows):
        for column in range(columns):
            yield picture[
                row * height // rows : (row + 1) * height // rows, column * width // columns : (column + 1) * width // columns
            ]


def crop(region: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """A random square inside the region (0.4-1.0 of its shorter side), resized, maybe mirrored,
    brightness x0.8-1.2."""
    side = int(rng.uniform(0.4, 1.0) * min(region.shape[:2]))
    top, left = rng.integers(0, region.shape[0] - side + 1), rng.integers(0, region.shape[1] - side + 1)
    pixels = region[top : top + side, left : left + side].astype(np.float32) * rng.uniform(0.8, 1.2)
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).resize((size, size), Image.BILINEAR)
    image = np.asarray(image.transpose(Image.FLIP_LEFT_RIGHT) if rng.random() < 0.5 else image)
    return image.astype(np.float32)


def dim(pixels, rng):
    return pixels * 0.3


def noisy(pixels, rng):
    return pixels + rng.normal(0, 25, pixels.shape)


SETS = {
    # name: (pictures and their grids, size, images per class, condition)
    "portrait_terrain_48": ((("portrait", 2, 2), ("terrain", 2, 2)), 48, 300, None),
    "photos18_dim_32": ((("china", 3, 3), ("flower", 3, 3)), 32, 180, dim),
    "portrait9_noisy_56": ((("portrait", 3, 3),), 56, 250, noisy),
}


def make_set(name: str) -> tuple:
    """(the folder, its conditions sidecar or None), written once."""
    pictures, size, per_class, condition = SETS[name]
    root = OUT / "qat_unseen_data" / name
    sidecar = root.parent / f"{name}-conditions.csv"
    if root.is_dir():
        return root, sidecar if condition else None
    rng = np.random.default_rng(7)
    photos = {}
    if any(picture in ("china", "flower") for picture, _, _ in pictures):
        from sklearn.datasets import load_sample_images

        photos = dict(zip(("china", "flower"), load_sample_images().images, strict=True))
    tagged = ["file,conditions"]
    for picture, rows, columns in pictures:
        source = photos.get(picture)
        source = sample_picture(picture) if source is None else source
        for index, region in enumerate(regions(source, rows, columns)):
            folder = root / f"{picture}_{index}"
            folder.mkdir(parents=True, exist_ok=True)
            for n in range(per_class):
                pixels = crop(region, size, rng)
                if condition and n % 7 == 0:
                    pixels = condition(pixels, rng)
                    tagged.append(f"{folder.name}/{n:04d}.png,{condition.__name__}")
                Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(folder / f"{n:04d}.png")
    if condition:
        sidecar.write_text("\n".join(tagged) + "\n")
    return root, sidecar if condition else None


def with_interval(agreeing: int, n: int) -> dict:
    from precisionflow.stats import wilson

    low, high = wilson(agreeing, n, confidence=0.95)
    return {"agreement": round(agreeing / n, 4), "interval_95": [round(low, 4), round(high, 4)], "disagreeing": n - agreeing}


def by_condition(results: Path, node: dict) -> dict:
    """Agreement with the QAT model per condition tag of the test split (the engine run again, as
    evaluate_engine runs it; the stage reports the overall figure only)."""
    from precisionflow.backends import get_backend
    from precisionflow.datasets.store import Split
    from precisionflow.nodeio import read_json, read_node
    from precisionflow.stages.evaluate_engine import predict

    engine_dir = results / node["inputs"]["engine"]
    data = results / node["inputs"]["data"]
    from precisionflow.datasets import conditions

    tags = conditions.load(data, "test")
    if tags is None:
        return {}
    description = read_json(engine_dir / "engine.json")
    engine = get_backend(description["backend"]).load(engine_dir, description, read_node(engine_dir)["params"]["target_def"])
    logits = predict(engine, Split(data, "test"), 64).argmax(1)
    qat = np.load(results / node["inputs"]["qat_model"] / "qat_logits.npy").argmax(1)
    found = {}
    for tag in sorted({tag for image in tags for tag in image}):
        chosen = np.array([tag in image for image in tags])
        found[tag] = with_interval(int(np.sum(logits[chosen] == qat[chosen])), int(chosen.sum()))
    return found


def rows_of(results: Path, set_name: str, model: str, seconds: float):
    for folder in sorted(results.glob("evaluate_engine/int8_qat-*")):
        node = json.loads((folder / "node.json").read_text())
        metrics = json.loads((folder / "metrics.json").read_text())
        versus = metrics["qat"]["vs_qat_model"]
        n = metrics["test_images"]
        row = {
            "data": set_name,
            "model": model,
            "node": folder.name,
            "placement": "tensorrt (simulated on this CPU)" if node["params"].get("simulates") else "onnxruntime_cpu",
            "ran": metrics["engine"]["executed"]["executed_precision"],
            "top1": round(metrics["top1"], 4),
            "test_images": n,
            **with_interval(round(versus["agreement"] * n), n),
            "by_condition": by_condition(results, node),
            "wall_s": round(seconds, 1),
        }
        print(json.dumps(row), flush=True)
        yield row


def main() -> None:
    chosen = sys.argv[1:] or list(SETS)
    saved = RESULTS / "qat_unseen_data.json"
    rows = [row for row in (json.loads(saved.read_text())["rows"] if saved.is_file() else []) if row["data"] not in chosen]
    for set_name in chosen:
        root, sidecar = make_set(set_name)
        size = SETS[set_name][1]
        data = [f"dataset.path={root}", f"dataset.image_size=[{size},{size}]"]
        data += [f"dataset.conditions={sidecar}"] if sidecar else []
        for model, extra in MODELS.items():
            results = OUT / "qat_unseen_data" / f"{set_name}-{model}"
            seconds = run_sweep(results, [*extra, *COMMON, *data])
            rows.extend(rows_of(results, set_name, model, seconds))
            save("qat_unseen_data.json", {"sets": {k: str(v[:3]) for k, v in SETS.items()}, "common": COMMON, "rows": rows})
    print(f"pid {os.getpid()} done", flush=True)


if __name__ == "__main__":
    main()
