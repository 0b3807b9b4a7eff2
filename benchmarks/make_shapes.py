"""Generate an image_folder data set of coloured shapes (circle, square, triangle, cross).

    .venv/bin/python benchmarks/make_shapes.py OUT_DIR [--per-class 200] [--size 32] [--seed 0]

Random position, size, colour and a noisy background, so a ResNet-style model has something to
learn; made locally, nothing downloaded.
"""

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

SHAPES = ("circle", "square", "triangle", "cross")


def draw(shape: str, size: int, rng) -> Image.Image:
    background = rng.integers(0, 150, (size, size, 3), dtype=np.uint8)
    image = Image.fromarray(background)
    radius = rng.uniform(0.12, 0.3) * size
    cx, cy = rng.uniform(radius, size - radius, 2)
    colour = tuple(int(c) for c in rng.integers(100, 256, 3))
    # a distractor stroke in another colour, so the classes are not separable by colour mass alone
    pen = ImageDraw.Draw(image)
    pen.line(
        [tuple(rng.uniform(0, size, 2)), tuple(rng.uniform(0, size, 2))],
        fill=tuple(int(c) for c in rng.integers(60, 256, 3)),
        width=int(rng.integers(1, 3)),
    )
    box = [cx - radius, cy - radius, cx + radius, cy + radius]
    if shape == "circle":
        pen.ellipse(box, fill=colour)
    elif shape == "square":
        pen.rectangle(box, fill=colour)
    elif shape == "triangle":
        pen.polygon([(cx, cy - radius), (cx - radius, cy + radius), (cx + radius, cy + radius)], fill=colour)
    else:
        width = max(2, int(radius / 3))
        pen.line([(cx - radius, cy), (cx + radius, cy)], fill=colour, width=width)
        pen.line([(cx, cy - radius), (cx, cy + radius)], fill=colour, width=width)
    return image


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--per-class", type=int, default=200)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    for shape in SHAPES:
        folder = args.out / shape
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(args.per_class):
            draw(shape, args.size, rng).save(folder / f"{index:04d}.png")
    print(f"{len(SHAPES) * args.per_class} images in {args.out}")


if __name__ == "__main__":
    main()
