"""Synthetic media for tests and media benchmarks (real PIL images, no fixtures on disk)."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw


def scene(seed: int, size: tuple[int, int] = (320, 240)) -> Image.Image:
    """A synthetic 'photo': coloured background with random rectangles and ellipses."""
    rng = np.random.default_rng(seed)
    im = Image.new("RGB", size, tuple(int(x) for x in rng.integers(0, 256, 3)))
    draw = ImageDraw.Draw(im)
    for _ in range(12):
        x0, y0 = int(rng.integers(0, size[0])), int(rng.integers(0, size[1]))
        w, h = (int(v) for v in rng.integers(20, 140, 2))
        shape = draw.rectangle if rng.integers(0, 2) else draw.ellipse
        shape([x0, y0, x0 + w, y0 + h], fill=tuple(int(x) for x in rng.integers(0, 256, 3)))
    return im
