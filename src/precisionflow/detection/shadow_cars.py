"""shadow_cars: generated street scenes of car-like objects with cast shadows (no download).

Each scene is drawn from its own seed (dataset seed, scene index): a ground with a lighting
gradient, noise and clutter (stones, road marks), one light direction, and 1-3 vehicles (`car`:
long and low, `van`: shorter and taller) that each cast a shadow -- a dark, vehicle-sized blob
next to it, the thing an fp16 engine was seen counting as a second car. Shadows are never labelled
as objects; their boxes and pixel masks are recorded so an evaluation can tell a box on a shadow
from any other spurious box.

Scenes are first sampled as parameters, then rendered, so the same scene can be drawn without
its shadows (tests check every shadow pixel is darker there and nothing else changed).
"""

from typing import Any, Dict, List, Tuple

import numpy as np

CLASSES = ("car", "van")
SIZES = {"car": ((15, 22), (8, 10)), "van": ((13, 17), (10, 13))}  # (length range, width range) in pixels at 64x64
BODY_SHADE = 0.25  # windows and wheels: this fraction of the body colour


DEFAULT_SETTINGS = {
    "shadow_reach": (0.6, 1.0),
    "shadow_darkness": (0.35, 0.55),
    "vehicle_scale": 1.0,
    "vehicle_colour": (60, 256),
}


def sample_scene(seed: int, index: int, size: int, settings: Dict[str, Any] = None) -> Dict[str, Any]:
    """The parameters of scene `index`: ground, light, clutter and vehicles (no pixels yet).
    `settings` (dataset.scene) change the ranges drawn from, never the order of the draws."""
    settings = {**DEFAULT_SETTINGS, **(settings or {})}
    rng = np.random.default_rng([seed, index])
    scale = size / 64
    angle = rng.uniform(0, 2 * np.pi)
    scene = {
        "size": size,
        "ground": rng.integers(90, 150, 3).tolist(),
        "gradient": float(rng.uniform(-0.25, 0.25)),
        "darkness": float(rng.uniform(*settings["shadow_darkness"])),
        "light": [float(np.cos(angle)), float(np.sin(angle))],
        "clutter": [],
        "vehicles": [],
        "noise_seed": int(rng.integers(2**31)),
    }
    for _ in range(int(rng.integers(3, 9))):
        w, h = rng.integers(1, 4, 2) * scale
        x, y = rng.uniform(0, size - w), rng.uniform(0, size - h)
        scene["clutter"].append(
            {"box": [float(x), float(y), float(x + w), float(y + h)], "colour": rng.integers(40, 220, 3).tolist()}
        )
    for _ in range(int(rng.integers(1, 4))):
        vehicle = _place_vehicle(rng, scene, scale, settings)
        if vehicle:
            scene["vehicles"].append(vehicle)
    return scene


def _place_vehicle(rng, scene, scale: float, settings: Dict[str, Any]):
    """A vehicle whose body and shadow overlap no earlier vehicle's (None after 20 tries)."""
    scale = scale * settings["vehicle_scale"]
    size = scene["size"]
    for _ in range(20):
        kind = CLASSES[int(rng.integers(len(CLASSES)))]
        (lo_len, hi_len), (lo_wid, hi_wid) = SIZES[kind]
        length, width = rng.uniform(lo_len, hi_len) * scale, rng.uniform(lo_wid, hi_wid) * scale
        w, h = (length, width) if rng.random() < 0.5 else (width, length)
        x0, y0 = rng.uniform(2, size - w - 2), rng.uniform(2, size - h - 2)
        body = [float(x0), float(y0), float(x0 + w), float(y0 + h)]
        reach = float(rng.uniform(*settings["shadow_reach"])) * max(w, h)
        shadow = _shadow_box(body, scene["light"], reach, size)
        taken = [v["body"] for v in scene["vehicles"]] + [v["shadow_box"] for v in scene["vehicles"]]
        if all(_overlap(candidate, other) == 0 for candidate in (body, shadow) for other in taken):
            return {
                "class": kind,
                "body": body,
                "reach": reach,
                "shadow_box": shadow,
                "colour": rng.integers(*settings["vehicle_colour"], 3).tolist(),
            }
    return None


def _shadow_box(body, light, reach: float, size: int) -> List[float]:
    """Where the shadow can fall: the body swept away from the light by `reach`, clipped to the image."""
    dx, dy = -light[0] * reach, -light[1] * reach
    x0, y0, x1, y1 = body
    return [max(0.0, min(x0, x0 + dx)), max(0.0, min(y0, y0 + dy)), min(size, max(x1, x1 + dx)), min(size, max(y1, y1 + dy))]


def _overlap(a, b) -> float:
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _rect_mask(box, size: int) -> np.ndarray:
    ys, xs = np.mgrid[0:size, 0:size] + 0.5
    return (xs >= box[0]) & (xs < box[2]) & (ys >= box[1]) & (ys < box[3])


def _cast_mask(vehicle, light, size: int) -> np.ndarray:
    """The body's footprint swept away from the light: the union of shifted copies of its rectangle."""
    mask = np.zeros((size, size), bool)
    for step in np.linspace(0, 1, 12):
        dx, dy = -light[0] * vehicle["reach"] * step, -light[1] * vehicle["reach"] * step
        x0, y0, x1, y1 = vehicle["body"]
        mask |= _rect_mask([x0 + dx, y0 + dy, x1 + dx, y1 + dy], size)
    return mask


def render(scene: Dict[str, Any], shadows: bool = True) -> Tuple[np.ndarray, np.ndarray]:
    """(uint8 image H x W x 3, bool mask of the shadow pixels that show)."""
    size = scene["size"]
    ys = (np.arange(size) / size - 0.5)[:, None, None]
    image = np.asarray(scene["ground"], np.float32)[None, None, :] * (1 + scene["gradient"] * ys) * np.ones((1, size, 1))
    image = image + np.random.default_rng(scene["noise_seed"]).normal(0, 6, (size, size, 3))
    for stone in scene["clutter"]:
        image[_rect_mask(stone["box"], size)] = stone["colour"]
    bodies = np.zeros((size, size), bool)
    for vehicle in scene["vehicles"]:
        bodies |= _rect_mask(vehicle["body"], size)
    shadow = np.zeros((size, size), bool)
    if shadows:
        for vehicle in scene["vehicles"]:
            shadow |= _cast_mask(vehicle, scene["light"], size)
        shadow &= ~bodies
        image[shadow] *= scene["darkness"]
    for vehicle in scene["vehicles"]:
        _draw_vehicle(image, vehicle, size)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8), shadow


def _draw_vehicle(image: np.ndarray, vehicle, size: int) -> None:
    x0, y0, x1, y1 = vehicle["body"]
    colour = np.asarray(vehicle["colour"], np.float32)
    image[_rect_mask(vehicle["body"], size)] = colour
    w, h = x1 - x0, y1 - y0
    if w >= h:  # a window band across the middle third, wheels at the four corners
        window = [x0 + w * 0.3, y0 + h * 0.2, x0 + w * (0.6 if vehicle["class"] == "car" else 0.85), y1 - h * 0.2]
    else:
        window = [x0 + w * 0.2, y0 + h * 0.3, x1 - w * 0.2, y0 + h * (0.6 if vehicle["class"] == "car" else 0.85)]
    image[_rect_mask(window, size)] = colour * BODY_SHADE
    for cx, cy in ((x0, y0), (x1 - 2, y0), (x0, y1 - 2), (x1 - 2, y1 - 2)):
        image[_rect_mask([cx, cy, cx + 2, cy + 2], size)] = 20


def annotations(scene: Dict[str, Any], shadow_mask: np.ndarray) -> Dict[str, Any]:
    """Object boxes and classes; shadow boxes = the bounding box of each shadow's visible pixels;
    the shadow pixel mask itself (what decides whether a box lies on a shadow)."""
    size = scene["size"]
    boxes = [v["body"] for v in scene["vehicles"]]
    classes = [CLASSES.index(v["class"]) for v in scene["vehicles"]]
    shadows = []
    for vehicle in scene["vehicles"]:
        own = _cast_mask(vehicle, scene["light"], size) & shadow_mask
        if own.sum() >= 4:
            ys, xs = np.nonzero(own)
            shadows.append([float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)])
    return {"boxes": boxes, "classes": classes, "shadows": shadows, "shadow_mask": shadow_mask}


# Conditions a scene carries, from what the generator drew (thresholds chosen so that each tag but
# shadow_long covers roughly a quarter to a half of the default scenes; long shadows need dataset.scene).
LONG_SHADOW = 1.4  # a shadow reaching at least 1.4 vehicle lengths (the default scenes' reach only 1.0)
DARK_SHADOW = 0.42  # shadow pixels keep at most 42% of the ground's brightness
SMALL_VEHICLE = 16  # a vehicle shorter than 16 pixels at 64x64
CLUTTERED = 7  # stones and road marks
LOW_CONTRAST = 45  # a vehicle whose mean colour is within this of the ground's


def scene_conditions(scene: Dict[str, Any]) -> List[str]:
    """The tags of a scene (zero or more): shadow_long, shadow_dark, small_vehicle, cluttered,
    low_contrast, and the light's side (light_left / light_right)."""
    scale = scene["size"] / 64
    vehicles = scene["vehicles"]
    lengths = [max(v["body"][2] - v["body"][0], v["body"][3] - v["body"][1]) for v in vehicles]
    tags = ["light_left" if scene["light"][0] < 0 else "light_right"]
    if any(v["reach"] >= LONG_SHADOW * length for v, length in zip(vehicles, lengths, strict=True)):
        tags.append("shadow_long")
    if vehicles and scene["darkness"] <= DARK_SHADOW:
        tags.append("shadow_dark")
    if any(length < SMALL_VEHICLE * scale for length in lengths):
        tags.append("small_vehicle")
    if len(scene["clutter"]) >= CLUTTERED:
        tags.append("cluttered")
    ground = float(np.mean(scene["ground"]))
    if any(abs(float(np.mean(v["colour"])) - ground) < LOW_CONTRAST for v in vehicles):
        tags.append("low_contrast")
    return sorted(tags)


def generate(seed: int, count: int, size: int):
    """Yield (uint8 image, annotations) for scenes 0..count-1."""
    for index in range(count):
        scene = sample_scene(seed, index, size)
        image, mask = render(scene)
        yield image, annotations(scene, mask)
