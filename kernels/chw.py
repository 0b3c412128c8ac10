"""Normalize + HWC->CHW relayout, writing each output element once.

The common tail of processors that resize, crop and pad in uint8 and then rescale and
normalize: after the uint8 resize/crop/pad, each pixel becomes ``lut[c, value]`` at ``out[c, y, x]``, computed
by ``normalize.normalize_row`` (vectorized arithmetic proven equal to the table, or the
table itself). ``out`` may be a view into a larger batch tensor (e.g. one tile of
pixel_values).
"""

from __future__ import annotations

import numba
import numpy as np

from .normalize import arithmetic, normalize_into


@numba.njit(nogil=True, cache=True)
def lut_chw(img, coef, lut, out):
    """uint8 [H, W, 3] (or Pillow's RGBX [H, W, 4], read in place) -> ``out`` float32
    [3, H, W] (``out`` may be larger: the top-left H x W of each channel plane is written,
    the rest is left as is). ``coef`` is ``normalize.arithmetic(lut)``."""
    h, w, step = img.shape
    line = np.empty((3, w), np.float32)
    for y in range(h):
        normalize_into(img[y].reshape(-1), w, coef, lut, line, out, y, 0, step)


def normalize_chw(img: np.ndarray, lut: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Python entry: checks shapes, allocates ``out`` when not given."""
    if img.ndim != 3 or img.shape[2] not in (3, 4) or img.dtype != np.uint8:
        raise ValueError("expected a uint8 [H, W, 3] array (or RGBX [H, W, 4])")
    h, w, _ = img.shape
    c = 3
    if out is None:
        out = np.empty((c, h, w), dtype=np.float32)
    if out.dtype != np.float32 or out.shape[0] != c or out.shape[1] < h or out.shape[2] < w or out.strides[2] != 4:
        raise ValueError(
            f"out must be float32 with room for {(c, h, w)} and contiguous rows, got {out.dtype} {out.shape}")
    lut = np.ascontiguousarray(lut, dtype=np.float32)
    lut_chw(np.ascontiguousarray(img), arithmetic(lut), lut, out)
    return out
