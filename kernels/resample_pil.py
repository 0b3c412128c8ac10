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

This module holds Pillow's rules, in Resample.c's order: the filters, their coefficients,
the two passes and the order Pillow runs them in, then the entry points. The passes'
inner loops are ``convolve_u8``'s; a shrink's horizontal pass over RGBX runs on AMX tiles
where the process has them (``resample_amx``).
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np

from . import amx, resample_amx
from .convolve_u8 import (PRECISION_BITS, convolve, convolve_rows_pairs, horizontal_blocked, horizontal_blocked_two,
                          pairable, split_pairs)
from .pixels import pack_into, packed, rgb_or_rgbx
from .simd_ir import wide_vectors

NEAREST, LANCZOS, BILINEAR, BICUBIC, BOX, HAMMING = 0, 1, 2, 3, 4, 5

_CONVOLUTION_FILTERS = frozenset((LANCZOS, BILINEAR, BICUBIC, BOX, HAMMING))

_ONE = float(1 << PRECISION_BITS)  # PRECISION_BITS: 32 - 8 - 2, as in Resample.c
# Resample.c writes the Hamming constants as float literals (0.54f, 0.46f) that C promotes
# to double; the promoted values differ from the double literals 0.54/0.46.
_HAMMING_A = float(np.float32(0.54))
_HAMMING_B = float(np.float32(0.46))


@numba.njit(nogil=True, cache=True)
def sinc(x):
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
            return sinc(x) * sinc(x / 3)
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


@numba.njit(nogil=True, cache=True)
def horizontal_pass(src, dst, row0, bounds, kk, any_channels=None):
    """``resample_horizontal`` for C-contiguous arrays, callable from other kernels.
    (Numba compiles a function once per array layout it is given, and this one takes
    seconds to compile: the Python entries hand it C-contiguous arrays only.)

    RGB rows only (out of RGB or RGBX ones) unless ``any_channels`` is given: left out,
    numba prunes the other channel counts' code before typing it, so the kernels that
    resize images, all RGB, neither compile nor link it (a third of this one's compile)."""
    wide_vectors()
    out_h, out_w, nc = dst.shape
    if out_h == 0 or out_w == 0:
        return
    in_w = src.shape[1]
    s = np.ascontiguousarray(src[row0:row0 + out_h])  # a view: the rows used
    sflat = s.reshape(s.size)
    dflat = dst.reshape(dst.size)
    # 64 int32 lanes per block.
    sp = src.shape[2]
    if nc == 3:
        if sp != 4 or out_h < resample_amx.MIN_ROWS or not amx.permitted() \
                or not resample_amx.try_horizontal(sflat, in_w, out_h, dflat, bounds, kk):
            horizontal_rgb(sflat, dflat, in_w, bounds, kk, sp)
        return
    if any_channels is None:
        raise ValueError("horizontal_pass: RGB rows only unless any_channels is given")
    if nc == 1:
        horizontal_blocked(sflat, dflat, in_w, bounds, kk, 1, 1, 1, 64)
    elif nc == 4:
        horizontal_blocked(sflat, dflat, in_w, bounds, kk, 4, 4, 4, 16)
    else:
        horizontal_blocked(sflat, dflat, in_w, bounds, kk, 2, 2, 2, 32)


@numba.njit(nogil=True, cache=True)
def horizontal_rgb(sflat, dflat, in_w, bounds, kk, sp):
    """``horizontal_blocked`` of RGB (``sp`` 3) or RGBX (4) rows into RGB ones. Called, not
    inlined, by both horizontal passes: compiled once (it is most of their compile time)."""
    wide_vectors()
    if sp == 4:
        horizontal_blocked(sflat, dflat, in_w, bounds, kk, 3, 4, 4, 16)
    else:
        horizontal_blocked(sflat, dflat, in_w, bounds, kk, 3, 3, 4, 16)


@numba.njit(nogil=True, cache=True)
def horizontal_pass_two(src, dst_a, dst_b, row0, bounds_a, kk_a, bounds_b, kk_b):
    """``horizontal_pass`` into ``dst_a`` and ``dst_b`` (as many RGB rows, out of RGB or
    RGBX ones) from the same source rows, each block of them read once."""
    wide_vectors()
    out_h, out_wa, nc = dst_a.shape
    if out_h == 0 or out_wa == 0 or dst_b.shape[1] == 0:
        return
    in_w = src.shape[1]
    s = np.ascontiguousarray(src[row0:row0 + out_h])
    sflat = s.reshape(s.size)
    fa = dst_a.reshape(dst_a.size)
    fb = dst_b.reshape(dst_b.size)
    sp = src.shape[2]
    if nc != 3 or (sp != 3 and sp != 4):
        raise ValueError("horizontal_pass_two: RGB rows out of RGB or RGBX ones only")
    if sp == 4 and out_h >= resample_amx.MIN_ROWS and amx.permitted():
        # one width after the other (both sets of weight tiles would not stay in L2
        # together); a width AMX does not pay for goes the int16-pair way alone
        on_a = resample_amx.try_horizontal(sflat, in_w, out_h, fa, bounds_a, kk_a)
        on_b = resample_amx.try_horizontal(sflat, in_w, out_h, fb, bounds_b, kk_b)
        if on_a != on_b:
            if on_a:
                horizontal_rgb(sflat, fb, in_w, bounds_b, kk_b, sp)
            else:
                horizontal_rgb(sflat, fa, in_w, bounds_a, kk_a, sp)
        if on_a or on_b:
            return
    if sp == 4:
        horizontal_blocked_two(sflat, fa, fb, in_w, bounds_a, kk_a, bounds_b, kk_b, 3, 4, 4, 16)
    else:
        horizontal_blocked_two(sflat, fa, fb, in_w, bounds_a, kk_a, bounds_b, kk_b, 3, 3, 4, 16)


@numba.njit(nogil=True, cache=True)
def vertical_pass(src, dst, bounds, kk):
    """``resample_vertical`` for C-contiguous arrays, callable from other kernels."""
    wide_vectors()
    out_h, out_w, nc = dst.shape
    if out_h == 0 or out_w == 0:
        return
    # Rows are processed as flat runs of out_w * channels samples, so each tap is a
    # contiguous SIMD multiply-add.
    sflat = src.reshape(src.size)
    rowlen = out_w * src.shape[2]
    in_rows = src.shape[0]
    acc = np.empty(rowlen, np.int32)
    # int16 pairs (``convolve_rows_pairs``) for rows of at least 64 samples
    paired = rowlen >= 64 and pairable(kk)
    shift = -1
    if paired:
        khi, klo, shift = split_pairs(bounds, kk)
    else:
        khi = klo = np.empty((0, 1), np.int32)
    if src.shape[2] == nc:
        if paired:
            convolve_rows_pairs(sflat, rowlen, in_rows, bounds, khi, klo, shift, dst.reshape(dst.size), rowlen, out_h)
        else:
            convolve(sflat, rowlen, rowlen, bounds, kk, 0, acc, dst.reshape(dst.size), rowlen, out_h)
        return
    # RGBX: a few RGBX rows at a time (L1/L2-sized), each block packed into dst.
    rows = max(1, 32768 // rowlen)
    block = np.empty((rows, out_w, src.shape[2]), np.uint8)
    bflat = block.reshape(block.size)
    for y0 in range(0, out_h, rows):
        k = min(rows, out_h - y0)
        if paired:
            convolve_rows_pairs(sflat, rowlen, in_rows, bounds[y0:y0 + k], khi[y0:y0 + k], klo[y0:y0 + k], shift,
                                bflat, rowlen, k)
        else:
            convolve(sflat, rowlen, rowlen, bounds[y0:y0 + k], kk[y0:y0 + k], 0, acc, bflat, rowlen, k)
        pack_into(block[:k], dst[y0:y0 + k])


def any_channels(nc: int) -> tuple:
    """The trailing argument ``horizontal_pass`` and ``separable`` take for ``nc`` output
    channels: none for RGB (the pruned specialization every model uses), else the flag."""
    return () if nc == 3 else (True,)


def resample_horizontal(src, dst, row0, bounds, kk) -> None:
    """dst[y, x, c] = clip8(sum_i src[y + row0, bounds[x,0] + i, c] * kk[x, i]) for y in
    range(dst.shape[0]). A 4-channel ``src`` with a 3-channel ``dst`` is RGBX: its fourth
    byte is padding, never read into the result. Any array layouts."""
    d = np.ascontiguousarray(dst)
    horizontal_pass(np.ascontiguousarray(src), d, np.int64(row0), np.ascontiguousarray(bounds),
                    np.ascontiguousarray(kk), *any_channels(d.shape[2]))
    if d is not dst:
        dst[...] = d


def resample_vertical(src, dst, bounds, kk) -> None:
    """dst[y, x, c] = clip8(sum_i src[bounds[y,0] + i, x, c] * kk[y, i]). A 4-channel
    ``src`` with a 3-channel ``dst`` is RGBX: its fourth byte is dropped. Any array
    layouts."""
    d = np.ascontiguousarray(dst)
    vertical_pass(np.ascontiguousarray(src), d, np.ascontiguousarray(bounds), np.ascontiguousarray(kk))
    if d is not dst:
        dst[...] = d


@numba.njit(nogil=True, cache=True)
def separable(img, out_h, out_w, bh, kh, bv, kv, nc, h_first, any_channels=None):
    """Both passes into a new [out_h, out_w, nc] (``nc`` fewer than ``img`` has only for
    RGBX): an axis that keeps its size is skipped (its coefficients are not read); with
    both, horizontal first (over only the source rows the vertical pass reads) when
    ``h_first``, else vertical first. Pillow decides the order by ``horizontal_first``;
    torchvision always goes horizontal first. ``nc`` other than 3 needs ``any_channels``
    (``horizontal_pass``)."""
    in_h, in_w, sp = img.shape
    out = np.empty((out_h, out_w, nc), np.uint8)
    if out_w == in_w and out_h == in_h:
        if sp == nc:
            out[...] = img
        else:
            pack_into(img, out)
    elif out_w == in_w:
        vertical_pass(img, out, bv, kv)
    elif out_h == in_h:
        horizontal_pass(img, out, np.int64(0), bh, kh, any_channels)
    elif h_first:
        first = bv[0, 0]
        last = first
        for y in range(out_h):
            last = max(last, bv[y, 0] + bv[y, 1])
        tmp = np.empty((last - first, out_w, nc), np.uint8)
        horizontal_pass(img, tmp, np.int64(first), bh, kh, any_channels)
        shifted = bv.copy()
        for y in range(out_h):
            shifted[y, 0] -= first
        vertical_pass(tmp, out, shifted, kv)
    else:
        tmp = np.empty((out_h, in_w, sp), np.uint8)
        vertical_pass(img, tmp, bv, kv)
        horizontal_pass(tmp, out, np.int64(0), bh, kh, any_channels)
    return out


@numba.njit(nogil=True, cache=True)
def separable_two(img, first, last, oh_a, ow_a, bh_a, kh_a, bv_a, kv_a, oh_b, ow_b, bh_b, kh_b, bv_b, kv_b, nc):
    """``separable`` to two sizes at once, both horizontal first with both axes resized
    and both reading source rows [first, last): the horizontal passes share each block of
    those rows (``horizontal_pass_two``)."""
    tmp_a = np.empty((last - first, ow_a, nc), np.uint8)
    tmp_b = np.empty((last - first, ow_b, nc), np.uint8)
    horizontal_pass_two(img, tmp_a, tmp_b, np.int64(first), bh_a, kh_a, bh_b, kh_b)
    out_a = np.empty((oh_a, ow_a, nc), np.uint8)
    out_b = np.empty((oh_b, ow_b, nc), np.uint8)
    shifted = bv_a.copy()
    for y in range(oh_a):
        shifted[y, 0] -= first
    vertical_pass(tmp_a, out_a, shifted, kv_a)
    shifted = bv_b.copy()
    for y in range(oh_b):
        shifted[y, 0] -= first
    vertical_pass(tmp_b, out_b, shifted, kv_b)
    return out_a, out_b


def rows_read(bounds: np.ndarray) -> tuple[int, int]:
    """The source rows [first, last) an axis's coefficients read."""
    return int(bounds[:, 0].min()), int((bounds[:, 0] + bounds[:, 1]).max())


def resample_two(pixels: np.ndarray, size_a, size_b, coeffs_of, h_first_of) -> tuple[np.ndarray, np.ndarray] | None:
    """Both resizes of ``pixels`` (RGB or RGBX -> RGB) through ``separable_two`` when they
    can share their horizontal pass (both horizontal first, both axes resized, the same
    source rows read), else None. ``coeffs_of(in, out)`` gives an axis's coefficients,
    ``h_first_of(in_h, in_w, out_h, out_w)`` the pass order."""
    in_h, in_w = pixels.shape[:2]
    (ha, wa), (hb, wb) = size_a, size_b
    if in_h in (ha, hb) or in_w in (wa, wb) or not (h_first_of(in_h, in_w, ha, wa) and h_first_of(in_h, in_w, hb, wb)):
        return None
    bv_a, kv_a = coeffs_of(in_h, ha)
    bv_b, kv_b = coeffs_of(in_h, hb)
    rows = rows_read(bv_a)
    if rows != rows_read(bv_b):
        return None
    bh_a, kh_a = coeffs_of(in_w, wa)
    bh_b, kh_b = coeffs_of(in_w, wb)
    return separable_two(np.ascontiguousarray(pixels), *rows, ha, wa, bh_a, kh_a, bv_a, kv_a, hb, wb, bh_b, kh_b,
                         bv_b, kv_b, 3)


def resize_rgb_two(pixels: np.ndarray, size_a, size_b, filter: int) -> tuple[np.ndarray, np.ndarray]:
    """``(resize_rgb(pixels, *size_a, filter), resize_rgb(pixels, *size_b, filter))``, the
    source read once by both horizontal passes where their rows coincide (a model's tiles
    and its thumbnail from one image)."""
    pixels = rgb_or_rgbx(pixels, "resize_rgb_two")
    (ha, wa), (hb, wb) = (_checked_target(filter, *size_a)[1:], _checked_target(filter, *size_b)[1:])
    if filter != NEAREST:
        both = resample_two(pixels, (ha, wa), (hb, wb), lambda i, o: _cached_coeffs(i, o, filter), horizontal_first)
        if both is not None:
            return both
    return resize_rgb(pixels, ha, wa, filter), resize_rgb(pixels, hb, wb, filter)


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


def _resample(img: np.ndarray, out_h: int, out_w: int, filter: int, nc: int) -> np.ndarray:
    in_h, in_w = img.shape[:2]
    bh, kh = _cached_coeffs(in_w, out_w, filter) if out_w != in_w else _NO_COEFFS
    bv, kv = _cached_coeffs(in_h, out_h, filter) if out_h != in_h else _NO_COEFFS
    return separable(img, out_h, out_w, bh, kh, bv, kv, nc, horizontal_first(in_h, in_w, out_h, out_w),
                     *any_channels(nc))


def _checked_target(filter, out_h, out_w) -> tuple[int, int, int]:
    if filter not in (NEAREST, LANCZOS, BILINEAR, BICUBIC, BOX, HAMMING):
        raise ValueError(f"unknown resampling filter {filter!r}")
    out_h, out_w = int(out_h), int(out_w)
    if out_h < 1 or out_w < 1:
        raise ValueError("height and width must be > 0")
    return int(filter), out_h, out_w


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
    filter, out_h, out_w = _checked_target(filter, out_h, out_w)
    in_h, in_w = img.shape[:2]
    if in_h < 1 or in_w < 1:
        raise ValueError("input image is empty")
    img = np.ascontiguousarray(img)
    if (in_h, in_w) == (out_h, out_w):
        out = img.copy()
    elif filter == NEAREST:
        out = _nearest_nb(img, out_h, out_w)
    elif nc in (2, 4):
        out = _unpremultiply(_resample(_premultiply(img), out_h, out_w, filter, nc))
    else:
        out = _resample(img, out_h, out_w, filter, nc)
    return out[:, :, 0] if squeeze else out


def resize_rgb(pixels: np.ndarray, out_h: int, out_w: int, filter: int) -> np.ndarray:
    """``resize`` of an RGB image held as uint8 [H, W, 3], or as [H, W, 4] RGBX (Pillow's
    own layout, read without copying; the fourth byte is padding) -> [out_h, out_w, 3]."""
    pixels = rgb_or_rgbx(pixels, "resize_rgb")
    if pixels.shape[2] == 3 or filter == NEAREST:
        return resize(packed(pixels), out_h, out_w, filter)
    filter, out_h, out_w = _checked_target(filter, out_h, out_w)
    return _resample(pixels, out_h, out_w, filter, 3)


def warmup() -> None:
    """Compile (or load from the on-disk cache) every kernel a request resizing to one
    size can reach, so none pays: RGB and RGBX images, every filter, and the pass
    kernels' entries (which give them C-contiguous arrays whatever the caller has).
    ``warmup_two_sizes``: ``resize_rgb_two``'s, for the families that resize to two
    sizes at once. ``resize`` of other channel counts (grey, LA, RGBA: no model's path)
    compiles on first use."""
    a = (np.arange(5 * 7 * 3, dtype=np.int64) * 37 % 256).astype(np.uint8).reshape(5, 7, 3)
    for f in (NEAREST, LANCZOS, BILINEAR, BICUBIC, BOX, HAMMING):
        resize(a, 3, 4, f)
        resize(a, 9, 2, f)
    bounds, kk = coeffs(7, 4, BICUBIC)
    a = np.zeros((5, 7, 3), np.uint8)
    resample_horizontal(a[:, :6], np.empty((5, 4, 3), np.uint8), 0, bounds, kk)
    bounds, kk = coeffs(5, 3, BICUBIC)
    resample_vertical(a[:, :6], np.empty((3, 6, 3), np.uint8), bounds, kk)


def warmup_rgb_rows() -> None:
    """``horizontal_rgb``, for RGB and RGBX rows: the largest part of the passes' compile.
    Compiled first by another process, it is linked from the cache into them, which then
    compile in about half the time (a cold start's helpers split the passes so)."""
    bounds, kk = coeffs(7, 4, BICUBIC)
    for sp in (3, 4):
        horizontal_rgb(np.zeros(5 * 7 * sp, np.uint8), np.empty(5 * 4 * 3, np.uint8), 7, bounds, kk, sp)


def warmup_two_sizes() -> None:
    """``resize_rgb_two``'s kernels: ``separable_two`` and the passes it calls."""
    for c in (3, 4):
        resize_rgb_two(np.zeros((40, 60, c), np.uint8), (9, 13), (20, 21), BICUBIC)
