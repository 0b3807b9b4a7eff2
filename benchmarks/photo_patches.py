"""Write an image folder of real photo patches, made from the two photographs scikit-learn ships
(sklearn.datasets.load_sample_images: a temple in China, a flower; no download).

Each photo is cut into quadrants and each quadrant is a class (8 classes): a patch is a random
square crop inside its quadrant (a fifth to a half of the photo's height), resized, maybe
mirrored, with a small brightness change. Real textures and colours, where generated shapes leave
some models (MobileNetV2 from scratch at 64x64) at chance.

    python benchmarks/photo_patches.py OUT --per-class 150 --size 64
"""

import argparse
from pathlib import Path

import numpy as np
from PIL import Image


def quadrants(photo: np.ndarray):
    height, width = photo.shape[:2]
    for row in range(2):
        for column in range(2):
            yield photo[row * height // 2 : (row + 1) * height // 2, column * width // 2 : (column + 1) * width // 2]


def patch(region: np.ndarray, photo_height: int, size: int, rng: np.random.Generator) -> Image.Image:
    side = int(rng.uniform(0.2, 0.5) * photo_height)
    side = min(side, region.shape[0], region.shape[1])
    top, left = rng.integers(0, region.shape[0] - side + 1), rng.integers(0, region.shape[1] - side + 1)
    crop = region[top : top + side, left : left + side].astype(np.float32) * rng.uniform(0.8, 1.2)
    image = Image.fromarray(np.clip(crop, 0, 255).astype(np.uint8)).resize((size, size), Image.BILINEAR)
    return image.transpose(Image.FLIP_LEFT_RIGHT) if rng.random() < 0.5 else image


def change_every(folder: Path, every: int, condition: str, seed: int = 3) -> list:
    """Changes every `every`-th patch of `folder` in place and returns its sidecar rows (`file,tag`,
    paths relative to the folder: docs/how-to/conditions.md): "0.04" dims a patch to that fraction
    of its brightness (tag `dim`), "noise40" adds Gaussian noise of sigma 40 pixel levels (`noisy`)."""
    noise = condition.startswith("noise")
    tag = "noisy" if noise else "dim"
    rng = np.random.default_rng(seed)
    rows = []
    for path in sorted(folder.glob("*/*.png")):
        if int(path.stem) % every == 0:
            pixels = np.asarray(Image.open(path)).astype(np.float32)
            if noise:
                pixels = pixels + rng.normal(0.0, float(condition[len("noise") :]), pixels.shape)
            else:
                pixels = pixels * float(condition)
            Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path)
            rows.append(f"{path.relative_to(folder)},{tag}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--per-class", type=int, default=150)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_patches(args.out, args.per_class, args.size, args.seed)
    print(f"wrote {8 * args.per_class} patches of {args.size}x{args.size} in 8 classes to {args.out}")


def write_patches(out: Path, per_class: int, size: int, seed: int = 0) -> None:
    """<out>/<photo>_<quadrant>/NNNN.png: `per_class` patches of size x size per quadrant."""
    from sklearn.datasets import load_sample_images

    rng = np.random.default_rng(seed)
    photos = load_sample_images()
    for photo, name in zip(photos.images, ("china", "flower"), strict=True):
        for index, region in enumerate(quadrants(photo)):
            folder = out / f"{name}_{index}"
            folder.mkdir(parents=True, exist_ok=True)
            for n in range(per_class):
                patch(region, photo.shape[0], size, rng).save(folder / f"{n:04d}.png")


if __name__ == "__main__":
    main()
