"""A pre-emphasized, float64-windowed log filterbank (one model's extractor), fused.

Per frame of ``win`` samples every ``hop``: the pre-emphasis in float32 (``x[i] - a *
x[i - 1]``, the first sample against itself, times ``scale``), the float64 window, a real
FFT of ``n_fft`` points in float64 (the frame zero-padded), each bin rounded to complex64
and its magnitude rounded to float32 (its hypot: the exact float64 squares' sum,
square-rooted), squared in float32; the mel bands summed in float64 and rounded once;
``log(max(mel, 1))`` rounded once (libm's, by ``fastlog``). Each output element is written
once.

How: 8 frames at a time, one per float64 lane, on ``logmel``'s lane FFT (the frame packed
as ``n_fft / 2`` complex samples, a Stockham FFT of them, the real spectrum unpacked from
``Z[k]`` and ``Z[M - k]``); the roundings and the logarithm in loops LLVM vectorizes.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from . import fastlog
from .logmel import L, fft_lanes, fft_plan, sparse_filters, vload, vsplat, vstore


class Plan(NamedTuple):
    """Everything ``log_fbank`` needs besides the clip and the output."""

    win: int
    hop: int
    alpha: float  # the pre-emphasis coefficient (rounded to float32)
    scale: float  # the pre-emphasized samples' factor (float32)
    window: np.ndarray  # float64 [win]
    rs: np.ndarray  # the FFT's passes (logmel.fft_plan)
    offs: np.ndarray
    twr: np.ndarray
    twi: np.ndarray
    rtr: np.ndarray  # W_{n_fft}^k, k = 0..n_fft/2: the real FFT's unpacking
    rti: np.ndarray
    starts: np.ndarray  # int64 [mels]: each band's first bin
    lens: np.ndarray  # int64 [mels]: its number of bins
    weights: np.ndarray  # float64 [mels, max len]: its float32 weights


def plan(win: int, hop: int, n_fft: int, alpha: float, scale: float, window: np.ndarray,
         filters: np.ndarray) -> Plan:
    """Frames of ``win`` samples every ``hop``, an FFT of ``n_fft`` (even, at least
    ``win``), the float64 ``window`` [win] and float32 ``filters`` [n_fft / 2 + 1, mels]."""
    if n_fft % 2 or win > n_fft or win < 1 or hop < 1:
        raise ValueError(f"need an even n_fft >= win >= 1 and a positive hop, got {n_fft}, {win}, {hop}")
    fb = np.asarray(filters, np.float32)
    if fb.shape[0] != n_fft // 2 + 1:
        raise ValueError(f"filters must be [{n_fft // 2 + 1}, mels], got {fb.shape}")
    k = np.arange(n_fft // 2 + 1)
    return Plan(win, hop, alpha, scale, np.asarray(window, np.float64), *fft_plan(n_fft // 2),
                np.cos(2.0 * np.pi * k / n_fft), -np.sin(2.0 * np.pi * k / n_fft),
                *sparse_filters(np.ascontiguousarray(fb.T), 1.0))


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _gather(wave, s0, hop, win, alpha, scale, window, zr, zi, frames):
    """Lane ``l < frames`` <- the frame at ``wave[s0 + l * hop:]``, pre-emphasized, windowed,
    zero-padded and packed as complex (even samples real, odd imaginary); other lanes 0.
    Sample pairs outside, lanes inside: each row of 8 lanes is written at once."""
    m = zr.shape[0] // L
    a32, s32 = np.float32(alpha), np.float32(scale)
    starts = np.empty(L, np.int64)
    for lane in range(L):
        starts[lane] = s0 + min(lane, frames - 1) * hop  # lanes past the frames: zeroed below
    half = win // 2
    for lane in range(L):
        s = starts[lane]
        zr[lane] = np.float64((wave[s] - a32 * wave[s]) * s32) * window[0]  # the first sample against itself
        zi[lane] = np.float64((wave[s + 1] - a32 * wave[s]) * s32) * window[1] if win > 1 else 0.0
    for n in range(1, half):
        j = 2 * n
        w0, w1 = window[j], window[j + 1]
        for lane in range(L):
            s = starts[lane] + j
            x0, x1, x2 = wave[s - 1], wave[s], wave[s + 1]
            zr[n * L + lane] = np.float64((x1 - a32 * x0) * s32) * w0
            zi[n * L + lane] = np.float64((x2 - a32 * x1) * s32) * w1
    for n in range(max(half, 1), m):  # an odd window's last sample, then the zero padding
        j = 2 * n
        for lane in range(L):
            s = starts[lane] + j
            zr[n * L + lane] = np.float64((wave[s] - a32 * wave[s - 1]) * s32) * window[j] if j < win else 0.0
            zi[n * L + lane] = 0.0
    for lane in range(frames, L):
        for n in range(m):
            zr[n * L + lane] = 0.0
            zi[n * L + lane] = 0.0


@numba.njit(nogil=True, cache=True)
def _spectrum(zr, zi, rtr, rti, xr, xi):
    """``X_k = (Z_k + conj(Z_{M-k})) / 2 - i W^k (Z_k - conj(Z_{M-k})) / 2``, k = 0..M."""
    mm = zr.shape[0] // L
    ar, ai = vload(zr, 0), vload(zi, 0)
    zero = vsplat(0.0)
    vstore(xr, 0, ar + ai)
    vstore(xi, 0, zero)
    vstore(xr, mm * L, ar - ai)
    vstore(xi, mm * L, zero)
    for k in range(1, mm):
        cr, ci = rtr[k], rti[k]
        ar, ai = vload(zr, k * L), vload(zi, k * L)
        br, bi = vload(zr, (mm - k) * L), vload(zi, (mm - k) * L)
        er, ei, orr, oi = 0.5 * (ar + br), 0.5 * (ai - bi), 0.5 * (ai + bi), -0.5 * (ar - br)
        vstore(xr, k * L, er + orr * cr - oi * ci)
        vstore(xi, k * L, ei + orr * ci + oi * cr)


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _power(xr, xi, pw):
    """Each bin rounded to complex64, ``|X|`` rounded to float32, squared in float32."""
    for i in range(xr.shape[0]):
        re, im = np.float64(np.float32(xr[i])), np.float64(np.float32(xi[i]))
        mag = np.float32(math.sqrt(re * re + im * im))
        pw[i] = np.float64(mag * mag)


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _floored(acc, out):
    """``max(float32(acc), 1)``, as float64."""
    for i in range(acc.shape[0]):
        v = np.float32(acc[i])
        out[i] = np.float64(v if v > np.float32(1.0) else np.float32(1.0))


@numba.njit(nogil=True, cache=True)
def _log_fbank(wave, win, hop, alpha, scale, window, rs, offs, twr, twi, rtr, rti, starts, lens, weights, out):
    mm = rtr.shape[0] - 1
    frames, mels = out.shape
    zr, zi, wr, wi = np.empty(mm * L), np.empty(mm * L), np.empty(mm * L), np.empty(mm * L)
    xr, xi, pw = np.empty((mm + 1) * L), np.empty((mm + 1) * L), np.empty((mm + 1) * L)
    acc, floored = np.empty(mels * L), np.empty(mels * L)
    logs, near = np.empty(mels * L, np.float32), np.empty(mels * L, np.bool_)
    for g in range(0, frames, L):
        nl = min(L, frames - g)
        _gather(wave, g * hop, hop, win, alpha, scale, window, zr, zi, nl)
        if fft_lanes(zr, zi, wr, wi, rs, offs, twr, twi):
            _spectrum(wr, wi, rtr, rti, xr, xi)
        else:
            _spectrum(zr, zi, rtr, rti, xr, xi)
        _power(xr, xi, pw)
        for b in range(mels):
            s = starts[b]
            a = vsplat(0.0)
            for j in range(lens[b]):
                a = a + weights[b, j] * vload(pw, (s + j) * L)
            vstore(acc, b * L, a)
        _floored(acc, floored)
        fastlog.log_f32(floored, logs, near)
        for b in range(mels):
            for lane in range(nl):
                out[g + lane, b] = logs[b * L + lane]


def log_fbank(wave: np.ndarray, p: Plan, out: np.ndarray) -> None:
    """``out[t, m]`` float32: frame ``t`` of ``wave`` (float32, starting at ``t * hop``;
    ``out`` has at most ``(len - win) // hop + 1`` rows) through the module docstring's steps."""
    frames = out.shape[0]
    if frames and (frames - 1) * p.hop + p.win > len(wave):
        raise ValueError(f"{frames} frames need {(frames - 1) * p.hop + p.win} samples, got {len(wave)}")
    _log_fbank(wave, p.win, p.hop, p.alpha, p.scale, p.window, p.rs, p.offs, p.twr, p.twi, p.rtr, p.rti, p.starts,
               p.lens, p.weights, out)

