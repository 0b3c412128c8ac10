"""Normalize + HWC->CHW relayout, writing each output element once.

The common tail of processors that resize, crop and pad in uint8 and then rescale and
normalize: after the uint8 resize/crop/pad, each pixel becomes ``lut[c, value]`` at ``out[c, y, x]``, computed
by ``normalize.normalize_row`` (vectorized arithmetic proven equal to the table, or the
table itself). ``out`` may be a view into a larger batch tensor (e.g. one tile of
pixel_values). A uint8 ``out`` gets the pixels as they are (raw), planar.
"""

from __future__ import annotations

import numba
import numpy as np

from .normalize import OUT_DTYPES, normalize_into, tables


@numba.njit(nogil=True, cache=True)
def lut_chw(img, coef, lut, out):
    """uint8 [H, W, 3] (or Pillow's RGBX [H, W, 4], read in place) -> ``out`` float32
    [3, H, W] (``out`` may be larger: the top-left H x W of each channel plane is written,
    the rest is left as is). ``coef`` is ``normalize.arithmetic(lut)``. A uint8 ``out``
    gets the raw pixels (``coef``, ``lut`` not read)."""
    h, w, step = img.shape
    line = np.empty((3, w), out.dtype)
    for y in range(h):
        normalize_into(img[y].reshape(-1), w, coef, lut, line, out, y, 0, step)


def normalize_chw(img: np.ndarray, lut: np.ndarray, out: np.ndarray | None = None, dtype=None) -> np.ndarray:
    """Python entry: checks shapes, allocates ``out`` (of ``dtype``, float32 by default)
    when not given. A uint8 ``out`` (or ``dtype``) gets the raw pixels."""
    if img.ndim != 3 or img.shape[2] not in (3, 4) or img.dtype != np.uint8:
        raise ValueError("expected a uint8 [H, W, 3] array (or RGBX [H, W, 4])")
    h, w, _ = img.shape
    c = 3
    if dtype is None:
        dtype = np.float32 if out is None else out.dtype
    dtype = np.dtype(dtype)
    if out is None:
        out = np.empty((c, h, w), dtype=dtype)
    if dtype not in OUT_DTYPES or out.dtype != dtype or out.ndim != 3 or out.shape[0] != c or out.shape[1] < h \
            or out.shape[2] < w or out.strides[2] != out.itemsize:
        raise ValueError(f"out must be {dtype} (float32 or uint8) with room for {(c, h, w)} and contiguous rows, "
                         f"got {out.dtype} {out.shape}")
    lut_chw(np.ascontiguousarray(img), *tables(lut, dtype), out)
    return out
