"""Resize + normalize + patchify one temporal group of video frames into merge-block-major rows.

Video processors patchify ``[T, C, H, W]`` frames by
``view(grid_t, temporal, C, gh/m, m, p, gw/m, m, p).permute(0, 3, 6, 4, 7, 2, 1, 5, 8)``:
rows are (block row, block column, sub-row, sub-column) of one temporal group, columns
(channel, frame of the group, patch row, patch column). Unlike an image, whose temporal
copies repeat one frame, each frame of the group fills its own columns.

Fused as the image writer (``patchify``) is: a few bands of output rows at a time, each
frame of the group goes through torch's separable resize (horizontal pass into a sliding
window of rows, then the vertical pass; ``resample_pil``'s passes with torch's weights),
each resized row is normalized once through the fused rescale+normalize table
(``normalize.normalize_row``) into planar rows that stay in cache, and the group's output
rows are written once, a merge block at a time, with streaming stores when large
(``normalize.streams``). The resized frames never exist whole. A uint8 ``out`` gets the
resized pixels themselves (raw, neither rescaled nor normalized), laid out the same way.
"""

from __future__ import annotations

import functools

import numba
import numpy as np

from . import resample_pil
from .normalize import OUT_DTYPES, normalize_row, store_fence, streams, tables
from .patchify import group_rows, slide_window, window_rows, write_band
from .resample_tv import coeffs


@functools.lru_cache(maxsize=None)
def _specialized(patch: int, merge: int, temporal: int):
    """The kernel with the geometry as constants (straight vector code for the moves),
    compiled per ``out`` dtype (float32 normalized, uint8 raw; the scratch rows take it)."""
    band = patch * merge
    group = group_rows(patch, merge)

    @numba.njit(nogil=True, cache=True)
    def kernel(frames, alias, out_h, out_w, bh, kh, bv, kv, coef, lut, out, stream):
        in_h, in_w = frames[0].shape[0], frames[0].shape[1]
        gw = out_w // patch
        flat = out.reshape(out.size)
        rows = np.empty((temporal, merge, 3, patch, out_w), out.dtype)  # one band of each frame, planar
        stage = np.empty(merge * merge * out.shape[1], out.dtype)  # streaming: one merge block, then out
        res = np.empty((temporal, min(group, out_h), out_w, 3), np.uint8)
        both = out_w != in_w and out_h != in_h
        win = np.empty((temporal, window_rows(bv, out_h, group) if both else 1, out_w, 3), np.uint8)
        wlo = whi = 0
        r = 0
        for y0 in range(0, out_h, group):
            y1 = min(y0 + group, out_h)
            n = y1 - y0
            if both:
                lo, hi = wlo, whi
                for t in range(temporal):
                    if alias[t] == t:
                        lo, hi = slide_window(win[t], frames[t], wlo, whi, bv, y0, y1, bh, kh)
                wlo, whi = lo, hi
            shifted = bv[y0:y1].copy()
            for y in range(n):
                shifted[y, 0] -= wlo
            for t in range(temporal):
                if alias[t] != t:
                    continue
                if both:
                    resample_pil.vertical_pass(win[t, :whi - wlo], res[t, :n], shifted, kv[y0:y1])
                elif out_w != in_w:
                    resample_pil.horizontal_pass(frames[t], res[t, :n], np.int64(y0), bh, kh)
                elif out_h != in_h:
                    resample_pil.vertical_pass(frames[t], res[t, :n], bv[y0:y1], kv[y0:y1])
                else:
                    res[t, :n] = frames[t][y0:y1]
            for bi in range(n // band):
                for t in range(temporal):
                    if alias[t] != t:
                        continue
                    for mh in range(merge):
                        for py in range(patch):
                            src = res[t, (bi * merge + mh) * patch + py].reshape(-1)
                            normalize_row(src, out_w, coef, lut, rows[t, mh, 0, py], rows[t, mh, 1, py],
                                          rows[t, mh, 2, py], 3)
                r = write_band(rows, alias, gw, patch, merge, temporal, flat, stage, r, stream)
        if stream:
            store_fence()

    return kernel


def group_resize_patchify(frames: list[np.ndarray], out_h: int, out_w: int, bh, kh, bv, kv, lut: np.ndarray,
                          out: np.ndarray, patch: int, merge: int) -> None:
    """One temporal group of frames (uint8 [H, W, 3], all one size; a frame that is the
    same array as the one before, as in a padded group, is resized once), resized to
    ``out_h`` x ``out_w`` (multiples of patch*merge) with the given axes' coefficients
    (``resample_tv.coeffs``'s layout, horizontal pass first; an axis that keeps its size
    is not read) -> ``out`` float32 [(out_h/patch)*(out_w/patch), 3*len(frames)*patch*patch],
    C-contiguous; or uint8 of that shape: the resized pixels, raw (``lut`` not read)."""
    t = len(frames)
    alias = np.arange(t, dtype=np.int64)
    for i in range(1, t):
        if frames[i] is frames[i - 1]:
            alias[i] = alias[i - 1]
    shape = frames[0].shape
    if any(f.ndim != 3 or f.shape != shape or f.shape[2] != 3 or f.dtype != np.uint8 for f in frames):
        raise ValueError(f"frames must be uint8 [H, W, 3] of one size, got {[(f.dtype, f.shape) for f in frames]}")
    band = patch * merge
    if out_h % band or out_w % band or out_h <= 0 or out_w <= 0:
        raise ValueError(f"target size {out_h}x{out_w} is not a positive multiple of {band}")
    if not out.flags.c_contiguous or out.dtype not in OUT_DTYPES or \
            out.shape != ((out_h // patch) * (out_w // patch), 3 * t * patch * patch):
        raise ValueError(f"out must be C-contiguous float32 or uint8 of {(out_h // patch) * (out_w // patch)} x "
                         f"{3 * t * patch**2}, got {out.dtype} {out.shape}")
    _specialized(int(patch), int(merge), t)(
        tuple(np.ascontiguousarray(f) for f in frames), alias, int(out_h), int(out_w), np.ascontiguousarray(bh),
        np.ascontiguousarray(kh), np.ascontiguousarray(bv), np.ascontiguousarray(kv), *tables(lut, out.dtype), out,
        streams(out))


def warmup(patch: int = 14, merge: int = 2, temporal: int = 2, dtype=np.float32) -> None:
    """Compile (or load from the on-disk cache) the kernel for this geometry and output
    dtype (float32, or uint8 for raw pixels)."""
    side = patch * merge
    frames = [np.zeros((side + 3, side + 5, 3), np.uint8)] * temporal
    out = np.empty((merge * merge, 3 * temporal * patch * patch), dtype)
    group_resize_patchify(frames, side, side, *coeffs(side + 5, side, "bicubic"), *coeffs(side + 3, side, "bicubic"),
                          np.zeros((3, 256), np.float32), out, patch, merge)
