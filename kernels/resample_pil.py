"""Bit-exact numba reimplementation of Pillow 13's ``Image.resize`` for 8-bit images.

HF image processors resize with Pillow, so model inputs are only identical if the resize is
identical down to the last bit. This module reproduces Pillow 13.0's ``libImaging/Resample.c``
(separable convolution with 22-bit fixed-point coefficients, two passes, each pass rounding
to uint8) and, for NEAREST, the affine scale path of ``libImaging/Geometry.c``.

Images are HWC uint8 arrays. Supported channel counts:

* C=1 (mode "L") and C=3 (mode "RGB"): exact for all six filters.
* C=2 ("LA") and C=4 ("RGBA"): exact too; like ``Image.resize``, non-NEAREST filters
  premultiply colour by alpha, resample, then un-premultiply with Pillow's integer formulas.

The coefficient layout (``bounds[i] = (first source index, tap count)``,
``kk[i, :tap count]`` = int32 weights summing to about ``1 << 22``) is shared with fused
writers that run ``resample_horizontal`` and then do the second pass themselves.
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np

NEAREST, LANCZOS, BILINEAR, BICUBIC, BOX, HAMMING = 0, 1, 2, 3, 4, 5

_CONVOLUTION_FILTERS = frozenset((LANCZOS, BILINEAR, BICUBIC, BOX, HAMMING))

PRECISION_BITS = 22  # 32 - 8 - 2 in Resample.c
_HALF = 1 << (PRECISION_BITS - 1)
_ONE = float(1 << PRECISION_BITS)
# Resample.c writes the Hamming constants as float literals (0.54f, 0.46f) that C promotes
# to double; the promoted values differ from the double literals 0.54/0.46.
_HAMMING_A = float(np.float32(0.54))
_HAMMING_B = float(np.float32(0.46))


@numba.njit(nogil=True, cache=True)
def _sinc(x):
    if x == 0.0:
        return 1.0
    x = x * math.pi
    return math.sin(x) / x


@numba.njit(nogil=True, cache=True)
def _filter_weight(f, x):
    """The filter functions of Resample.c, with their exact comparison boundaries."""
    if f == BICUBIC:
        if x < 0.0:
            x = -x
        if x < 1.0:
            return ((-0.5 + 2.0) * x - (-0.5 + 3.0)) * x * x + 1
        if x < 2.0:
            return (((x - 5) * x + 8) * x - 4) * -0.5
        return 0.0
    if f == BILINEAR:
        if x < 0.0:
            x = -x
        if x < 1.0:
            return 1.0 - x
        return 0.0
    if f == LANCZOS:
        if -3.0 <= x and x < 3.0:
            return _sinc(x) * _sinc(x / 3)
        return 0.0
    if f == BOX:
        if x > -0.5 and x <= 0.5:
            return 1.0
        return 0.0
    # HAMMING
    if x < 0.0:
        x = -x
    if x == 0.0:
        return 1.0
    if x >= 1.0:
        return 0.0
    x = x * math.pi
    return math.sin(x) / x * (_HAMMING_A + _HAMMING_B * math.cos(x))


@numba.njit(nogil=True, cache=True)
def _support(f):
    if f == BOX:
        return 0.5
    if f == BICUBIC:
        return 2.0
    if f == LANCZOS:
        return 3.0
    return 1.0  # BILINEAR, HAMMING


@numba.njit(nogil=True, cache=True)
def _coeffs_nb(in_size, out_size, f):
    """precompute_coeffs + normalize_coeffs_8bpc for the box (0, in_size)."""
    # The box is float[4] in C: in1 - in0 is a float subtraction, then widened.
    in0 = np.float32(0.0)
    in1 = np.float32(in_size)
    scale = np.float64(in1 - in0) / out_size
    filterscale = scale
    if filterscale < 1.0:
        filterscale = 1.0
    support = _support(f) * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    bounds = np.empty((out_size, 2), np.int32)
    kk = np.zeros((out_size, ksize), np.int32)
    w = np.empty(ksize, np.float64)
    inv_filterscale = 1.0 / filterscale
    c0 = np.float64(in0)
    for xx in range(out_size):
        center = c0 + (xx + 0.5) * scale
        ww = 0.0
        xmin = int(center - support + 0.5)  # C (int) cast: truncation toward zero
        if xmin < 0:
            xmin = 0
        xmax = int(center + support + 0.5)
        if xmax > in_size:
            xmax = in_size
        xmax -= xmin
        for x in range(xmax):
            v = _filter_weight(f, (np.float64(x + xmin) - center + 0.5) * inv_filterscale)
            w[x] = v
            ww += v
        if ww != 0.0:
            for x in range(xmax):
                w[x] /= ww
        for x in range(xmax):
            v = w[x]
            if v < 0:
                kk[xx, x] = np.int32(int(-0.5 + v * _ONE))
            else:
                kk[xx, x] = np.int32(int(0.5 + v * _ONE))
        bounds[xx, 0] = xmin
        bounds[xx, 1] = xmax
    return bounds, kk


@functools.lru_cache(maxsize=64)
def _cached_coeffs(in_size: int, out_size: int, filter: int) -> tuple[np.ndarray, np.ndarray]:
    # Lanczos costs two libm sin() calls per tap (~0.5 ms for a 4000-pixel axis) and
    # requests repeat a handful of sizes. Callers of this cache must not mutate the arrays.
    return _coeffs_nb(in_size, out_size, filter)


def _check_axis(in_size: int, out_size: int, filter: int) -> None:
    if filter not in _CONVOLUTION_FILTERS:
        raise ValueError(f"no convolution coefficients for filter {filter!r}")
    if in_size < 1 or out_size < 1:
        raise ValueError(f"sizes must be positive, got {in_size} -> {out_size}")


def coeffs(in_size: int, out_size: int, filter: int) -> tuple[np.ndarray, np.ndarray]:
    """bounds int32[out_size, 2] = (xmin, n) and kk int32[out_size, ksize]: Pillow's 22-bit
    fixed-point coefficients for one axis (box = whole axis); taps past n are zero.
    Returns fresh arrays that the caller may modify."""
    in_size, out_size, filter = int(in_size), int(out_size), int(filter)
    _check_axis(in_size, out_size, filter)
    bounds, kk = _cached_coeffs(in_size, out_size, filter)
    return bounds.copy(), kk.copy()


def horizontal_first(in_h: int, in_w: int, out_h: int, out_w: int) -> bool:
    """Pillow 13's pass-order rule: vertical first only when height shrinks by more than
    twice as many pixels as width does."""
    return not ((in_h - out_h) > 0 and (in_h - out_h) > (in_w - out_w) * 2)


@numba.njit(nogil=True, cache=True, inline="always")
def _clip8(acc):
    """Resample.c's clip8: arithmetic shift, then its lookup table, which clamps to 0..255."""
    v = acc >> PRECISION_BITS
    if v < 0:
        return np.uint8(0)
    if v > 255:
        return np.uint8(255)
    return np.uint8(v)


@numba.njit(nogil=True, cache=True, inline="always")
def _horizontal_blocked(src, dst, row0, bounds, kk, nc, rb):
    """Horizontal pass over blocks of ``rb`` rows.

    A per-pixel dot product over taps does not vectorise. Transposing a block of rows into
    ``t[x, c * rb + r]`` makes every tap a contiguous run of ``nc * rb`` samples sharing one
    coefficient, so the tap loop becomes a SIMD multiply-add over the whole block.
    ``nc``/``rb`` are constants at each call site so the lane loops are fully unrolled.
    """
    out_h, out_w, _ = dst.shape
    if out_h == 0 or out_w == 0:
        return
    width = nc * rb
    xlo = bounds[0, 0]
    xhi = bounds[0, 0] + bounds[0, 1]
    for x in range(1, out_w):
        xlo = min(xlo, bounds[x, 0])
        xhi = max(xhi, bounds[x, 0] + bounds[x, 1])
    # Lanes of rows past the image end are left uninitialised: they hold some uint8, their
    # sums are computed and discarded.
    t = np.empty((max(xhi, 1), width), np.uint8)
    acc = np.empty(width, np.int32)
    res = np.empty(width, np.uint8)
    for y0 in range(0, out_h, rb):
        nr = min(rb, out_h - y0)
        for r in range(nr):
            srow = src[row0 + y0 + r]
            for x in range(xlo, xhi):
                for c in range(nc):
                    t[x, c * rb + r] = srow[x, c]
        for x in range(out_w):
            xmin = bounds[x, 0]
            n = bounds[x, 1]
            for j in range(width):
                acc[j] = _HALF
            for i in range(n):
                k = kk[x, i]
                tr = t[xmin + i]
                for j in range(width):
                    # int32 wrap-around, exactly like Resample.c's `int ss`.
                    acc[j] = acc[j] + np.int32(tr[j]) * k
            for j in range(width):
                res[j] = _clip8(acc[j])
            for r in range(nr):
                for c in range(nc):
                    dst[y0 + r, x, c] = res[c * rb + r]


@numba.njit(nogil=True, cache=True)
def resample_horizontal(src, dst, row0, bounds, kk):
    """dst[y, x, c] = clip8(sum_i src[y + row0, bounds[x,0] + i, c] * kk[x, i]) for y in
    range(dst.shape[0])."""
    nc = dst.shape[2]
    # About 48 int32 lanes per block: six AVX2 registers of accumulators.
    # RGB and L get fully unrolled copies; LA/RGBA share a generic one.
    if nc == 3:
        _horizontal_blocked(src, dst, row0, bounds, kk, 3, 16)
    elif nc == 1:
        _horizontal_blocked(src, dst, row0, bounds, kk, 1, 48)
    else:
        _horizontal_blocked(src, dst, row0, bounds, kk, nc, 12)


@numba.njit(nogil=True, cache=True)
def resample_vertical(src, dst, bounds, kk):
    """dst[y, x, c] = clip8(sum_i src[bounds[y,0] + i, x, c] * kk[y, i])."""
    out_h, out_w, nc = dst.shape
    if out_h == 0 or out_w == 0:
        return
    # Rows are processed as flat runs of out_w * nc samples (one int32 accumulator each),
    # so each tap is a contiguous SIMD multiply-add. Non-contiguous arrays go through
    # contiguous copies to keep that layout.
    s = np.ascontiguousarray(src)
    d = np.ascontiguousarray(dst)
    rowlen = out_w * nc
    s2 = s.reshape(s.shape[0], s.shape[1] * s.shape[2])
    d2 = d.reshape(out_h, rowlen)
    acc = np.empty(rowlen, np.int32)
    for y in range(out_h):
        ymin = bounds[y, 0]
        n = bounds[y, 1]
        for j in range(rowlen):
            acc[j] = _HALF
        for i in range(n):
            k = kk[y, i]
            row = s2[ymin + i]
            for j in range(rowlen):
                acc[j] = acc[j] + np.int32(row[j]) * k
        drow = d2[y]
        for j in range(rowlen):
            drow[j] = _clip8(acc[j])
    if d.ctypes.data != dst.ctypes.data:
        dst[...] = d


@numba.njit(nogil=True, cache=True)
def _resample_nb(img, out_h, out_w, bh, kh, bv, kv):
    """ImagingResampleInner for the box (0, 0, in_w, in_h); the coefficients of an axis
    that keeps its size are not read."""
    in_h, in_w, nc = img.shape
    need_h = out_w != in_w
    need_v = out_h != in_h
    if not need_h and not need_v:
        return img.copy()
    out = np.empty((out_h, out_w, nc), np.uint8)
    if not need_h:
        resample_vertical(img, out, bv, kv)
    elif not need_v:
        resample_horizontal(img, out, np.int64(0), bh, kh)
    elif not ((in_h - out_h) > 0 and (in_h - out_h) > (in_w - out_w) * 2):
        # Horizontal first, over only the source rows the vertical pass reads.
        first = bv[0, 0]
        last = bv[out_h - 1, 0] + bv[out_h - 1, 1]
        tmp = np.empty((last - first, out_w, nc), np.uint8)
        resample_horizontal(img, tmp, np.int64(first), bh, kh)
        shifted = bv.copy()
        for y in range(out_h):
            shifted[y, 0] -= first
        resample_vertical(tmp, out, shifted, kv)
    else:
        tmp = np.empty((out_h, in_w, nc), np.uint8)
        resample_vertical(img, tmp, bv, kv)
        resample_horizontal(tmp, out, np.int64(0), bh, kh)
    return out


@numba.njit(nogil=True, cache=True)
def _nearest_nb(img, out_h, out_w):
    """ImagingScaleAffine: positions accumulate in double (xo += a0), not x * a0."""
    in_h, in_w, nc = img.shape
    out = np.zeros((out_h, out_w, nc), np.uint8)  # fill=1: uncovered pixels stay 0
    a0 = np.float64(np.float32(in_w) - np.float32(0.0)) / out_w
    a4 = np.float64(np.float32(in_h) - np.float32(0.0)) / out_h
    xo = 0.0 + a0 * 0.5
    yo = 0.0 + a4 * 0.5
    xintab = np.zeros(out_w, np.int64)
    xmin = out_w
    xmax = 0
    for x in range(out_w):
        xin = -1 if xo < 0.0 else int(xo)
        if xin >= 0 and xin < in_w:
            xmax = x + 1
            if x < xmin:
                xmin = x
            xintab[x] = xin
        xo += a0
    for y in range(out_h):
        yi = -1 if yo < 0.0 else int(yo)
        if yi >= 0 and yi < in_h:
            for x in range(xmin, xmax):
                sx = xintab[x]
                for c in range(nc):
                    out[y, x, c] = img[yi, sx, c]
        yo += a4
    return out


@numba.njit(nogil=True, cache=True)
def _premultiply(img):
    """RGBA -> RGBa / LA -> La (Convert.c): c * a / 255 via MULDIV255; alpha is last."""
    h, w, nc = img.shape
    out = np.empty_like(img)
    for y in range(h):
        for x in range(w):
            a = np.uint32(img[y, x, nc - 1])
            for c in range(nc - 1):
                t = np.uint32(img[y, x, c]) * a + np.uint32(128)
                out[y, x, c] = np.uint8(((t >> 8) + t) >> 8)
            out[y, x, nc - 1] = img[y, x, nc - 1]
    return out


@numba.njit(nogil=True, cache=True)
def _unpremultiply(img):
    """RGBa -> RGBA / La -> LA (Convert.c): CLIP8(255 * c / a) unless a is 0 or 255."""
    h, w, nc = img.shape
    for y in range(h):
        for x in range(w):
            a = np.uint32(img[y, x, nc - 1])
            if a == 255 or a == 0:
                continue
            for c in range(nc - 1):
                v = (np.uint32(255) * np.uint32(img[y, x, c])) // a
                img[y, x, c] = np.uint8(255 if v > 255 else v)
    return img


_NO_COEFFS = (np.zeros((0, 2), np.int32), np.zeros((0, 1), np.int32))


def _resample(img: np.ndarray, out_h: int, out_w: int, filter: int) -> np.ndarray:
    in_h, in_w = img.shape[:2]
    bh, kh = _cached_coeffs(in_w, out_w, filter) if out_w != in_w else _NO_COEFFS
    bv, kv = _cached_coeffs(in_h, out_h, filter) if out_h != in_h else _NO_COEFFS
    return _resample_nb(img, out_h, out_w, bh, kh, bv, kv)


def resize(img: np.ndarray, out_h: int, out_w: int, filter: int) -> np.ndarray:
    """uint8 HWC (C-contiguous) -> uint8 [out_h, out_w, C], equal to Pillow 13's
    ``Image.fromarray(img).resize((out_w, out_h), filter)`` (C=1 as mode "L", 2 "LA",
    3 "RGB", 4 "RGBA"). A 2-D array is treated as C=1 and gives a 2-D result."""
    if not isinstance(img, np.ndarray) or img.dtype != np.uint8:
        raise ValueError("resize expects a uint8 numpy array")
    squeeze = img.ndim == 2
    if squeeze:
        img = img[:, :, None]
    if img.ndim != 3:
        raise ValueError(f"resize expects an HWC array, got shape {img.shape}")
    nc = img.shape[2]
    if nc < 1 or nc > 4:
        raise ValueError(f"unsupported channel count {nc} (1..4 supported)")
    if filter not in (NEAREST, LANCZOS, BILINEAR, BICUBIC, BOX, HAMMING):
        raise ValueError(f"unknown resampling filter {filter!r}")
    filter = int(filter)
    out_h = int(out_h)
    out_w = int(out_w)
    if out_h < 1 or out_w < 1:
        raise ValueError("height and width must be > 0")
    in_h, in_w = img.shape[:2]
    if in_h < 1 or in_w < 1:
        raise ValueError("input image is empty")
    img = np.ascontiguousarray(img)
    if (in_h, in_w) == (out_h, out_w):
        out = img.copy()
    elif filter == NEAREST:
        out = _nearest_nb(img, out_h, out_w)
    elif nc in (2, 4):
        out = _unpremultiply(_resample(_premultiply(img), out_h, out_w, filter))
    else:
        out = _resample(img, out_h, out_w, filter)
    return out[:, :, 0] if squeeze else out


def warmup() -> None:
    """Compile (or load from the on-disk cache) every kernel, so no request pays for it:
    all channel counts and filters through ``resize``, and the pass kernels for
    C-contiguous and strided sources."""
    for nc in (1, 2, 3, 4):
        a = (np.arange(5 * 7 * nc, dtype=np.int64) * 37 % 256).astype(np.uint8).reshape(5, 7, nc)
        for f in (NEAREST, LANCZOS, BILINEAR, BICUBIC, BOX, HAMMING):
            resize(a, 3, 4, f)
            resize(a, 9, 2, f)
    bounds, kk = coeffs(7, 4, BICUBIC)
    a = np.zeros((5, 7, 3), np.uint8)
    resample_horizontal(a, np.empty((5, 4, 3), np.uint8), 0, bounds, kk)
    resample_horizontal(a[:, :6], np.empty((5, 4, 3), np.uint8), 0, bounds, kk)
    bounds, kk = coeffs(5, 3, BICUBIC)
    resample_vertical(a, np.empty((3, 7, 3), np.uint8), bounds, kk)
    resample_vertical(a[:, :6], np.empty((3, 6, 3), np.uint8), bounds, kk)
