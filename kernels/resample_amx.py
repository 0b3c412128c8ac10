"""The horizontal resampling pass on AMX tiles (``amx``): RGBX rows in, packed RGB out.

A shrink's horizontal pass over 16 rows is a small matrix product: 16 rows of source
bytes times a matrix of weights. Outputs go in bands of five: a tile row of 16 int32
holds five RGB pixels (15 sums). A band reads the 16-pixel (64-byte) runs of source
columns its taps span; the weight tile of a run has a row per source pixel and, for
output j and channel c, the weight at column 4 * (3j + c) + c (the channel's own byte of
the pixel; the padding byte X gets 0). Each 22-bit weight goes in as three signed bytes
(``amx.split_weight``), and the three int32 products recombine exactly (``amx.finish``),
so the result is the int32 path's, bit for bit. ``resample_pil``'s horizontal pass calls
``try_horizontal`` where the process has AMX and the call has enough rows.
"""

from __future__ import annotations

import numba
import numpy as np

from . import amx
from .convolve_u8 import HALF, PRECISION_BITS

_BAND = 5
#: The fewest taps an output must have for AMX to be used (``pays``)
MIN_TAPS = 5
#: The fewest rows a call must have for AMX to be used: its plan (``plan``) costs
#: about as much as 3-5 blocks of 16 rows, so the passes over a few rows at a time of the
#: fused resize-and-patchify writers keep to int16 pairs
MIN_ROWS = 128


@numba.njit(nogil=True, cache=True)
def _band_span(bounds, o0, o1):
    lo = bounds[o0, 0]
    hi = lo + 1
    for o in range(o0, o1):
        lo = min(lo, bounds[o, 0])
        hi = max(hi, bounds[o, 0] + bounds[o, 1])
    return lo, hi


@numba.njit(nogil=True, cache=True)
def plan(bounds, kk, in_w):
    """(runs, starts, weights) for ``horizontal``: per band, how many 16-pixel source
    runs it reads, their byte offsets in a row (the last run ends at the row end at the
    latest) and their weight tiles, int8 [bands, runs, 3 weight bytes, 1024]. No bands
    when a weight does not split into three bytes or rows are under 16 pixels."""
    out_w = bounds.shape[0]
    nb = (out_w + _BAND - 1) // _BAND
    most = 1
    for b in range(nb):
        lo, hi = _band_span(bounds, b * _BAND, min(b * _BAND + _BAND, out_w))
        most = max(most, (hi - lo + 15) // 16)
    none = (np.zeros(0, np.int64), np.zeros((0, 1), np.int64), np.zeros((0, 1, 3, amx.TILE_BYTES), np.int8))
    if in_w < 16:
        return none
    runs = np.zeros(nb, np.int64)
    starts = np.zeros((nb, most), np.int64)
    weights = np.zeros((nb, most, 3, amx.TILE_BYTES), np.int8)
    for b in range(nb):
        o0, o1 = b * _BAND, min(b * _BAND + _BAND, out_w)
        lo, hi = _band_span(bounds, o0, o1)
        runs[b] = (hi - lo + 15) // 16
        for k in range(runs[b]):
            starts[b, k] = min(lo + 16 * k, in_w - 16)
        for o in range(o0, o1):
            for i in range(bounds[o, 1]):
                px = bounds[o, 0] + i
                k = 0
                while px >= starts[b, k] + 16:
                    k += 1
                b0, b1, b2, ok = amx.split_weight(np.int64(kk[o, i]))
                if not ok:
                    return none
                at = (px - starts[b, k]) * 64
                for c in range(3):
                    col = at + 4 * (3 * (o - o0) + c) + c
                    weights[b, k, 0, col] = b0
                    weights[b, k, 1, col] = b1
                    weights[b, k, 2, col] = b2
        for k in range(runs[b]):
            starts[b, k] *= 4
    return runs, starts, weights


@numba.njit(nogil=True, cache=True, inline="always")
def horizontal(sflat, in_row, out_h, dflat, out_w, runs, starts, weights):
    """The horizontal pass of RGBX rows (``in_row`` bytes each) into packed RGB rows of
    ``out_w`` pixels, 16 rows at a time; the last 16 may overlap the ones before and are
    written again with the same values. Needs ``out_h`` >= 16, ``amx.permitted()`` and a
    plan with bands. Row block by row block: the weight tiles (a few hundred KB) stay in
    L2 while the source streams through."""
    amx.configure(amx.tile_config())
    sums = np.empty(3 * 256, np.int32)
    wflat = weights.reshape(weights.size)
    most = weights.shape[1]
    for yb in range(0, out_h, 16):
        y0 = min(yb, out_h - 16)
        for b in range(runs.shape[0]):
            amx.zero_sums()
            for k in range(runs[b]):
                amx.accumulate(sflat, y0 * in_row + starts[b, k], in_row, wflat, (b * most + k) * 3 * amx.TILE_BYTES)
            amx.store_sums(sums)
            o = b * _BAND
            amx.finish(sums, dflat, (y0 * out_w + o) * 3, out_w * 3, 3 * min(_BAND, out_w - o), HALF,
                       PRECISION_BITS)
    amx.release()


@numba.njit(nogil=True, cache=True, inline="always")
def pays(bounds):
    """AMX wins where outputs have 5 taps or more (any bicubic shrink; measured on whole
    1080p rows, caches cold as after a decode); on an upscale its mostly empty tiles lose
    to the int16-pair path, whose cost grows with the taps where AMX's does not."""
    most = 0
    for x in range(bounds.shape[0]):
        most = max(most, bounds[x, 1])
    return most >= MIN_TAPS


@numba.njit(nogil=True, cache=True)
def try_horizontal(sflat, in_w, out_h, dflat, bounds, kk):
    """``horizontal`` of RGBX rows into RGB ones where it pays and a plan exists (the
    caller checked ``amx.permitted()`` and ``out_h`` >= ``MIN_ROWS``); whether it ran."""
    if not pays(bounds):
        return False
    runs, starts, weights = plan(bounds, kk, in_w)
    if not runs.size:
        return False
    horizontal(sflat, in_w * 4, out_h, dflat, bounds.shape[0], runs, starts, weights)
    return True
