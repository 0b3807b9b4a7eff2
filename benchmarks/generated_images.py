"""Write a generated image folder: <out>/<class>/<n>.png, `classes` classes of simple shapes.

Used where a benchmark needs real-size images without a download (ResNet-50 / MobileNetV2 at
224x224 on the H200): each class is one shape (disc, square, bar, cross, ring, ...) at a random
place, size, colour and background, with noise, so a short training learns something and the
engines' agreement with fp32 means something.

    python benchmarks/generated_images.py OUT --classes 10 --per-class 16 --size 224
"""

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

SHAPES = ("disc", "square", "hbar", "vbar", "cross", "ring", "triangle", "diamond", "dots", "frame")


def draw_shape(draw: ImageDraw.ImageDraw, shape: str, box, colour) -> None:
    x0, y0, x1, y1 = box
    cx, cy, w = (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0
    if shape == "disc":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    elif shape == "hbar":
        draw.rectangle((x0, cy - w / 8, x1, cy + w / 8), fill=colour)
    elif shape == "vbar":
        draw.rectangle((cx - w / 8, y0, cx + w / 8, y1), fill=colour)
    elif shape == "cross":
        draw.rectangle((x0, cy - w / 10, x1, cy + w / 10), fill=colour)
        draw.rectangle((cx - w / 10, y0, cx + w / 10, y1), fill=colour)
    elif shape == "ring":
        draw.ellipse(box, outline=colour, width=max(2, int(w / 8)))
    elif shape == "triangle":
        draw.polygon([(cx, y0), (x1, y1), (x0, y1)], fill=colour)
    elif shape == "diamond":
        draw.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=colour)
    elif shape == "dots":
        r = w / 8
        for dx in (-w / 4, w / 4):
            for dy in (-w / 4, w / 4):
                draw.ellipse((cx + dx - r, cy + dy - r, cx + dx + r, cy + dy + r), fill=colour)
    else:  # frame
        draw.rectangle(box, outline=colour, width=max(2, int(w / 10)))


def make_image(shape: str, size: int, rng: np.random.Generator) -> Image.Image:
    background = tuple(int(v) for v in rng.integers(0, 120, 3))
    image = Image.new("RGB", (size, size), background)
    extent = rng.uniform(0.35, 0.7) * size
    x0, y0 = rng.uniform(0, size - extent, 2)
    colour = tuple(int(v) for v in rng.integers(130, 256, 3))
    draw_shape(ImageDraw.Draw(image), shape, (x0, y0, x0 + extent, y0 + extent), colour)
    pixels = np.asarray(image, dtype=np.int16) + rng.integers(-12, 13, (size, size, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def write_folder(out: Path, classes: int, per_class: int, size: int, seed: int = 0) -> int:
    if not 2 <= classes <= len(SHAPES):
        raise SystemExit(f"--classes: expected 2..{len(SHAPES)}, found {classes}")
    rng = np.random.default_rng(seed)
    for shape in SHAPES[:classes]:
        folder = out / shape
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(per_class):
            make_image(shape, size, rng).save(folder / f"{index:05d}.png")
    return classes * per_class


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--per-class", type=int, default=16)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    count = write_folder(args.out, args.classes, args.per_class, args.size, args.seed)
    print(f"{count} images of {args.size}x{args.size} in {args.out}")


if __name__ == "__main__":
    main()
