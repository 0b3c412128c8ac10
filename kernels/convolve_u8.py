"""The fixed-point convolution loops both resampling passes run, over uint8 samples.

Weights are Resample.c's: int32 with ``PRECISION_BITS`` fraction bits, summed in int32
(wrapping like its ``int ss``) from ``HALF``, then shifted and clipped to a byte. The
loops are laid out for SIMD: a tap is one weight times a contiguous run of samples, so
the vertical pass convolves whole rows and the horizontal pass first transposes blocks
of rows (``horizontal_blocked``) to get the same shape. Taps go in int16 pairs (one
pairwise multiply-add does two) where the weights allow, else in int32. Which weights,
and which pass first, is ``resample_pil``'s business; the LLVM IR is ``simd_ir``'s.

Layout: ``bounds[i] = (first source index, tap count)``, ``kk[i, :tap count]`` the
weights; taps past the count are zero.
"""

from __future__ import annotations

import numba
import numpy as np

from .simd_ir import clip8_shifted, copy4, interleave_pairs, mac, pairs_dot, rows_dot, transposer

PRECISION_BITS = 22  # 32 - 8 - 2 in Resample.c
HALF = 1 << (PRECISION_BITS - 1)

_clip8 = clip8_shifted(PRECISION_BITS)
_transpose_4to4 = transposer(4, 4)
_transpose_3to4 = transposer(3, 4)
_transpose_4to3 = transposer(4, 3)


@numba.njit(nogil=True, cache=True, inline="always")
def _dot4(s, v0, v1, v2, v3, k0, k1, k2, k3):
    """s + four taps, in int32."""
    return mac(mac(mac(mac(s, v0, k0), v1, k1), v2, k2), v3, k3)


@numba.njit(nogil=True, cache=True, inline="always")
def convolve(src, pitch, lanes, bounds, kk, shift, acc, out, out_pitch, count):
    """out[y * out_pitch + j] = clip8(sum_i src[(bounds[y,0] - shift + i) * pitch + j] *
    kk[y, i]) for y < count, j < lanes.

    Taps go in chunks of four inside the lane loop, so partial sums stay in registers and
    ``acc`` is touched once per chunk; a short chunk repeats its last row with weight 0.
    Flat arrays with unsigned offsets: row views cost reference counting (atomic, per
    call of an inlined helper) and signed indices a wrap-around test per access.
    """
    for y in range(count):
        n = bounds[y, 1]
        base = (bounds[y, 0] - shift) * pitch
        o = np.uint64(y * out_pitch)
        if n < 1:
            for j in range(np.uint64(lanes)):
                out[o + j] = _clip8(np.int32(HALF))
            continue
        i = 0
        while True:
            last = i + 4 >= n
            k0 = kk[y, i]
            k1 = kk[y, i + 1] if i + 1 < n else np.int32(0)
            k2 = kk[y, i + 2] if i + 2 < n else np.int32(0)
            k3 = kk[y, i + 3] if i + 3 < n else np.int32(0)
            s0 = np.uint64(base + i * pitch)
            s1 = np.uint64(base + min(i + 1, n - 1) * pitch)
            s2 = np.uint64(base + min(i + 2, n - 1) * pitch)
            s3 = np.uint64(base + min(i + 3, n - 1) * pitch)
            if i == 0 and last:
                for j in range(np.uint64(lanes)):
                    out[o + j] = _clip8(_dot4(np.int32(HALF), src[s0 + j], src[s1 + j], src[s2 + j], src[s3 + j], k0, k1, k2, k3))
            elif i == 0:
                for j in range(np.uint64(lanes)):
                    acc[j] = _dot4(np.int32(HALF), src[s0 + j], src[s1 + j], src[s2 + j], src[s3 + j], k0, k1, k2, k3)
            elif last:
                for j in range(np.uint64(lanes)):
                    out[o + j] = _clip8(_dot4(acc[j], src[s0 + j], src[s1 + j], src[s2 + j], src[s3 + j], k0, k1, k2, k3))
            else:
                for j in range(np.uint64(lanes)):
                    acc[j] = _dot4(acc[j], src[s0 + j], src[s1 + j], src[s2 + j], src[s3 + j], k0, k1, k2, k3)
            if last:
                break
            i += 4


# -- taps in int16 pairs ----------------------------------------------------------------
#
# A 22-bit coefficient k is hi * 2**11 + lo with hi = k >> 11 and lo = k & 2047, both
# int16, so sum(v * k) = (sum(v * hi) << 11) + sum(v * lo) exactly (v a byte; the low
# parts' sum fits int32 below ``_PAIR_TAPS_MAX`` taps, and in int32 arithmetic, which
# wraps like Resample.c's ``int ss``, the recombination equals the direct sum whatever
# the weights, as long as each high part fits int16: ``pairable``).
# With two taps' samples side by side as int16 (``interleave_pairs``), one pairwise
# multiply-add (x86 ``pmaddwd``) does two taps of 16 lanes: half the multiplies of the
# int32 path and none of its slow 32-bit products.

_PAIR_BITS = 11
#: Beyond this many taps per output (a shrink by ~1000x) the int32 path is used: the
#: low parts' sum could leave int32.
_PAIR_TAPS_MAX = 2048

#: 64 outputs from interleaved pairs (``pairs_dot``), with hi and lo weights; ``_single``:
#: one multiply-add a pair, ``klo`` being the common shift (``split_pairs``)
_dot_pairs = pairs_dot(False, _PAIR_BITS, PRECISION_BITS)
_dot_pairs_single = pairs_dot(True, _PAIR_BITS, PRECISION_BITS)
#: the same with each pair read from two rows (``rows_dot``)
_dot_rows = rows_dot(False, _PAIR_BITS, PRECISION_BITS)
_dot_rows_single = rows_dot(True, _PAIR_BITS, PRECISION_BITS)


@numba.njit(nogil=True, cache=True, inline="always")
def convolve_rows_pairs(src, rowlen, rows, bounds, khi, klo, shift, out, out_pitch, count):
    """``convolve`` over whole rows (``src`` holds ``rows`` rows of ``rowlen`` >= 64
    samples; tap i of output y is row ``bounds[y, 0] + i``) in int16 pairs, 64 lanes at a
    time; a last partial run is done as the 64 lanes ending the row (its overlap with the
    previous run is written twice, with the same values). ``shift`` >= 0: single mode
    (``split_pairs``)."""
    width = khi.shape[1]
    last = (rows - 1) * rowlen
    for y in range(count):
        n = bounds[y, 1]
        o = y * out_pitch
        if n < 1:
            for j in range(rowlen):
                out[o + j] = _clip8(np.int32(HALF))
            continue
        first = bounds[y, 0] * rowlen
        j = 0
        while True:
            if j + 64 > rowlen:
                j = rowlen - 64
            if shift >= 0:
                _dot_rows_single(src, first + j, rowlen, (n + 1) // 2, last + j, khi, shift, y * width, out, o + j)
            else:
                _dot_rows(src, first + j, rowlen, (n + 1) // 2, last + j, khi, klo, y * width, out, o + j)
            j += 64
            if j >= rowlen:
                break


@numba.njit(nogil=True, cache=True)
def pairable(kk):
    """Whether every coefficient's high part fits int16 (|k| < 2**26; resampling weights
    stay below 2**23) and the taps are few enough for the low parts' sum."""
    if kk.shape[1] > _PAIR_TAPS_MAX:
        return False
    for x in range(kk.shape[0]):
        for i in range(kk.shape[1]):
            if kk[x, i] < -(1 << 26) or kk[x, i] >= (1 << 26):
                return False
    return True


@numba.njit(nogil=True, cache=True)
def split_pairs(bounds, kk):
    """(khi, klo, shift): each output's taps (2p, 2p+1) as two int16 packed in an int32
    (the first in the low half; a tap past the output's count is 0), int32 [out, pairs].
    When every weight is an int16 shifted left by a common ``shift`` (torch's int16
    weights in 22 bits), ``khi`` holds those int16 and one multiply-add a pair does (single
    mode; ``klo`` empty); else ``khi`` and ``klo`` hold hi = k >> 11 and lo = k & 2047 and
    ``shift`` is -1. For ``pairable`` coefficients."""
    n_out = bounds.shape[0]
    pairs = 1
    common = PRECISION_BITS  # the weights' common trailing zero bits, at most 22
    for x in range(n_out):
        pairs = max(pairs, (bounds[x, 1] + 1) // 2)
        for i in range(bounds[x, 1]):
            k = np.int64(kk[x, i])
            while k != 0 and (k >> common) << common != k:
                common -= 1
    single = True
    for x in range(n_out):
        for i in range(bounds[x, 1]):
            k = np.int64(kk[x, i]) >> common
            if k < -32768 or k > 32767:
                single = False
    khi = np.zeros((n_out, pairs), np.int32)
    klo = np.zeros((n_out, pairs if not single else 0), np.int32)
    for x in range(n_out):
        for i in range(bounds[x, 1]):
            k = np.int32(kk[x, i])
            at = np.uint32(16 * (i % 2))
            if single:
                khi[x, i // 2] |= np.int32(np.uint32(np.uint16(np.int16(k >> np.int32(common)))) << at)
                continue
            hi = np.uint32(np.uint16(np.int16(k >> np.int32(_PAIR_BITS))))
            lo = np.uint32(k & np.int32((1 << _PAIR_BITS) - 1))
            khi[x, i // 2] |= np.int32(hi << at)
            klo[x, i // 2] |= np.int32(lo << at)
    return khi, klo, (common if single else -1)


@numba.njit(nogil=True, cache=True, inline="always")
def _convolve_pairs(t, bounds, khi, klo, shift, xlo, xhi, pairs, res, out_w):
    """``convolve`` of a 64-lane block ``t`` (``t[x * 64 + j]``, one spare column at
    ``xhi - xlo``) in int16 pairs: outputs in runs of 32, each run's columns interleaved
    into ``pairs`` (L1-sized) first."""
    width = khi.shape[1]
    for x0 in range(0, out_w, 32):
        x1 = min(x0 + 32, out_w)
        lo = bounds[x0, 0]
        hi = lo + 1
        for x in range(x0, x1):
            lo = min(lo, bounds[x, 0])
            hi = max(hi, bounds[x, 0] + 2 * ((bounds[x, 1] + 1) // 2) - 1)
        hi = min(hi, xhi)
        for x in range(lo, hi):
            interleave_pairs(pairs, (x - lo) * 128, t, (x - xlo) * 64)
        for x in range(x0, x1):
            if shift >= 0:
                _dot_pairs_single(pairs, (bounds[x, 0] - lo) * 128, (bounds[x, 1] + 1) // 2, khi, shift, x * width,
                                  res, x * 64)
            else:
                _dot_pairs(pairs, (bounds[x, 0] - lo) * 128, (bounds[x, 1] + 1) // 2, khi, klo, x * width, res,
                           x * 64)


@numba.njit(nogil=True, cache=True, inline="always")
def _span(bounds):
    """The source columns [xlo, xhi) an axis's outputs read."""
    xlo = bounds[0, 0]
    xhi = bounds[0, 0] + bounds[0, 1]
    for x in range(1, bounds.shape[0]):
        xlo = min(xlo, bounds[x, 0])
        xhi = max(xhi, bounds[x, 0] + bounds[x, 1])
    return xlo, xhi


@numba.njit(nogil=True, cache=True, inline="always")
def _tap_setup(bounds, kk, lanes):
    """(paired, khi, klo, shift, pairs scratch) for ``_convolve_block``: int16 pairs where the
    block is 64 lanes and the weights allow (``pairable``), else the int32 path."""
    out_w = bounds.shape[0]
    paired = lanes == 64 and pairable(kk)
    shift = -1
    if paired:
        khi, klo, shift = split_pairs(bounds, kk)
        span = 1
        for x0 in range(0, out_w, 32):
            lo = bounds[x0, 0]
            hi = lo + 1
            for x in range(x0, min(x0 + 32, out_w)):
                lo = min(lo, bounds[x, 0])
                hi = max(hi, bounds[x, 0] + bounds[x, 1] + 1)
            span = max(span, hi - lo)
        pairs = np.empty(span * 128, np.int16)
    else:
        khi = klo = np.empty((0, 0), np.int32)
        pairs = np.empty(0, np.int16)
    return paired, khi, klo, shift, pairs


@numba.njit(nogil=True, cache=True, inline="always")
def _fill_block(t, sflat, y0, nr, in_row, xlo, xhi, xwide, nc, sp, slot, lanes):
    """Transpose source rows y0..y0+nr, columns [xlo, xhi), into ``t[x, r * slot + c]``."""
    # In tiles of 64 columns, so the part of ``t`` being filled stays in L1.
    for xt in range(xlo, xhi, 64):
        xe = min(xt + 64, xhi)
        xw = min(xe, xwide)
        xv = xt  # columns before xv moved 16 x 16 pixels at a time
        if slot == 4 and nr == 16:
            while xv + 16 <= xe:
                if sp == 4:
                    _transpose_4to4(t, (xv - xlo) * lanes, lanes, sflat, y0 * in_row + xv * 4, in_row)
                else:
                    _transpose_3to4(t, (xv - xlo) * lanes, lanes, sflat, y0 * in_row + xv * 3, in_row)
                xv += 16
            xw = max(xw, xv)
        for r in range(nr):
            so = (y0 + r) * in_row
            to = r * slot - xlo * lanes
            if slot == 4:
                for x in range(xv, xw):
                    copy4(t, to + x * lanes, sflat, so + x * sp)
            else:
                for x in range(xt, xw):
                    for c in range(slot):
                        t[to + x * lanes + c] = sflat[so + x * sp + c]
            for x in range(max(xv, xw), xe):
                for c in range(nc):
                    t[to + x * lanes + c] = sflat[so + x * sp + c]


@numba.njit(nogil=True, cache=True, inline="always")
def _drain_block(res, dflat, y0, nr, out_w, nc, slot, lanes):
    """Transpose ``res[x * lanes + r * slot + c]`` back into output rows y0..y0+nr."""
    out_row = out_w * nc
    for xt in range(0, out_w, 64):
        xe = min(xt + 64, out_w)
        xw = min(xe, out_w - 1) if slot > nc else xe
        xv = xt
        if slot == 4 and nr == 16:
            while xv + 16 <= xe:
                if nc == 4:
                    _transpose_4to4(dflat, y0 * out_row + xv * 4, out_row, res, xv * lanes, lanes)
                else:
                    _transpose_4to3(dflat, y0 * out_row + xv * 3, out_row, res, xv * lanes, lanes)
                xv += 16
            xw = max(xw, xv)
        for r in range(nr):
            do = (y0 + r) * out_row
            if slot == 4:
                # The byte past each pixel is rewritten by the next one.
                for x in range(xv, xw):
                    copy4(dflat, do + x * nc, res, x * lanes + r * slot)
            else:
                for x in range(xt, xw):
                    for c in range(nc):
                        dflat[do + x * nc + c] = res[x * lanes + r * slot + c]
            for x in range(max(xt, xw), xe):
                for c in range(nc):
                    dflat[do + x * nc + c] = res[x * lanes + r * slot + c]


@numba.njit(nogil=True, cache=True, inline="always")
def _convolve_block(t, bounds, kk, paired, khi, klo, shift, pairs, xlo, xhi, acc, res, lanes):
    if paired:
        _convolve_pairs(t, bounds, khi, klo, shift, xlo, xhi, pairs, res, bounds.shape[0])
    else:
        convolve(t, lanes, lanes, bounds, kk, xlo, acc, res, lanes, bounds.shape[0])


@numba.njit(nogil=True, cache=True, inline="always")
def horizontal_blocked(sflat, dflat, in_w, bounds, kk, nc, sp, slot, rb):
    """Horizontal pass over flat C-contiguous images, in blocks of ``rb`` rows: ``nc``
    channels out of source pixels ``sp`` bytes apart (4 for Pillow's own RGB layout).

    A per-pixel dot product over taps does not vectorise. Transposing a block of rows into
    ``t[x, r * slot + c]`` makes every tap a contiguous run of ``rb * slot`` samples that
    share one coefficient: the vertical pass's problem. RGB gets 4-byte slots so a pixel
    moves in and out as one 4-byte copy (the fourth lane is the next pixel's first byte:
    computed, never stored). ``nc``/``sp``/``slot``/``rb`` are constants at each call site.
    """
    out_w = bounds.shape[0]
    in_row = in_w * sp
    out_h = dflat.size // (out_w * nc) if out_w else 0
    if out_h == 0:
        return
    lanes = rb * slot
    xlo, xhi = _span(bounds)
    # A slot wider than a pixel reads one byte past the pixel: not for the row's last one.
    xwide = min(xhi, in_w - 1) if slot > sp else xhi
    # Lanes of rows past the image end are left uninitialised: they hold some uint8, their
    # sums are computed and discarded.
    # One spare column: a pair's second tap past the last one reads it (times 0).
    t = np.empty((max(xhi - xlo, 1) + 1) * lanes, np.uint8)
    res = np.empty(out_w * lanes, np.uint8)
    acc = np.empty(lanes, np.int32)
    paired, khi, klo, shift, pairs = _tap_setup(bounds, kk, lanes)
    for y0 in range(0, out_h, rb):
        nr = min(rb, out_h - y0)
        _fill_block(t, sflat, y0, nr, in_row, xlo, xhi, xwide, nc, sp, slot, lanes)
        _convolve_block(t, bounds, kk, paired, khi, klo, shift, pairs, xlo, xhi, acc, res, lanes)
        _drain_block(res, dflat, y0, nr, out_w, nc, slot, lanes)


@numba.njit(nogil=True, cache=True, inline="always")
def horizontal_blocked_two(sflat, dflat_a, dflat_b, in_w, bounds_a, kk_a, bounds_b, kk_b, nc, sp, slot, rb):
    """``horizontal_blocked`` of the same source rows to two widths at once: each block
    of rows is transposed once and read by both sets of taps."""
    out_wa, out_wb = bounds_a.shape[0], bounds_b.shape[0]
    in_row = in_w * sp
    out_h = dflat_a.size // (out_wa * nc) if out_wa else 0
    if out_h == 0:
        return
    lanes = rb * slot
    xlo_a, xhi_a = _span(bounds_a)
    xlo_b, xhi_b = _span(bounds_b)
    xlo, xhi = min(xlo_a, xlo_b), max(xhi_a, xhi_b)
    xwide = min(xhi, in_w - 1) if slot > sp else xhi
    t = np.empty((max(xhi - xlo, 1) + 1) * lanes, np.uint8)
    res_a = np.empty(out_wa * lanes, np.uint8)
    res_b = np.empty(out_wb * lanes, np.uint8)
    acc = np.empty(lanes, np.int32)
    paired_a, khi_a, klo_a, shift_a, pairs_a = _tap_setup(bounds_a, kk_a, lanes)
    paired_b, khi_b, klo_b, shift_b, pairs_b = _tap_setup(bounds_b, kk_b, lanes)
    for y0 in range(0, out_h, rb):
        nr = min(rb, out_h - y0)
        _fill_block(t, sflat, y0, nr, in_row, xlo, xhi, xwide, nc, sp, slot, lanes)
        _convolve_block(t, bounds_a, kk_a, paired_a, khi_a, klo_a, shift_a, pairs_a, xlo, xhi, acc, res_a, lanes)
        _drain_block(res_a, dflat_a, y0, nr, out_wa, nc, slot, lanes)
        _convolve_block(t, bounds_b, kk_b, paired_b, khi_b, klo_b, shift_b, pairs_b, xlo, xhi, acc, res_b, lanes)
        _drain_block(res_b, dflat_b, y0, nr, out_wb, nc, slot, lanes)

