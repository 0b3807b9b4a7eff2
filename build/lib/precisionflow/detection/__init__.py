"""Object detection: generated shadow_cars scenes, a CenterNet-style detector, box decoding and COCO metrics."""
