"""A pre-emphasized, float64-windowed log filterbank (one model's extractor), fused.

Per frame of ``win`` samples every ``hop``: the pre-emphasis in float32 (``x[i] - a *
x[i - 1]``, the first sample against itself, times ``scale``), the float64 window, a real
FFT of ``n_fft`` points in float64 (the frame zero-padded: a complex FFT of ``n_fft / 2``
points, radix 2, and the real unpacking), each bin rounded to complex64 and its magnitude
rounded to float32 (its hypot: the exact float64 squares' sum, square-rooted), squared in
float32; the mel bands summed in float64 and rounded once; ``log(max(mel, 1))`` rounded
once. Each output element is written once.
"""

from __future__ import annotations

import math

import numba
import numpy as np


def twiddles(n_fft: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bit-reversal order of ``n_fft / 2``, ``exp(-2 pi i k / (n_fft / 2))`` for the complex
    FFT, ``exp(-2 pi i k / n_fft)`` for the unpacking), float64."""
    m = n_fft // 2
    if m < 2 or m & (m - 1):
        raise ValueError(f"n_fft must be a power of two >= 4, got {n_fft}")
    bits = m.bit_length() - 1
    order = np.array([int(format(i, f"0{bits}b")[::-1], 2) for i in range(m)], np.int64)
    k = np.arange(m)
    half = np.exp(-2j * np.pi * k / m)
    full = np.exp(-2j * np.pi * np.arange(m + 1) / n_fft)
    return order, np.stack([half.real, half.imag]), np.stack([full.real, full.imag])


@numba.njit(nogil=True, cache=True)
def _fft(zr, zi, order, tw):
    """In place: the complex FFT of (zr, zi) (length a power of two), radix 2, decimation
    in time from the bit-reversed order."""
    m = zr.shape[0]
    for i in range(m):
        j = order[i]
        if j > i:
            zr[i], zr[j] = zr[j], zr[i]
            zi[i], zi[j] = zi[j], zi[i]
    size = 2
    while size <= m:
        step = m // size
        h = size // 2
        for start in range(0, m, size):
            for k in range(h):
                wr, wi = tw[0, k * step], tw[1, k * step]
                a, b = start + k, start + k + h
                tr = zr[b] * wr - zi[b] * wi
                ti = zr[b] * wi + zi[b] * wr
                zr[b], zi[b] = zr[a] - tr, zi[a] - ti
                zr[a], zi[a] = zr[a] + tr, zi[a] + ti
        size *= 2


@numba.njit(nogil=True, cache=True)
def log_fbank(wave, win, hop, n_fft, alpha, scale, window, order, tw_half, tw_full, filters, starts, ends, out):
    """``out[t, m]`` float32: frame ``t`` of ``wave`` (float32, starting at ``t * hop``) through
    the module docstring's steps; ``window`` float64 [win]; ``filters`` float32 [bins, mels],
    band ``b`` nonzero in bins ``[starts[b], ends[b])`` only (``bands``)."""
    m = n_fft // 2
    frames, mels = out.shape
    bins = m + 1
    y = np.zeros(n_fft)
    zr = np.empty(m)
    zi = np.empty(m)
    power = np.empty(bins, np.float32)
    a32 = np.float32(alpha)
    s32 = np.float32(scale)
    for t in range(frames):
        s = t * hop
        first = wave[s]
        y[0] = np.float64((first - a32 * first) * s32) * window[0]
        for j in range(1, win):
            y[j] = np.float64((wave[s + j] - a32 * wave[s + j - 1]) * s32) * window[j]
        for j in range(m):
            zr[j] = y[2 * j]
            zi[j] = y[2 * j + 1]
        _fft(zr, zi, order, tw_half)
        for k in range(bins):
            kk = k % m
            jj = (m - k) % m
            er, ei = 0.5 * (zr[kk] + zr[jj]), 0.5 * (zi[kk] - zi[jj])
            orr, oi = 0.5 * (zi[kk] + zi[jj]), -0.5 * (zr[kk] - zr[jj])
            wr, wi = tw_full[0, k], tw_full[1, k]
            re = np.float32(er + orr * wr - oi * wi)
            im = np.float32(ei + orr * wi + oi * wr)
            r64, i64 = np.float64(re), np.float64(im)
            mag = np.float32(math.sqrt(r64 * r64 + i64 * i64))  # hypot of float32s: exact squares
            power[k] = mag * mag
        for b in range(mels):
            acc = 0.0
            for k in range(starts[b], ends[b]):
                acc += np.float64(power[k]) * np.float64(filters[k, b])
            v = np.float32(acc)
            out[t, b] = np.float32(math.log(np.float64(v if v > np.float32(1.0) else np.float32(1.0))))


def bands(filters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each band's (column of ``filters`` [bins, mels]) nonzero span: starts, ends."""
    nz = filters != 0
    any_ = nz.any(0)
    starts = np.where(any_, nz.argmax(0), 0).astype(np.int64)
    ends = np.where(any_, filters.shape[0] - nz[::-1].argmax(0), 0).astype(np.int64)
    return starts, ends


def warmup() -> None:
    order, th, tf = twiddles(512)
    out = np.empty((1, 2), np.float32)
    filters = np.ones((257, 2), np.float32)
    log_fbank(np.zeros(400, np.float32), 400, 160, 512, 0.97, 32768.0, np.ones(400), order, th, tf, filters,
              *bands(filters), out)
