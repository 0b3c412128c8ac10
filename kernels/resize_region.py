"""Pillow-exact resize of only part of the output, optionally of a virtually padded input.

A center crop after a shortest-edge resize keeps a window of the resized image, and
Pillow's two passes are separable: each output column uses its own horizontal
coefficients and each output row its own vertical ones. So resizing with only the
window's rows and columns of the coefficient tables, in the pass order Pillow 13 picks
for the *full* sizes, gives exactly the window of the full resize, at the window's cost
(a 1x2000 image resized to 336x672000 and cropped to 336x336 stays cheap).

An input padded to a square with a colour before resizing is not built either: the
horizontal pass reads the canvas virtually. Taps on the padding contribute
``colour * k``, summed once per output column, and rows that are all padding are one
row computed once. Integer sums are exact in any order, so this equals Pillow on the
materialised canvas.
"""

from __future__ import annotations

import numba
import numpy as np

from . import resample_pil
from .resample_pil import PRECISION_BITS

_HALF = 1 << (PRECISION_BITS - 1)


@numba.njit(nogil=True, cache=True, inline="always")
def _clip8(acc):
    v = acc >> PRECISION_BITS
    if v < 0:
        return np.uint8(0)
    if v > 255:
        return np.uint8(255)
    return np.uint8(v)


@numba.njit(nogil=True, cache=True)
def horizontal_padded(img, top, left, canvas_w, color, bounds, kk, row0, out):
    """Horizontal pass over rows ``row0 ..`` of a virtual canvas: ``img`` placed at
    (``top``, ``left``) on a ``canvas_w``-wide canvas of ``color`` (uint8 [C]).
    ``bounds``/``kk`` are Pillow's coefficients in canvas columns."""
    h, w, nc = img.shape
    oh, ow, _ = out.shape
    ia = np.empty(ow, np.int64)  # image taps of column x: i in [ia[x], ib[x])
    ib = np.empty(ow, np.int64)
    kpad = np.zeros(ow, np.int64)  # sum of the taps on padding
    kall = np.zeros(ow, np.int64)
    for x in range(ow):
        xmin = bounds[x, 0]
        n = bounds[x, 1]
        a = min(max(left - xmin, 0), n)
        b = max(min(left + w - xmin, n), a)
        ia[x] = a
        ib[x] = b
        for i in range(n):
            kall[x] += kk[x, i]
            if i < a or i >= b:
                kpad[x] += kk[x, i]
    background = np.empty((ow, nc), np.uint8)
    for x in range(ow):
        for c in range(nc):
            background[x, c] = _clip8(_HALF + np.int64(color[c]) * kall[x])
    for y in range(oh):
        r = row0 + y - top
        orow = out[y]
        if r < 0 or r >= h:
            for x in range(ow):
                for c in range(nc):
                    orow[x, c] = background[x, c]
            continue
        line = img[r]
        for x in range(ow):
            shift = bounds[x, 0] - left
            for c in range(nc):
                acc = _HALF + np.int64(color[c]) * kpad[x]
                for i in range(ia[x], ib[x]):
                    acc += np.int64(line[shift + i, c]) * kk[x, i]
                orow[x, c] = _clip8(acc)


def _canvas(img, top, left, canvas_h, canvas_w, color, y0, x0, wh, ww) -> np.ndarray:
    """The window [y0, y0+wh) x [x0, x0+ww) of the materialised canvas."""
    out = np.empty((wh, ww, img.shape[2]), np.uint8)
    out[...] = color
    h, w = img.shape[:2]
    ya, yb = max(y0, top), min(y0 + wh, top + h)
    xa, xb = max(x0, left), min(x0 + ww, left + w)
    if ya < yb and xa < xb:
        out[ya - y0:yb - y0, xa - x0:xb - x0] = img[ya - top:yb - top, xa - left:xb - left]
    return out


def resize_region(
    img: np.ndarray,
    out_h: int,
    out_w: int,
    filter: int,
    window: tuple[int, int, int, int] | None = None,
    pad: tuple[int, int, int, int, int | tuple[int, ...]] | None = None,
) -> np.ndarray:
    """``resize(canvas, out_h, out_w, filter)[y0:y0+wh, x0:x0+ww]`` as uint8 [wh, ww, C].

    ``img`` uint8 HWC. ``window`` = (y0, x0, wh, ww) inside the output (default: all of
    it). ``pad`` = (top, left, canvas_h, canvas_w, color): the input is ``img`` placed
    at (top, left) on a canvas of that size filled with ``color`` (default: ``img``).
    """
    if img.ndim != 3 or img.dtype != np.uint8:
        raise ValueError("resize_region expects a uint8 HWC image")
    img = np.ascontiguousarray(img)
    nc = img.shape[2]
    out_h, out_w = int(out_h), int(out_w)
    y0, x0, wh, ww = (0, 0, out_h, out_w) if window is None else (int(v) for v in window)
    if not (0 <= y0 and 0 < wh and y0 + wh <= out_h and 0 <= x0 and 0 < ww and x0 + ww <= out_w):
        raise ValueError(f"window {window} is not inside {out_h}x{out_w}")
    if pad is None:
        top, left, in_h, in_w = 0, 0, img.shape[0], img.shape[1]
        color = np.zeros(nc, np.uint8)
    else:
        top, left, in_h, in_w = (int(v) for v in pad[:4])
        color = np.broadcast_to(np.asarray(pad[4], np.uint8), (nc,)).copy()
        if not (0 <= top and top + img.shape[0] <= in_h and 0 <= left and left + img.shape[1] <= in_w):
            raise ValueError(f"image {img.shape[:2]} does not fit the canvas {pad[:4]}")
    padded = pad is not None and (in_h, in_w) != img.shape[:2]

    need_h, need_v = out_w != in_w, out_h != in_h
    h_first = resample_pil.horizontal_first(in_h, in_w, out_h, out_w)
    if not need_h and not need_v:
        if padded:
            return _canvas(img, top, left, in_h, in_w, color, y0, x0, wh, ww)
        return img[y0:y0 + wh, x0:x0 + ww].copy()
    if filter == resample_pil.NEAREST or nc not in (1, 3) or (padded and need_v and not h_first):
        # Outside the fast paths: materialise, resize whole, cut.
        full = _canvas(img, top, left, in_h, in_w, color, 0, 0, in_h, in_w) if padded else img
        return np.ascontiguousarray(resample_pil.resize(full, out_h, out_w, filter)[y0:y0 + wh, x0:x0 + ww])

    if need_h:  # (each pass's coefficients are read only where that pass runs)
        bh, kh = resample_pil._cached_coeffs(in_w, out_w, filter)
        bh, kh = bh[x0:x0 + ww], kh[x0:x0 + ww]
    if need_v:
        bv, kv = resample_pil._cached_coeffs(in_h, out_h, filter)
        bv, kv = bv[y0:y0 + wh], kv[y0:y0 + wh]

    out = np.empty((wh, ww, nc), np.uint8)
    if need_h and (h_first or not need_v):
        # Horizontal pass over only the source rows the vertical pass reads.
        first = int(bv[0, 0]) if need_v else y0
        last = int(bv[-1, 0] + bv[-1, 1]) if need_v else y0 + wh
        tmp = out if not need_v else np.empty((last - first, ww, nc), np.uint8)
        if padded:
            horizontal_padded(img, top, left, in_w, color, bh, kh, np.int64(first), tmp)
        else:
            resample_pil.resample_horizontal(img, tmp, np.int64(first), bh, kh)
        if need_v:
            shifted = bv.copy()
            shifted[:, 0] -= first
            resample_pil.resample_vertical(tmp, out, shifted, kv)
        return out
    # Vertical first (or only): over only the source columns the horizontal pass reads.
    # (A padded canvas only gets here with need_h false: its columns are then cut as is.)
    if need_h:
        xlo = int(bh[:, 0].min())
        xhi = int((bh[:, 0] + bh[:, 1]).max())
    else:
        xlo, xhi = x0, x0 + ww
    if padded:
        src = _canvas(img, top, left, in_h, in_w, color, 0, xlo, in_h, xhi - xlo)
    else:
        src = np.ascontiguousarray(img[:, xlo:xhi])
    tmp = out if not need_h else np.empty((wh, xhi - xlo, nc), np.uint8)
    resample_pil.resample_vertical(src, tmp, bv, kv)
    if need_h:
        shifted = bh.copy()
        shifted[:, 0] -= xlo
        resample_pil.resample_horizontal(tmp, out, np.int64(0), shifted, kh)
    return out


def warmup() -> None:
    """Compile (or load from cache) the padded pass for RGB, what a request has (grey
    compiles on first use)."""
    resize_region(np.zeros((3, 5, 3), np.uint8), 4, 4, resample_pil.BICUBIC, pad=(1, 0, 5, 5, 7))
