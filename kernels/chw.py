"""Normalize + HWC->CHW relayout by lookup table, writing each output element once.

The common tail of CLIP-style processors (LLaVA, LLaVA-NeXT, Pixtral, ...): after the
uint8 resize/crop/pad, each pixel becomes ``lut[c, value]`` at ``out[c, y, x]``.
``out`` may be a view into a larger batch tensor (e.g. one tile of pixel_values).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True)
def lut_chw(img, lut, out):
    """uint8 [H, W, C] -> ``out`` float32 [C, H, W] (``out`` may be larger: the top-left
    H x W of each channel plane is written, the rest is left as is)."""
    h, w, channels = img.shape
    for c in range(channels):
        table = lut[c]
        plane = out[c]
        for y in range(h):
            line = img[y]
            orow = plane[y]
            for x in range(w):
                orow[x] = table[line[x, c]]


def normalize_chw(img: np.ndarray, lut: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Python entry: checks shapes, allocates ``out`` when not given."""
    if img.ndim != 3 or img.dtype != np.uint8:
        raise ValueError("expected a uint8 [H, W, C] array")
    h, w, c = img.shape
    if out is None:
        out = np.empty((c, h, w), dtype=np.float32)
    if out.dtype != np.float32 or out.shape[0] != c or out.shape[1] < h or out.shape[2] < w:
        raise ValueError(f"out must be float32 with room for {(c, h, w)}, got {out.dtype} {out.shape}")
    lut_chw(np.ascontiguousarray(img), np.ascontiguousarray(lut, dtype=np.float32), out)
    return out
