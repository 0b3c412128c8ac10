"""Fused normalize + Qwen patchify after a Pillow-exact resize.

The resize produces a small uint8 image (an eighth of the output's bytes for Qwen);
one pass then walks the float32 output in memory order, looking each value up in the
per-channel normalize table, so every output element is written exactly once and the
stores stream. Bit-equal to the unfused chain (Pillow resize, HF rescale + normalize,
HF patchify reshape/transpose).
"""

from __future__ import annotations

import functools

import numba
import numpy as np

from . import resample_pil


@functools.lru_cache(maxsize=None)
def _specialized(patch: int, merge: int, temporal: int):
    """A kernel with the geometry baked in as constants: LLVM then unrolls the short
    patch loops, which is ~3x faster than passing them as arguments."""
    pp = patch * patch
    mm = merge * merge

    @numba.njit(nogil=True, cache=True)
    def kernel(img, lut, out):
        bw = img.shape[1] // patch // merge
        for r in range(out.shape[0]):
            block = r // mm
            sub = r - block * mm
            bi = block // bw
            bj = block - bi * bw
            mh = sub // merge
            mw = sub - mh * merge
            y0 = (bi * merge + mh) * patch
            x0 = (bj * merge + mw) * patch
            orow = out[r]
            for c in range(3):
                table = lut[c]
                base = c * temporal * pp
                for py in range(patch):
                    line = img[y0 + py]
                    o = base + py * patch
                    for px in range(patch):
                        v = table[line[x0 + px, c]]
                        for t in range(temporal):
                            orow[o + t * pp + px] = v

    return kernel


def lut_patchify(img: np.ndarray, lut: np.ndarray, out: np.ndarray, patch: int, merge: int, temporal: int) -> None:
    """uint8 [H, W, 3] -> ``out`` float32 [gh*gw, 3*temporal*patch*patch].

    Rows are merge-block-major: block (bi, bj), then sub-patch (mh, mw). Columns are
    (c, t, py, px); the temporal copies repeat the frame.
    """
    _specialized(int(patch), int(merge), int(temporal))(img, lut, out)


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
    """uint8 [H, W, 3] -> float32 [gh*gw, 3*temporal*patch*patch] in HF Qwen2-VL order.

    ``out_h``/``out_w`` must be multiples of ``patch*merge``. ``out`` may be a slot of a
    larger preallocated batch tensor so the rows land in place.
    """
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError("expected an RGB uint8 [H, W, 3] array")
    if out_h % (patch * merge) or out_w % (patch * merge) or out_h <= 0 or out_w <= 0:
        raise ValueError("target size must be a positive multiple of patch*merge")
    rows = (out_h // patch) * (out_w // patch)
    cols = 3 * temporal * patch * patch
    if out is None:
        out = np.empty((rows, cols), dtype=np.float32)
    elif out.shape != (rows, cols) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous float32 {(rows, cols)}, got {out.dtype} {out.shape}")
    img = np.ascontiguousarray(rgb)
    if img.shape[:2] != (out_h, out_w):
        img = resample_pil.resize(img, out_h, out_w, resample)
    lut_patchify(img, np.ascontiguousarray(lut, dtype=np.float32), out, patch, merge, temporal)
    return out
