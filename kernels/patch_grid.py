"""An HWC image cut into a grid of patches, padded, normalized and repeated, in one pass.

Some processors cut the uint8 image into ``rows x cols`` patches of ``ph x pw`` pixels in
raster order (the grid may reach past the image: those pixels, and whole patches, are a
fill value), normalize every value, and repeat each patch ``T`` times along a new axis:
``out[n, t, y, x, c]`` with ``n = row * cols + col``. Here each source row is normalized
once into a line of ``cols * pw`` pixels (the fill already in its tail) and copied into
the ``cols * T`` patches it crosses: every output element is written exactly once, with
no padded canvas and no float copy of the image.

The fill is a float32 per channel, given already normalized (a processor that pads with
a value outside 0..255 before normalizing computes it with its own arithmetic).

Transparent images can be flattened on the way: an RGBA source is composited onto a
checkerboard of ``cell``-pixel squares, ``light`` where ``(y // cell + x // cell)`` is
even and ``dark`` elsewhere, in integers: ``(c * a + bg * (255 - a) + 127) // 255``.
"""

from __future__ import annotations

import numba
import numpy as np

from .normalize import arithmetic, copy_run


@numba.njit(nogil=True, cache=True, inline="always")
def _arith_packed(src, base, n, h0, l0, m0, s0, h1, l1, m1, s1, h2, l2, m2, s2, line):
    """``line[3i + c] = ((v*hi + v*lo) - mean) / std`` of ``v = src[base + 3i + c]``.
    Unsigned indices: signed ones carry numba's negative-index wrap-around, which keeps
    LLVM from vectorizing the loop."""
    b = np.uint64(base)
    for i in range(np.uint64(n)):
        o = b + np.uint64(3) * i
        v0 = np.float32(src[o])
        v1 = np.float32(src[o + np.uint64(1)])
        v2 = np.float32(src[o + np.uint64(2)])
        j = np.uint64(3) * i
        line[j] = (v0 * h0 + v0 * l0 - m0) / s0
        line[j + np.uint64(1)] = (v1 * h1 + v1 * l1 - m1) / s1
        line[j + np.uint64(2)] = (v2 * h2 + v2 * l2 - m2) / s2


@numba.njit(nogil=True, cache=True, inline="always")
def _arith_words(words, base, n, h0, l0, m0, s0, h1, l1, m1, s1, h2, l2, m2, s2, line):
    """The same from RGBX pixels read as little-endian 32-bit words (one load a pixel)."""
    b = np.uint64(base)
    for i in range(np.uint64(n)):
        w = words[b + i]
        v0 = np.float32(w & np.uint32(0xFF))
        v1 = np.float32((w >> np.uint32(8)) & np.uint32(0xFF))
        v2 = np.float32((w >> np.uint32(16)) & np.uint32(0xFF))
        j = np.uint64(3) * i
        line[j] = (v0 * h0 + v0 * l0 - m0) / s0
        line[j + np.uint64(1)] = (v1 * h1 + v1 * l1 - m1) / s1
        line[j + np.uint64(2)] = (v2 * h2 + v2 * l2 - m2) / s2


@numba.njit(nogil=True, cache=True)
def _normalize_line(src, base, n, step, coef, lut, line):
    """``n`` interleaved pixels of ``src`` from byte ``base`` (RGB, ``step`` 3, or RGBX,
    4) -> ``line`` as interleaved float32 RGB: by the arithmetic when ``coef`` has it
    (vectorized), else by the table."""
    if coef.shape[0] == 3:
        h0, l0, m0, s0 = coef[0, 0], coef[0, 1], coef[0, 2], coef[0, 3]
        h1, l1, m1, s1 = coef[1, 0], coef[1, 1], coef[1, 2], coef[1, 3]
        h2, l2, m2, s2 = coef[2, 0], coef[2, 1], coef[2, 2], coef[2, 3]
        if step == 4:
            _arith_words(src.view(np.uint32), base // 4, n, h0, l0, m0, s0, h1, l1, m1, s1, h2, l2, m2, s2, line)
        else:
            _arith_packed(src, base, n, h0, l0, m0, s0, h1, l1, m1, s1, h2, l2, m2, s2, line)
    else:
        t0, t1, t2 = lut[0], lut[1], lut[2]
        for i in range(n):
            line[3 * i] = t0[src[base + step * i]]
            line[3 * i + 1] = t1[src[base + step * i + 1]]
            line[3 * i + 2] = t2[src[base + step * i + 2]]


@numba.njit(nogil=True, cache=True)
def _checkerboard_row(src, base, n, y, cell, light, dark, rgb):
    """RGBA pixels of row ``y`` composited onto the checkerboard -> packed RGB ``rgb``."""
    by = y // cell
    for x in range(n):
        a = np.int32(src[base + 4 * x + 3])
        bg = np.int32(light) if (by + x // cell) % 2 == 0 else np.int32(dark)
        for c in range(3):
            rgb[3 * x + c] = np.uint8((np.int32(src[base + 4 * x + c]) * a + bg * (255 - a) + 127) // 255)


@numba.njit(nogil=True, cache=True)
def grid_patches(pixels, rgba, cell, light, dark, coef, lut, fill, cols, out):
    """``out[n, t, y, x, c]`` (float32 [rows * cols, T, ph, pw, 3], C-contiguous) =
    the normalized value of ``pixels[r * ph + y, q * pw + x, c]`` for ``n = r * cols + q``,
    or ``fill[c]`` where that pixel is outside the image. ``pixels`` uint8 [H, W, 3] RGB,
    [H, W, 4] RGBX (the fourth byte ignored) or, with ``rgba``, RGBA composited onto the
    checkerboard (``cell``, ``light``, ``dark``) first. ``coef`` is
    ``normalize.arithmetic(lut)``."""
    h, w, step = pixels.shape
    n_patches, reps, ph, pw, _ = out.shape
    rows = n_patches // cols
    run = pw * 3
    width = cols * pw
    inside = min(w, width)
    line = np.empty(width * 3, np.float32)
    for x in range(inside, width):
        for c in range(3):
            line[3 * x + c] = fill[c]
    blank = np.empty(run, np.float32)
    for x in range(pw):
        for c in range(3):
            blank[3 * x + c] = fill[c]
    rgb = np.empty(inside * 3 if rgba else 0, np.uint8)
    src = pixels.reshape(-1)
    dst = out.reshape(-1)
    for r in range(rows):
        for y in range(ph):
            sy = r * ph + y
            if sy < h:
                if rgba:
                    _checkerboard_row(src, sy * w * 4, inside, sy, cell, light, dark, rgb)
                    _normalize_line(rgb, 0, inside, 3, coef, lut, line)
                else:
                    _normalize_line(src, sy * w * step, inside, step, coef, lut, line)
                for q in range(cols):
                    n = r * cols + q
                    for t in range(reps):
                        copy_run(dst, ((n * reps + t) * ph + y) * run, line, q * run, run)
            else:
                for q in range(cols):
                    n = r * cols + q
                    for t in range(reps):
                        copy_run(dst, ((n * reps + t) * ph + y) * run, blank, 0, run)


def cut_patches(pixels: np.ndarray, lut: np.ndarray, fill, cols: int, out: np.ndarray,
                checkerboard: tuple[int, int, int] | None = None) -> np.ndarray:
    """Write ``out`` (float32 [N, T, ph, pw, 3] or [N, ph, pw, 3], C-contiguous, N a
    multiple of ``cols``) from ``pixels`` as ``grid_patches`` describes; ``lut`` float32
    [3, 256] is the normalization, ``fill`` its 3 values for pixels outside the image.
    ``checkerboard`` (cell, light, dark): ``pixels`` is RGBA, composited onto it."""
    if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8 or pixels.ndim != 3 \
            or pixels.shape[2] not in (3, 4) or pixels.shape[0] < 1 or pixels.shape[1] < 1:
        raise ValueError(f"pixels must be uint8 [H, W, 3 or 4], got {getattr(pixels, 'dtype', type(pixels))} "
                         f"{getattr(pixels, 'shape', '')}")
    if checkerboard is not None and pixels.shape[2] != 4:
        raise ValueError("a checkerboard composite needs RGBA pixels [H, W, 4]")
    view = out[:, None] if out.ndim == 4 else out
    if out.dtype != np.float32 or view.ndim != 5 or view.shape[4] != 3 or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous float32 [N, T, ph, pw, 3], got {out.dtype} {out.shape}")
    if cols < 1 or view.shape[0] % cols:
        raise ValueError(f"{view.shape[0]} patches are not rows of {cols}")
    if lut.dtype != np.float32 or lut.shape[0] < 3 or lut.shape[1] != 256:
        raise ValueError("lut must be float32 [3, 256]")
    fill = np.ascontiguousarray(fill, dtype=np.float32).reshape(3)
    lut = np.ascontiguousarray(lut[:3])
    cell, light, dark = checkerboard if checkerboard is not None else (1, 0, 0)
    if cell < 1 or not (0 <= light <= 255 and 0 <= dark <= 255):
        raise ValueError(f"checkerboard needs a positive cell and 8-bit colours, got {checkerboard}")
    grid_patches(np.ascontiguousarray(pixels), checkerboard is not None, int(cell), int(light), int(dark),
                 arithmetic(lut), lut, fill, int(cols), view)
    return out


def warmup() -> None:
    """Compile (or load from the on-disk cache) every path: RGB, RGBX and RGBA sources,
    the arithmetic and the table."""
    table = np.tile(np.arange(256, dtype=np.float32), (3, 1)) * np.float32(0.5)
    rounded = np.round(table * 3) / np.float32(7)  # no arithmetic reproduces it: lookup
    for channels, board in ((3, None), (4, None), (4, (2, 200, 100))):
        img = (np.arange(5 * 7 * channels) * 37 % 256).astype(np.uint8).reshape(5, 7, channels)
        for lut in (table, rounded):
            cut_patches(img, lut, (-1, -2, -3), 2, np.empty((6, 2, 2, 4, 3), np.float32), board)
            cut_patches(img, lut, (-1, -2, -3), 2, np.empty((6, 2, 4, 3), np.float32), board)
