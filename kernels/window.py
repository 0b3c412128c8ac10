"""Crop / pad / tile + normalize + HWC->CHW in one pass.

Many processors crop (``center_crop``), pad (a centered black canvas, ``center_crop``
of a too-small image) and cut tiles in uint8, then rescale and normalize. Reading a window of the uint8 image, with a fill value outside it, and
normalizing each row segment with ``normalize.normalize_row`` (vectorized arithmetic
proven equal to the table, or the table itself) writes every output element once: no
padded canvas, no cropped copy, no float intermediate.
"""

from __future__ import annotations

import numba
import numpy as np

from .normalize import arithmetic, normalize_into


@numba.njit(nogil=True, cache=True)
def lut_window_chw(img, y0, x0, coef, lut, fill, out):
    """``out[c, y, x] = lut[c, img[y0 + y, x0 + x, c]]``, and ``lut[c, fill[c]]`` where
    ``(y0 + y, x0 + x)`` falls outside ``img``. ``img`` uint8 [H, W, 3] (or Pillow's
    RGBX [H, W, 4], read in place); ``coef`` is
    ``normalize.arithmetic(lut)``; ``fill`` uint8 [3]; ``out`` float32 [3, h, w],
    possibly a view into a larger tensor; ``y0``/``x0`` may be negative."""
    h_in, w_in, _ = img.shape
    _, h, w = out.shape
    xa = min(max(-x0, 0), w)  # first output column inside the image
    xb = max(min(w_in - x0, w), xa)  # one past the last
    line = np.empty((3, w), np.float32)
    for y in range(h):
        sy = y0 + y
        inside = 0 <= sy < h_in
        for c in range(3):
            pad = lut[c, fill[c]]
            orow = out[c, y]
            for x in range(xa if inside else w):
                orow[x] = pad
            if inside:
                for x in range(xb, w):
                    orow[x] = pad
        if inside and xb > xa:
            step = img.shape[2]
            normalize_into(img[sy].reshape(-1)[step * (x0 + xa):], xb - xa, coef, lut, line, out, y, xa, step)


@numba.njit(nogil=True, cache=True)
def lut_tiles_chw(img, top, left, rows, cols, coef, lut, fill, out):
    """Place ``img`` at (``top``, ``left``) on a ``fill`` canvas of ``rows`` x ``cols``
    tiles and write the tiles in raster order: ``out[t]`` float32 [3, th, tw]."""
    th, tw = out.shape[2], out.shape[3]
    for r in range(rows):
        for q in range(cols):
            lut_window_chw(img, r * th - top, q * tw - left, coef, lut, fill, out[r * cols + q])


def _check(img: np.ndarray, lut: np.ndarray, out: np.ndarray, ndim: int) -> None:
    if img.ndim != 3 or img.shape[2] not in (3, 4) or img.dtype != np.uint8:
        raise ValueError("expected a uint8 [H, W, 3] image (or RGBX [H, W, 4])")
    if out.dtype != np.float32 or out.ndim != ndim or out.shape[ndim - 3] != 3 or out.strides[-1] != 4:
        raise ValueError(f"out must be float32 with 3 channels and contiguous rows, got {out.dtype} {out.shape}")
    if lut.dtype != np.float32 or lut.shape[0] < 3 or lut.shape[1] != 256:
        raise ValueError("lut must be float32 [C, 256]")


def _fill(fill, channels: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(fill, dtype=np.uint8), (channels,)).copy()


def window_chw(img: np.ndarray, y0: int, x0: int, lut: np.ndarray, out: np.ndarray, fill=0) -> np.ndarray:
    """Python entry for ``lut_window_chw``: checks dtypes and shapes; ``fill`` is one
    uint8 value or one per channel."""
    _check(img, lut, out, 3)
    lut_window_chw(np.ascontiguousarray(img), int(y0), int(x0), arithmetic(lut), lut, _fill(fill, 3), out)
    return out


def tiles_chw(
    img: np.ndarray, top: int, left: int, rows: int, cols: int, lut: np.ndarray, out: np.ndarray, fill=0
) -> np.ndarray:
    """Python entry for ``lut_tiles_chw``: ``out`` float32 [rows*cols, C, th, tw]."""
    _check(img, lut, out, 4)
    if out.shape[0] != rows * cols:
        raise ValueError(f"out holds {out.shape[0]} tiles, need {rows * cols}")
    lut_tiles_chw(
        np.ascontiguousarray(img), int(top), int(left), int(rows), int(cols), arithmetic(lut), lut, _fill(fill, 3), out
    )
    return out


def warmup() -> None:
    """Compile (or load from cache) both kernels for contiguous and strided outputs."""
    img = np.zeros((5, 7, 3), np.uint8)
    lut = np.zeros((3, 256), np.float32)
    window_chw(img, -1, 2, lut, np.empty((3, 4, 4), np.float32))
    big = np.empty((3, 3, 6, 6), np.float32)
    window_chw(img, 0, 0, lut, big[1, :, :4, :4])
    tiles_chw(img, 1, 1, 1, 2, lut, np.empty((2, 3, 4, 4), np.float32))
    tiles_chw(img, 1, 1, 1, 2, lut, big[1:])
