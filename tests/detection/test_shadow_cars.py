"""The generated shadow_cars scenes: deterministic per seed, shadows darker than the ground they fall
on and nothing else changed, shadow boxes enclosing their pixels, objects never on each other."""

import numpy as np

from precisionflow.detection import shadow_cars


def test_scenes_are_deterministic_per_seed_and_differ_between_seeds():
    first = list(shadow_cars.generate(7, 5, 64))
    again = list(shadow_cars.generate(7, 5, 64))
    other = list(shadow_cars.generate(8, 5, 64))
    for (image, notes), (image_again, notes_again) in zip(first, again, strict=True):
        assert np.array_equal(image, image_again) and np.array_equal(notes["shadow_mask"], notes_again["shadow_mask"])
        assert all(notes[key] == notes_again[key] for key in ("boxes", "classes", "shadows"))
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(first, other, strict=True))


def test_shadow_masks_are_consistent_with_the_pixels():
    for index in range(40):
        scene = shadow_cars.sample_scene(3, index, 64)
        lit, mask = shadow_cars.render(scene, shadows=True)
        unlit, no_mask = shadow_cars.render(scene, shadows=False)
        assert not no_mask.any()
        # every shadow pixel is darker than the same pixel without shadows; no other pixel changed
        assert np.all(lit[mask].astype(int).sum(axis=1) < unlit[mask].astype(int).sum(axis=1) + 1)
        assert np.array_equal(lit[~mask], unlit[~mask])
        assert lit[mask].mean() < 0.8 * unlit[mask].mean() if mask.any() else True
        notes = shadow_cars.annotations(scene, mask)
        ys, xs = np.nonzero(mask)
        for x, y in zip(xs, ys, strict=True):  # each shadow pixel lies inside some recorded shadow box (or a tiny sliver)
            inside = any(b[0] <= x < b[2] and b[1] <= y < b[3] for b in notes["shadows"])
            assert inside or mask.sum() < 4


def test_objects_do_not_overlap_and_shadows_are_not_objects():
    counts = []
    for image, notes in shadow_cars.generate(0, 60, 64):
        boxes = np.asarray(notes["boxes"])
        counts.append(len(boxes))
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                overlap = (
                    min(boxes[i][2], boxes[j][2]) - max(boxes[i][0], boxes[j][0]) > 0
                    and min(boxes[i][3], boxes[j][3]) - max(boxes[i][1], boxes[j][1]) > 0
                )
                assert not overlap
        assert set(notes["classes"]) <= {0, 1} and len(notes["shadows"]) <= len(boxes)
        assert image.shape == (64, 64, 3) and image.dtype == np.uint8
    assert min(counts) >= 1 and max(counts) == 3
