"""float32 bicubic resize, bit-exact with torch's CPU ``F.interpolate(mode="bicubic",
align_corners=False, antialias=False)``.

This is the non-antialiased float resize some processors apply to an already normalized
image (a downscaled overview of the whole picture). torch's generic kernel
(``UpSampleKernel.cpp``: ``HelperInterpCubic`` weights, ``Interpolate`` recursion,
height outer, width inner) is compiled with floating-point contraction, so its x86-64
builds (AVX2 / AVX512 dispatch) fuse multiply-adds in fixed places; matching them needs
the same fused operations:

* source coordinate ``fma(scale, i + 0.5, -0.5)``, ``scale = float32(in) / out``;
* Keys weights (A = -0.75) for ``t``, ``1 - t`` and their ``+ 1`` neighbours, with
  the first two steps of ``((A x - 5A) x + 8A) x - 4A`` fused and the last one not,
  and the last step of ``((A + 2) x - (A + 3)) x x + 1`` not fused (its first step
  is taken fused: no size pair up to 200 x 200 reaches a ``t`` where that matters);
* per axis ``fma(v0, w0, v1 * w1)``, then ``fma(v2, w2, .)``, ``fma(v3, w3, .)``:
  first along the width for each of the 4 source rows, then across them.

Taps are clamped to the border. No clamping of values, float32 throughout.
"""

from __future__ import annotations

import numba
import numpy as np

from .simd_ir import fma32

A = np.float32(-0.75)


@numba.njit(nogil=True, cache=True)
def source_index(scale, i):
    """torch's ``area_pixel_compute_source_index`` (align_corners=False) as its x86 builds
    compile it: ``fma(scale, i + 0.5, -0.5)`` in float32, rounded once."""
    return fma32(scale, np.float32(i) + np.float32(0.5), np.float32(-0.5))


@numba.njit(nogil=True, cache=True)
def _cubic1(x):
    """Keys for |x| <= 1: ``((A + 2) x - (A + 3)) x x + 1``."""
    a = np.float32(-0.75)
    p = fma32(a + np.float32(2.0), x, -(a + np.float32(3.0)))
    return (p * x) * x + np.float32(1.0)


@numba.njit(nogil=True, cache=True)
def _cubic2(x):
    """Keys for 1 < |x| < 2: ``((A x - 5A) x + 8A) x - 4A``."""
    a = np.float32(-0.75)
    p = fma32(a, x, np.float32(-5.0) * a)
    q = fma32(p, x, np.float32(8.0) * a)
    return q * x - np.float32(4.0) * a


@numba.njit(nogil=True, cache=True)
def cubic_taps(in_size, out_size):
    """(int64 [out, 4] clamped source indices, float32 [out, 4] weights) for one axis."""
    idx = np.empty((out_size, 4), np.int64)
    w = np.empty((out_size, 4), np.float32)
    scale = np.float32(in_size) / np.float32(out_size)
    for i in range(out_size):
        src = source_index(scale, i)
        f = np.floor(src)
        t = src - f
        t2 = np.float32(1.0) - t
        w[i, 0] = _cubic2(t + np.float32(1.0))
        w[i, 1] = _cubic1(t)
        w[i, 2] = _cubic1(t2)
        w[i, 3] = _cubic2(t2 + np.float32(1.0))
        base = np.int64(f) - 1
        for k in range(4):
            idx[i, k] = min(max(base + k, 0), in_size - 1)
    return idx, w


@numba.njit(nogil=True, cache=True, inline="always")
def _taps4(v0, v1, v2, v3, w):
    return fma32(v3, w[3], fma32(v2, w[2], fma32(v0, w[0], v1 * w[1])))


@numba.njit(nogil=True, cache=True)
def _rows_read(iy, n):
    """bool [n]: which of ``n`` source rows the vertical taps ``iy`` read."""
    used = np.zeros(n, np.bool_)
    for y in range(iy.shape[0]):
        for k in range(4):
            used[iy[y, k]] = True
    return used


@numba.njit(nogil=True, cache=True)
def _across_rows(rows, iy, wy, plane):
    """The vertical pass: ``plane[y, x]`` (float32 [oh, ow]) from the width-resized source
    rows ``rows[iy[y, k], x]`` and the weights ``wy[y]``."""
    for y in range(iy.shape[0]):
        r0, r1, r2, r3 = rows[iy[y, 0]], rows[iy[y, 1]], rows[iy[y, 2]], rows[iy[y, 3]]
        wyy = wy[y]
        orow = plane[y]
        for x in range(rows.shape[1]):
            orow[x] = _taps4(r0[x], r1[x], r2[x], r3[x], wyy)


@numba.njit(nogil=True, cache=True)
def bicubic_chw(src, iy, wy, ix, wx, out):
    """``out[c, y, x]`` from float32 ``src`` [C, H, W] through the per-axis taps; ``out``
    float32 [C, oh, ow], possibly a view into a larger tensor. Each source row's pass
    along the width is computed once and reused by every output row that reads it."""
    channels, h_in = src.shape[0], src.shape[1]
    ow = ix.shape[0]
    used = _rows_read(iy, h_in)
    rows = np.empty((h_in, ow), np.float32)
    for c in range(channels):
        plane = src[c]
        for r in range(h_in):
            if not used[r]:
                continue
            line = plane[r]
            dst = rows[r]
            for x in range(ow):
                dst[x] = _taps4(line[ix[x, 0]], line[ix[x, 1]], line[ix[x, 2]], line[ix[x, 3]], wx[x])
        _across_rows(rows, iy, wy, out[c])


def resize_bicubic_f32(src: np.ndarray, out_h: int, out_w: int, out: np.ndarray | None = None) -> np.ndarray:
    """Python entry: float32 [C, H, W] -> float32 [C, out_h, out_w] (into ``out`` if given)."""
    if src.ndim != 3 or src.dtype != np.float32:
        raise ValueError("expected a float32 [C, H, W] array")
    if out is None:
        out = np.empty((src.shape[0], out_h, out_w), np.float32)
    if out.dtype != np.float32 or out.shape != (src.shape[0], out_h, out_w):
        raise ValueError(f"out must be float32 {(src.shape[0], out_h, out_w)}, got {out.dtype} {out.shape}")
    iy, wy = cubic_taps(src.shape[1], out_h)
    ix, wx = cubic_taps(src.shape[2], out_w)
    bicubic_chw(src, iy, wy, ix, wx, out)
    return out


@numba.njit(nogil=True, cache=True)
def bicubic_window_lut(img, top, left, lut, fill, iy, wy, ix, wx, out):
    """The bicubic resize of a canvas that is never built: ``img`` uint8 [H, W, C] placed
    at (``top``, ``left``) on a ``fill`` background, each value read through ``lut``
    (float32 [C, 256], the normalize table). ``iy``/``ix`` index the canvas; ``out``
    float32 [C, oh, ow]. A canvas row's pass along the width is the same for every output
    row that reads it, so each needed row is computed once (same operations, same bits)."""
    h_in, w_in, channels = img.shape
    ow = ix.shape[0]
    canvas_h = 0
    for y in range(iy.shape[0]):
        canvas_h = max(canvas_h, iy[y, 3] + 1)
    used = _rows_read(iy, canvas_h)
    cols = np.empty((ow, 4), np.int64)
    for x in range(ow):
        for k in range(4):
            sx = ix[x, k] - left
            cols[x, k] = sx if 0 <= sx < w_in else -1
    rows = np.empty((canvas_h, ow), np.float32)
    for c in range(channels):
        table = lut[c]
        pad = table[fill[c]]
        blank = np.empty(ow, np.float32)  # a row wholly outside the image
        for x in range(ow):
            blank[x] = _taps4(pad, pad, pad, pad, wx[x])
        for r in range(canvas_h):
            if not used[r]:
                continue
            dst = rows[r]
            sy = r - top
            if sy < 0 or sy >= h_in:
                dst[:] = blank
                continue
            line = img[sy]
            for x in range(ow):
                c0, c1, c2, c3 = cols[x, 0], cols[x, 1], cols[x, 2], cols[x, 3]
                v0 = table[line[c0, c]] if c0 >= 0 else pad
                v1 = table[line[c1, c]] if c1 >= 0 else pad
                v2 = table[line[c2, c]] if c2 >= 0 else pad
                v3 = table[line[c3, c]] if c3 >= 0 else pad
                dst[x] = _taps4(v0, v1, v2, v3, wx[x])
        _across_rows(rows, iy, wy, out[c])


def resize_canvas_bicubic(
    img: np.ndarray, top: int, left: int, canvas_h: int, canvas_w: int, lut: np.ndarray, out: np.ndarray, fill=0
) -> np.ndarray:
    """Python entry for ``bicubic_window_lut``: the canvas is ``canvas_h`` x ``canvas_w``;
    ``out`` float32 [C, oh, ow] (a slot view is fine); ``fill`` one uint8 or one per channel."""
    if img.ndim != 3 or img.dtype != np.uint8:
        raise ValueError("expected a uint8 [H, W, C] image")
    channels = img.shape[2]
    if out.dtype != np.float32 or out.ndim != 3 or out.shape[0] != channels:
        raise ValueError(f"out must be float32 [{channels}, oh, ow], got {out.dtype} {out.shape}")
    if lut.dtype != np.float32 or lut.shape[0] < channels or lut.shape[1] != 256:
        raise ValueError("lut must be float32 [C, 256]")
    iy, wy = cubic_taps(int(canvas_h), out.shape[1])
    ix, wx = cubic_taps(int(canvas_w), out.shape[2])
    fills = np.broadcast_to(np.asarray(fill, dtype=np.uint8), (channels,)).copy()
    bicubic_window_lut(np.ascontiguousarray(img), int(top), int(left), lut, fills, iy, wy, ix, wx, out)
    return out


def warmup() -> None:
    """Compile (or load from cache) both kernels for contiguous and strided (slot) outputs."""
    src = np.zeros((3, 9, 7), np.float32)
    big = np.zeros((2, 3, 4, 5), np.float32)
    resize_bicubic_f32(src, 4, 5)
    resize_bicubic_f32(src, 4, 5, big[1])
    img = np.zeros((5, 6, 3), np.uint8)
    lut = np.zeros((3, 256), np.float32)
    resize_canvas_bicubic(img, 1, 0, 9, 7, lut, np.empty((3, 4, 5), np.float32), fill=255)
    resize_canvas_bicubic(img, 0, 2, 9, 7, lut, big[0], fill=255)
