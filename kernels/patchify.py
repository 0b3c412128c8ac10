"""Fused resize -> normalize -> Qwen patchify that writes each output element once.

The last resampling pass is computed one output row at a time into a small uint8 row
buffer, looked up in the normalize table and stored straight into its patch rows, so
the resized image and the normalized image never exist as whole arrays. The result is
bit-equal to the unfused chain (Pillow-exact resize, table normalize, HF patchify).
"""

from __future__ import annotations

import numba
import numpy as np

from . import resample_pil

_HALF = 1 << 21  # Pillow's rounding offset for PRECISION_BITS = 22


@numba.njit(nogil=True, cache=True, inline="always")
def _clip8(acc):
    v = acc >> 22
    if v < 0:
        return 0
    if v > 255:
        return 255
    return v


@numba.njit(nogil=True, cache=True)
def _row_vertical(src, y, bounds, kk, acc, row):
    """Output row ``y`` of a vertical pass over ``src`` [H, W, C] into ``row`` [W*C]."""
    n = row.shape[0]
    for j in range(n):
        acc[j] = _HALF
    ymin = bounds[y, 0]
    taps = bounds[y, 1]
    width = src.shape[1]
    channels = src.shape[2]
    for i in range(taps):
        w = kk[y, i]
        line = src[ymin + i]
        for x in range(width):
            for c in range(channels):
                acc[x * channels + c] += np.int32(line[x, c]) * w
    for j in range(n):
        row[j] = _clip8(acc[j])


@numba.njit(nogil=True, cache=True)
def _row_horizontal(src, y, bounds, kk, row):
    """Output row ``y`` of a horizontal pass over ``src`` [H, W, C] into ``row`` [out_w*C]."""
    line = src[y]
    channels = src.shape[2]
    out_w = bounds.shape[0]
    for x in range(out_w):
        xmin = bounds[x, 0]
        taps = bounds[x, 1]
        for c in range(channels):
            acc = np.int32(_HALF)
            for i in range(taps):
                acc += np.int32(line[xmin + i, c]) * kk[x, i]
            row[x * channels + c] = _clip8(acc)


@numba.njit(nogil=True, cache=True)
def _row_copy(src, y, row):
    line = src[y]
    channels = src.shape[2]
    for x in range(src.shape[1]):
        for c in range(channels):
            row[x * channels + c] = line[x, c]


@numba.njit(nogil=True, cache=True)
def _scatter_row(row, y, lut, out, width, patch, merge, temporal):
    """Store output image row ``y`` (uint8, HWC) into its Qwen patch rows.

    Rows of ``out`` are merge-block-major: block (bi, bj), then sub-patch (mh, mw).
    Columns are (c, t, py, px); every temporal copy repeats the frame.
    """
    gw = width // patch
    bw = gw // merge
    gy = y // patch
    py = y - gy * patch
    bi = gy // merge
    mh = gy - bi * merge
    pp = patch * patch
    for gx in range(gw):
        bj = gx // merge
        mw = gx - bj * merge
        r = ((bi * bw + bj) * merge + mh) * merge + mw
        x0 = gx * patch
        for c in range(3):
            for t in range(temporal):
                base = (c * temporal + t) * pp + py * patch
                for px in range(patch):
                    out[r, base + px] = lut[c, row[(x0 + px) * 3 + c]]


@numba.njit(nogil=True, cache=True)
def _fused(src, mode, bounds, kk, lut, out, out_h, out_w, patch, merge, temporal):
    """mode 0: copy rows, 1: final pass vertical, 2: final pass horizontal."""
    row = np.empty(out_w * 3, dtype=np.uint8)
    acc = np.empty(out_w * 3, dtype=np.int32)
    for y in range(out_h):
        if mode == 0:
            _row_copy(src, y, row)
        elif mode == 1:
            _row_vertical(src, y, bounds, kk, acc, row)
        else:
            _row_horizontal(src, y, bounds, kk, row)
        _scatter_row(row, y, lut, out, out_w, patch, merge, temporal)


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

    ``out_h``/``out_w`` must be multiples of ``patch*merge``. ``out`` may be a view into
    a larger preallocated batch tensor so the rows land in place.
    """
    in_h, in_w = rgb.shape[:2]
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError("expected an RGB uint8 [H, W, 3] array")
    if out_h % (patch * merge) or out_w % (patch * merge):
        raise ValueError("target size must be a multiple of patch*merge")
    rows = (out_h // patch) * (out_w // patch)
    cols = 3 * temporal * patch * patch
    if out is None:
        out = np.empty((rows, cols), dtype=np.float32)
    elif out.shape != (rows, cols) or out.dtype != np.float32:
        raise ValueError(f"out must be float32 {(rows, cols)}, got {out.dtype} {out.shape}")
    rgb = np.ascontiguousarray(rgb)
    lut = np.ascontiguousarray(lut, dtype=np.float32)
    if resample == resample_pil.NEAREST and (out_h, out_w) != (in_h, in_w):
        # Nearest has no filter passes to fuse; pick the pixels, then copy rows.
        rgb = resample_pil.resize(rgb, out_h, out_w, resample)
        in_h, in_w = out_h, out_w
    need_h = out_w != in_w
    need_v = out_h != in_h
    dummy_b = np.zeros((1, 2), np.int32)
    dummy_k = np.zeros((1, 1), np.int32)
    if not need_h and not need_v:
        _fused(rgb, 0, dummy_b, dummy_k, lut, out, out_h, out_w, patch, merge, temporal)
    elif need_v and not need_h:
        vb, vk = resample_pil.coeffs(in_h, out_h, resample)
        _fused(rgb, 1, vb, vk, lut, out, out_h, out_w, patch, merge, temporal)
    elif need_h and not need_v:
        hb, hk = resample_pil.coeffs(in_w, out_w, resample)
        _fused(rgb, 2, hb, hk, lut, out, out_h, out_w, patch, merge, temporal)
    else:
        hb, hk = resample_pil.coeffs(in_w, out_w, resample)
        vb, vk = resample_pil.coeffs(in_h, out_h, resample)
        if resample_pil.horizontal_first(in_h, in_w, out_h, out_w):
            # Only the source rows the vertical pass reads are resampled horizontally.
            first = int(vb[0, 0])
            last = int(vb[-1, 0] + vb[-1, 1])
            tmp = np.empty((last - first, out_w, 3), dtype=np.uint8)
            resample_pil.resample_horizontal(rgb, tmp, first, hb, hk)
            vb = vb.copy()
            vb[:, 0] -= first
            _fused(tmp, 1, vb, vk, lut, out, out_h, out_w, patch, merge, temporal)
        else:
            tmp = np.empty((out_h, in_w, 3), dtype=np.uint8)
            resample_pil.resample_vertical(rgb, tmp, vb, vk)
            _fused(tmp, 2, hb, hk, lut, out, out_h, out_w, patch, merge, temporal)
    return out
