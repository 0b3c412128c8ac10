"""RGBX -> packed RGB, for the paths that need packed pixels from Pillow's own buffer.

numpy copies ``rgbx[:, :, :3]`` element by element, several times slower than this
loop over 32-bit words.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True)
def pack_into(src, dst):
    """Four pixels (four little-endian uint32 words RGBX) -> three packed words, so the
    loop is plain 32-bit shifts and ors, which vectorize; the tail goes byte by byte."""
    s = src.reshape(-1)
    d = dst.reshape(-1)
    n = d.size // 3
    quads = n // 4
    sw = s[:16 * quads].view(np.uint32)
    dw = d[:12 * quads].view(np.uint32)
    for q in range(quads):
        p0 = sw[4 * q]
        p1 = sw[4 * q + 1]
        p2 = sw[4 * q + 2]
        p3 = sw[4 * q + 3]
        dw[3 * q] = (p0 & np.uint32(0xFFFFFF)) | (p1 << np.uint32(24))
        dw[3 * q + 1] = ((p1 >> np.uint32(8)) & np.uint32(0xFFFF)) | (p2 << np.uint32(16))
        dw[3 * q + 2] = ((p2 >> np.uint32(16)) & np.uint32(0xFF)) | (p3 << np.uint32(8))
    for i in range(4 * quads, n):
        d[3 * i] = s[4 * i]
        d[3 * i + 1] = s[4 * i + 1]
        d[3 * i + 2] = s[4 * i + 2]


def rgb_or_rgbx(pixels: np.ndarray, what: str) -> np.ndarray:
    """``pixels`` checked to be uint8 [H, W, 3] or RGBX [H, W, 4] and not empty, C-contiguous."""
    if not isinstance(pixels, np.ndarray) or pixels.ndim != 3 or pixels.shape[2] not in (3, 4) \
            or pixels.dtype != np.uint8:
        raise ValueError(f"{what} expects uint8 [H, W, 3] or RGBX [H, W, 4], got "
                         f"{getattr(pixels, 'dtype', type(pixels))} {getattr(pixels, 'shape', '')}")
    if pixels.shape[0] < 1 or pixels.shape[1] < 1:
        raise ValueError("input image is empty")
    return np.ascontiguousarray(pixels)


def packed(pixels: np.ndarray) -> np.ndarray:
    """[H, W, 3] as it is; RGBX packed."""
    return pixels if pixels.shape[2] == 3 else pack_rgb(pixels)


def pack_rgb(rgbx: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 4] -> a new C-contiguous uint8 [H, W, 3] of the first three bytes."""
    if rgbx.ndim != 3 or rgbx.shape[2] != 4 or rgbx.dtype != np.uint8:
        raise ValueError(f"pack_rgb expects uint8 [H, W, 4], got {rgbx.dtype} {rgbx.shape}")
    out = np.empty((*rgbx.shape[:2], 3), np.uint8)
    pack_into(np.ascontiguousarray(rgbx), out)
    return out
