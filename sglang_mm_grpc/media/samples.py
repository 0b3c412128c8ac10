"""Images made on the spot (warm-ups run whole requests through decode with them)."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def random_png(height: int, width: int, seed: int) -> bytes:
    """An uncompressed PNG of random RGB pixels."""
    rgb = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "PNG", compress_level=0)
    return buf.getvalue()
