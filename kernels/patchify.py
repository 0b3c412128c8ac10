"""Fused normalize + patchify into merge-block-major patch rows after a Pillow-exact resize.

The resize produces a small uint8 image (an eighth of the output's bytes with two
temporal copies: 3 bytes per pixel in, 2 x 3 float32 out).
Per band of ``merge`` grid rows, each image row is normalized once by
``normalize.normalize_row`` (vectorized arithmetic proven equal to the table, or the
table itself) into planar rows that stay in cache; the output rows, which for a band
are one contiguous stretch, are then written in memory order from patch-wide runs of
those rows, the temporal copies from the same run. Every output element is written
once and the stores stream. Bit-equal to the unfused chain (Pillow resize, HF rescale
+ normalize, HF patchify reshape/transpose).
"""

from __future__ import annotations

import functools

import numba
import numpy as np

from . import resample_pil
from .normalize import arithmetic, copy_run, normalize_row


@functools.lru_cache(maxsize=None)
def _specialized(patch: int, merge: int, temporal: int):
    """A kernel with the geometry baked in as constants, so LLVM turns the patch-wide
    moves and the block copies into straight vector code."""
    pp = patch * patch
    band = patch * merge

    @numba.njit(nogil=True, cache=True)
    def kernel(img, coef, lut, out):
        w, step = img.shape[1], img.shape[2]
        gw = w // patch
        rows = np.empty((merge, 3, patch, w), np.float32)  # one band, planar, normalized
        r = 0
        for bi in range(img.shape[0] // band):
            for mh in range(merge):
                for py in range(patch):
                    src = img[(bi * merge + mh) * patch + py].reshape(-1)
                    normalize_row(src, w, coef, lut, rows[mh, 0, py], rows[mh, 1, py], rows[mh, 2, py], step)
            for bj in range(gw // merge):
                for mh in range(merge):
                    for mw in range(merge):
                        orow = out[r]
                        r += 1
                        x0 = (bj * merge + mw) * patch
                        for c in range(3):
                            for t in range(temporal):
                                o = (c * temporal + t) * pp
                                for py in range(patch):
                                    copy_run(orow, o + py * patch, rows[mh, c, py], x0, patch)

    return kernel


def lut_patchify(img: np.ndarray, lut: np.ndarray, out: np.ndarray, patch: int, merge: int, temporal: int) -> None:
    """uint8 [H, W, 3] (or Pillow's RGBX [H, W, 4]) -> ``out`` float32
    [gh*gw, 3*temporal*patch*patch].

    Rows are merge-block-major: block (bi, bj), then sub-patch (mh, mw). Columns are
    (c, t, py, px); the temporal copies repeat the frame.
    """
    lut = np.ascontiguousarray(lut, dtype=np.float32)
    _specialized(int(patch), int(merge), int(temporal))(np.ascontiguousarray(img), arithmetic(lut), lut, out)


def resize_normalize_patchify(
    rgb: np.ndarray,
    out_h: int,
    out_w: int,
    resample: int,
    lut: np.ndarray,
    patch: int,
    merge: int,
    temporal: int,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """uint8 [H, W, 3] (or RGBX [H, W, 4], see ``resample_pil.resize_rgb``) -> float32
    [gh*gw, 3*temporal*patch*patch], rows merge-block-major and columns (c, t, py, px) as
    in ``lut_patchify``.

    ``out_h``/``out_w`` must be multiples of ``patch*merge``. ``out`` may be a slot of a
    larger preallocated batch tensor so the rows land in place.
    """
    if rgb.ndim != 3 or rgb.shape[2] not in (3, 4) or rgb.dtype != np.uint8:
        raise ValueError("expected an RGB uint8 [H, W, 3] or RGBX [H, W, 4] array")
    if out_h % (patch * merge) or out_w % (patch * merge) or out_h <= 0 or out_w <= 0:
        raise ValueError("target size must be a positive multiple of patch*merge")
    rows = (out_h // patch) * (out_w // patch)
    cols = 3 * temporal * patch * patch
    if out is None:
        out = np.empty((rows, cols), dtype=np.float32)
    elif out.shape != (rows, cols) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous float32 {(rows, cols)}, got {out.dtype} {out.shape}")
    if rgb.shape[:2] != (out_h, out_w):
        img = resample_pil.resize_rgb(rgb, out_h, out_w, resample)
    else:
        img = np.ascontiguousarray(rgb)  # RGBX stays RGBX: the kernel reads either
    lut_patchify(img, np.ascontiguousarray(lut, dtype=np.float32), out, patch, merge, temporal)
    return out
