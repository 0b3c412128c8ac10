"""Fused normalize + patchify into merge-block-major patch rows after a Pillow-exact resize.

The resize produces a small uint8 image (an eighth of the output's bytes with two
temporal copies: 3 bytes per pixel in, 2 x 3 float32 out).
Per band of ``merge`` grid rows, each image row is normalized once by
``normalize.normalize_row`` (vectorized arithmetic proven equal to the table, or the
table itself) into planar rows that stay in cache; the output rows, which for a band
are one contiguous stretch, are then written in memory order from patch-wide runs of
those rows, the temporal copies from the same run. Every output element is written
once. A large float32 output (``normalize.streams``) is assembled one merge block
(merge**2 rows) at a time in a small buffer and written to memory with streaming
stores. Bit-equal to the unfused chain (Pillow resize, HF rescale + normalize, HF
patchify reshape/transpose). A uint8 ``out`` gets the resized pixels themselves (raw,
neither rescaled nor normalized), laid out the same way (never streamed).
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np

from . import resample_pil
from .normalize import OUT_DTYPES, copy_run, normalize_row, store_fence, stream_run, streams, tables


@numba.njit(nogil=True, cache=True)
def write_band(rows, alias, gw, patch, merge, temporal, flat, stage, r, stream):
    """Write one band's output rows (its merge blocks, in memory order) from its normalized
    (or raw) planar rows ``rows[f, mh, c, py, x]``, temporal slot t taking frame
    ``alias[t]`` (an image: frame 0 in every slot); each block through ``stage`` with
    streaming stores when ``stream``. Returns the next output row.

    Called, not inlined, with the geometry (``patch``, ``merge``, ``temporal``) as
    constants: numba compiles it once per geometry and dtype for all the kernels that
    call it, with those constants baked in (straight vector code for the moves)."""
    pp = patch * patch
    width = 3 * temporal * pp
    block = merge * merge * width
    for bj in range(gw // merge):
        for mh in range(merge):
            for mw in range(merge):
                base = (mh * merge + mw) * width if stream else (r + mh * merge + mw) * width
                x0 = (bj * merge + mw) * patch
                for c in range(3):
                    for t in range(temporal):
                        o = base + (c * temporal + t) * pp
                        f = alias[t]
                        for py in range(patch):
                            if stream:
                                copy_run(stage, o + py * patch, rows[f, mh, c, py], x0, patch)
                            else:
                                copy_run(flat, o + py * patch, rows[f, mh, c, py], x0, patch)
        if stream:
            stream_run(flat, r * width, stage, 0, block)
        r += merge * merge
    return r


@numba.njit(nogil=True, cache=True, inline="always")
def _write_bands(img, bands, patch, merge, temporal, coef, lut, flat, rows, stage, r, stream):
    """Normalize + patchify the first ``bands`` bands (``patch * merge`` rows each) of
    ``img`` into the output rows from ``r`` on (``flat``: the output, flat); returns the
    next output row. ``rows`` ([1, merge, 3, patch, W]) and ``stage`` are scratch (see
    ``_specialized``); the temporal copies repeat the image."""
    w, step = img.shape[1], img.shape[2]
    alias = np.zeros(temporal, np.int64)
    for bi in range(bands):
        for mh in range(merge):
            for py in range(patch):
                src = img[(bi * merge + mh) * patch + py].reshape(-1)
                normalize_row(src, w, coef, lut, rows[0, mh, 0, py], rows[0, mh, 1, py], rows[0, mh, 2, py], step)
        r = write_band(rows, alias, w // patch, patch, merge, temporal, flat, stage, r, stream)
    return r

@numba.njit(nogil=True, cache=True, inline="always")
def _rows_of(bv, y0, y1):
    """The source rows [lo, hi) that output rows [y0, y1) read."""
    lo, hi = bv[y0, 0], bv[y0, 0] + bv[y0, 1]
    for y in range(y0, y1):
        lo = min(lo, bv[y, 0])
        hi = max(hi, bv[y, 0] + bv[y, 1])
    return lo, hi


@numba.njit(nogil=True, cache=True, inline="always")
def window_rows(bv, out_h, group):
    """Rows a window of horizontally resampled source rows needs (``slide_window``) for
    output rows resized ``group`` at a time."""
    cap = 16
    for y0 in range(0, out_h, group):
        lo, hi = _rows_of(bv, y0, min(y0 + group, out_h))
        cap = max(cap, hi - lo + 16)
    return cap


@numba.njit(nogil=True, cache=True)
def slide_window(win, src, wlo, whi, bv, y0, y1, bh, kh):
    """Move the window ``win`` (holding the horizontal pass of source rows [wlo, whi)) on
    to the rows output rows [y0, y1) read: rows passed are dropped, new ones resampled
    16 at a time. Returns the new (wlo, whi)."""
    lo, hi = _rows_of(bv, y0, y1)
    if lo >= whi:
        wlo = whi = lo
    elif lo > wlo:
        for k in range(whi - lo):  # keep rows [lo, whi), moved to the front
            win[k] = win[lo - wlo + k]
        wlo = lo
    if hi > whi:
        upto = min(whi + 16 * ((hi - whi + 15) // 16), src.shape[0], wlo + win.shape[0])
        resample_pil.horizontal_pass(src, win[whi - wlo:upto - wlo], np.int64(whi), bh, kh)
        whi = upto
    return wlo, whi


@functools.lru_cache(maxsize=None)
def _specialized(patch: int, merge: int, temporal: int):
    """Kernels with the geometry baked in as constants, so LLVM turns the patch-wide
    moves and the block copies into straight vector code: ``kernel`` patchifies a whole
    (resized) image; ``fused`` resizes and patchifies a group of bands at a time. Each
    compiles per ``out`` dtype: float32 (normalized) or uint8 (raw); the scratch rows take
    that dtype."""
    band = patch * merge
    group = group_rows(patch, merge)

    @numba.njit(nogil=True, cache=True)
    def kernel(img, coef, lut, out, stream=False):
        flat = out.reshape(out.size)
        rows = np.empty((1, merge, 3, patch, img.shape[1]), out.dtype)  # one band, planar, normalized (or raw)
        stage = np.empty(merge * merge * out.shape[1], out.dtype)  # streaming: one merge block, then out
        _write_bands(img, img.shape[0] // band, patch, merge, temporal, coef, lut, flat, rows, stage, 0, stream)
        if stream:
            store_fence()

    @numba.njit(nogil=True, cache=True)
    def fused(src, out_h, out_w, bh, kh, bv, kv, h_first, coef, lut, out, stream):
        """``kernel`` of ``resample_pil.separable(src, out_h, out_w, ...)`` (3 channels
        out), ``group`` rows at a time: the passes' intermediate rows stay in cache."""
        in_h, in_w, sp = src.shape
        flat = out.reshape(out.size)
        rows = np.empty((1, merge, 3, patch, out_w), out.dtype)
        stage = np.empty(merge * merge * out.shape[1], out.dtype)
        res = np.empty((min(group, out_h), out_w, 3), np.uint8)
        r = 0
        if out_w != in_w and out_h != in_h and h_first:
            # a window of horizontally resampled source rows, [wlo, whi), computed as
            # the groups reach them and dropped once passed
            win = np.empty((window_rows(bv, out_h, group), out_w, 3), np.uint8)
            wlo = whi = 0
            for y0 in range(0, out_h, group):
                y1 = min(y0 + group, out_h)
                wlo, whi = slide_window(win, src, wlo, whi, bv, y0, y1, bh, kh)
                shifted = bv[y0:y1].copy()
                for y in range(y1 - y0):
                    shifted[y, 0] -= wlo
                resample_pil.vertical_pass(win[:whi - wlo], res[:y1 - y0], shifted, kv[y0:y1])
                r = _write_bands(res, (y1 - y0) // band, patch, merge, temporal, coef, lut, flat, rows, stage, r,
                                 stream)
        else:  # one axis, or vertical first
            vt = np.empty((min(group, out_h), in_w, sp), np.uint8)
            for y0 in range(0, out_h, group):
                y1 = min(y0 + group, out_h)
                n = y1 - y0
                if out_w == in_w:
                    resample_pil.vertical_pass(src, res[:n], bv[y0:y1], kv[y0:y1])
                elif out_h == in_h:
                    resample_pil.horizontal_pass(src, res[:n], np.int64(y0), bh, kh)
                else:
                    resample_pil.vertical_pass(src, vt[:n], bv[y0:y1], kv[y0:y1])
                    resample_pil.horizontal_pass(vt[:n], res[:n], np.int64(0), bh, kh)
                r = _write_bands(res, n // band, patch, merge, temporal, coef, lut, flat, rows, stage, r, stream)
        if stream:
            store_fence()

    return kernel, fused


def _check_out(out: np.ndarray) -> None:
    if out.dtype not in OUT_DTYPES or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous float32 or uint8, got {out.dtype}")


def lut_patchify(img: np.ndarray, lut: np.ndarray, out: np.ndarray, patch: int, merge: int, temporal: int) -> None:
    """uint8 [H, W, 3] (or Pillow's RGBX [H, W, 4]) -> ``out`` float32
    [gh*gw, 3*temporal*patch*patch] (``lut[c, value]``), or uint8 (the pixels as they
    are; ``lut`` not read).

    Rows are merge-block-major: block (bi, bj), then sub-patch (mh, mw). Columns are
    (c, t, py, px); the temporal copies repeat the frame.
    """
    _check_out(out)
    coef, lut = tables(lut, out.dtype)
    _specialized(int(patch), int(merge), int(temporal))[0](np.ascontiguousarray(img), coef, lut, out, streams(out))


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
    dtype=None,
) -> np.ndarray:
    """uint8 [H, W, 3] (or RGBX [H, W, 4], see ``resample_pil.resize_rgb``) -> float32
    [gh*gw, 3*temporal*patch*patch], rows merge-block-major and columns (c, t, py, px) as
    in ``lut_patchify``; uint8 (``dtype`` or a uint8 ``out``): the resized pixels, raw.

    ``out_h``/``out_w`` must be multiples of ``patch*merge``. ``out`` may be a slot of a
    larger preallocated batch tensor so the rows land in place; ``dtype`` (float32 when
    neither is given) must then be its dtype.
    """
    if rgb.ndim != 3 or rgb.shape[2] not in (3, 4) or rgb.dtype != np.uint8:
        raise ValueError("expected an RGB uint8 [H, W, 3] or RGBX [H, W, 4] array")
    if out_h % (patch * merge) or out_w % (patch * merge) or out_h <= 0 or out_w <= 0:
        raise ValueError("target size must be a positive multiple of patch*merge")
    rows = (out_h // patch) * (out_w // patch)
    cols = 3 * temporal * patch * patch
    if dtype is None:
        dtype = np.float32 if out is None else out.dtype
    dtype = np.dtype(dtype)
    if dtype not in OUT_DTYPES:
        raise ValueError(f"dtype must be float32 or uint8, got {dtype}")
    if out is None:
        out = np.empty((rows, cols), dtype=dtype)
    elif out.shape != (rows, cols) or out.dtype != dtype or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous {dtype} {(rows, cols)}, got {out.dtype} {out.shape}")
    if rgb.shape[:2] == (out_h, out_w):
        lut_patchify(np.ascontiguousarray(rgb), lut, out, patch, merge, temporal)  # RGBX stays RGBX: either is read
    elif resample == resample_pil.NEAREST:
        lut_patchify(resample_pil.resize_rgb(rgb, out_h, out_w, resample), lut, out, patch, merge, temporal)
    else:
        in_h, in_w = rgb.shape[:2]
        bh, kh = resample_pil.coeffs(in_w, out_w, resample) if out_w != in_w else _NO_COEFFS
        bv, kv = resample_pil.coeffs(in_h, out_h, resample) if out_h != in_h else _NO_COEFFS
        resampled_patchify(rgb, out_h, out_w, bh, kh, bv, kv, resample_pil.horizontal_first(in_h, in_w, out_h, out_w),
                           lut, out, patch, merge, temporal)
    return out


_NO_COEFFS = (np.zeros((0, 2), np.int32), np.zeros((0, 1), np.int32))
#: A vertical-first resize goes band group by band group while a group's two intermediate
#: images (after the vertical pass, after the horizontal one) fit in this much (half of a
#: 2 MiB L2): 2-4% faster than pass by pass at 1024x768 here, even at 640x480-800x600;
#: wider images went from 3% faster to 5% slower from one process to the next, so they go
#: pass by pass.
VFIRST_GROUP_BYTES = 1 << 20


def group_rows(patch: int, merge: int) -> int:
    """Rows resized per group: whole bands, and whole 16-row blocks of the horizontal pass."""
    band = patch * merge
    return band * (16 // math.gcd(band, 16))


def resampled_patchify(rgb: np.ndarray, out_h: int, out_w: int, bh, kh, bv, kv, h_first: bool, lut: np.ndarray,
                       out: np.ndarray, patch: int, merge: int, temporal: int) -> None:
    """``lut_patchify`` of the separable resample of ``rgb`` (uint8 [H, W, 3] or RGBX
    [H, W, 4]) to ``out_h`` x ``out_w`` with the given axes' coefficients (the layout of
    ``resample_pil.coeffs``; an axis that keeps its size is not read) and pass order, as
    ``resample_pil.separable`` runs it, without the resized image ever existing whole: a
    few bands' rows at a time go through both passes and into ``out`` while in cache.
    A vertical-first resize of a wide image (``VFIRST_GROUP_BYTES``) goes pass by pass
    over the whole image instead. ``out`` float32 or uint8, as there."""
    _check_out(out)
    in_h, in_w = rgb.shape[:2]
    group_bytes = group_rows(patch, merge) * (in_w * rgb.shape[2] + out_w * 3)
    if not h_first and out_h != in_h and out_w != in_w and group_bytes > VFIRST_GROUP_BYTES:
        resized = resample_pil.separable(np.ascontiguousarray(rgb), int(out_h), int(out_w), np.ascontiguousarray(bh),
                                         np.ascontiguousarray(kh), np.ascontiguousarray(bv), np.ascontiguousarray(kv),
                                         3, False)
        lut_patchify(resized, lut, out, patch, merge, temporal)
        return
    _specialized(int(patch), int(merge), int(temporal))[1](
        np.ascontiguousarray(rgb), int(out_h), int(out_w), np.ascontiguousarray(bh), np.ascontiguousarray(kh),
        np.ascontiguousarray(bv), np.ascontiguousarray(kv), bool(h_first), *tables(lut, out.dtype), out, streams(out))
