"""Band-limited sinc resampling of float32 audio, as torchaudio's ``transforms.Resample``
(vLLM's default resampler) computes it on the CPU.

The kernel is torchaudio's ``_get_sinc_resample_kernel`` with its defaults (Hann-windowed
sinc, ``lowpass_filter_width`` 6, ``rolloff`` 0.99) computed as ``transforms.Resample``
computes it: in float64 (the phase offsets ``-j / new`` taken in float32 first, as torch
divides an integer tensor), then rounded to float32; it equals torchaudio's bit for bit.

The convolution is ``F.conv1d`` of the zero-padded wave (``width`` before, ``width + orig``
after) with that kernel at stride ``orig``, one output channel per phase, then phases
interleaved and cut at ``ceil(new * n / orig)`` (the quotient rounded to float32 first, as
torch's ``as_tensor`` does). Output frame ``f``, phase ``j`` is the dot product of kernel
row ``j`` with the ``K`` padded samples from ``f * orig``. With mkldnn off (vLLM turns it
off) and one thread, torch 2.14's CPU conv1d (a GEMM through MKL 2024.2, by its results)
sums those dot products in one of two orders on the AVX-512 host measured (AMD EPYC), which
this kernel repeats:

* fused: when the conv has at least 4 phases and 12 output frames, in blocks of ``K``
  (all of it up to 192 taps, two halves up to 384, else 192 at a time), each block a
  float32 fused multiply-add chain from zero, the blocks' sums added in order;
* plain: otherwise (fewer phases or frames), one chain of float32 products each rounded,
  then added, from zero.

That gives torchaudio's output bit for bit except in the first two or three frames of a
conv of fewer than 12 frames, in a one-frame conv, and in one or two values of the first
frames of some convs of few phases, where MKL sums some other way: there the two differ by
a float32 rounding or two (1.2e-7 at most, measured). MKL picks its kernels by CPU, so on
another CPU torch's own sums may move at that level.

Only a phase's nonzero taps are summed (7% of them at 44.1 -> 16 kHz): a zero tap adds
``s * 0`` to a chain, which changes nothing while the samples are finite; a clip with an
infinite or NaN sample is summed whole, as torch sums it.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .simd_ir import fma32

LOWPASS_FILTER_WIDTH = 6
ROLLOFF = 0.99
#: taps summed per block on the fused path
BLOCK = 192


def reduced(orig: int, new: int) -> tuple[int, int]:
    """The rates divided by their gcd: (input samples, output samples) per period."""
    g = math.gcd(int(orig), int(new))
    return int(orig) // g, int(new) // g


def kernel_shape(orig: int, new: int) -> tuple[int, int, int]:
    """(phases, taps, width) of the kernel, computed without building it."""
    o, n = reduced(orig, new)
    base = min(o, n) * ROLLOFF
    width = math.ceil(LOWPASS_FILTER_WIDTH * o / base)
    return n, 2 * width + o, width


def sinc_kernel(orig: int, new: int) -> tuple[np.ndarray, int]:
    """(float32 [phases, taps], width): torchaudio's kernel for ``orig -> new``."""
    o, n = reduced(orig, new)
    lpw = LOWPASS_FILTER_WIDTH
    base = min(o, n) * ROLLOFF
    _, taps, width = kernel_shape(orig, new)
    idx = np.arange(-width, width + o, dtype=np.float64) / o
    out = np.empty((n, taps), np.float32)
    step = max(1, (1 << 20) // taps)  # rows at a time: float64 temporaries of about 8 MiB
    for j0 in range(0, n, step):
        j = -np.arange(j0, min(n, j0 + step), dtype=np.float32)
        t = (j / np.float32(n)).astype(np.float64)[:, None] + idx
        t *= base
        np.clip(t, -lpw, lpw, out=t)
        window = np.cos(t * math.pi / lpw / 2) ** 2
        t *= math.pi
        scale = base / o
        with np.errstate(invalid="ignore", divide="ignore"):
            rows = np.where(t == 0, 1.0, np.sin(t) / t)
        rows *= window * scale
        out[j0:j0 + len(j)] = rows
    return out, width


def output_length(samples: int, orig: int, new: int) -> int:
    """torchaudio's output length: ``ceil(new * samples / orig)`` (rates reduced by their
    gcd) with the quotient in float32, as ``torch.as_tensor`` of a Python float makes it."""
    if orig == new:
        return int(samples)
    o, n = reduced(orig, new)
    return int(np.ceil(np.float32(n * int(samples) / o)))


def input_needed(outputs: int, orig: int, new: int) -> int:
    """The fewest input samples whose resampling gives the first ``outputs`` samples of any
    longer clip's, equal: those the outputs' frames read (through the kernel's span), and
    at least the 12 frames after which the sums take the path a long clip's take."""
    if orig == new:
        return int(outputs)
    o, n = reduced(orig, new)
    _, taps, _ = kernel_shape(orig, new)
    return max(-(-int(outputs) // n) * o + taps, 12 * o)


def fused_path(phases: int, frames: int) -> bool:
    """Whether MKL's sgemm takes the fused, blocked path for this conv (see the module)."""
    return phases >= 4 and frames >= 12


def block_cuts(taps: int) -> np.ndarray:
    """int64 block boundaries over the taps on the fused path."""
    if taps <= BLOCK:
        return np.array([0, taps], np.int64)
    if taps <= 2 * BLOCK:
        return np.array([0, taps // 2, taps], np.int64)
    return np.array([*range(0, taps, BLOCK), taps], np.int64)


def tile_frames(phases: int) -> int:
    """Output frames per pass: the accumulators (two of phases x frames float32) stay
    within about 256 KiB, in the core's own cache."""
    return max(16, min(1024, (32768 // max(phases, 1)) // 16 * 16))


def resample(wave: np.ndarray, orig: int, new: int, taps_by_phase: np.ndarray, width: int,
             whole: bool = False) -> np.ndarray:
    """float32 [output_length]: ``wave`` (float32 [n]) resampled with ``taps_by_phase``
    (float32 [taps, phases]: ``sinc_kernel(orig, new)``'s kernel transposed) and its
    ``width``; ``whole``: every tap summed, the zeros too (as for a clip with non-finite
    samples, ``nonzero_spans``)."""
    x = np.ascontiguousarray(wave, dtype=np.float32)
    o, n = reduced(orig, new)
    taps = taps_by_phase.shape[0]
    length = min(output_length(len(x), orig, new), n * (len(x) // o + 1))
    frames = -(-length // n)  # those the output needs
    span = (taps - 1) // o + 1
    padded = np.zeros((frames + span) * o, np.float32)
    stop = max(0, min(len(x), len(padded) - width))
    padded[width:width + stop] = x[:stop]
    by_phase = np.ascontiguousarray(padded.reshape(frames + span, o).T)  # [r, m] = padded[m * o + r]
    out = np.empty(length, np.float32)
    fused = fused_path(n, len(x) // o + 1)
    cuts = block_cuts(taps) if fused else np.array([0, taps], np.int64)
    at = np.arange(taps, dtype=np.int64)
    whole = whole or not np.isfinite(x).all()
    lo, hi = (np.zeros(n, np.int64), np.full(n, taps, np.int64)) if whole else nonzero_spans(taps_by_phase)
    convolve(by_phase, taps_by_phase, at % o, at // o, cuts, lo, hi, fused, frames, tile_frames(n), out)
    return out


def nonzero_spans(taps_by_phase: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each phase's (column's) first and past-last nonzero tap. Only these are summed: a
    zero tap adds ``s * 0``, which changes no chain while the samples are finite (an
    infinite or NaN sample would make it NaN, so such a clip is summed whole, as torch
    sums it)."""
    nz = taps_by_phase != 0
    any_ = nz.any(0)
    lo = np.where(any_, nz.argmax(0), 0).astype(np.int64)
    hi = np.where(any_, len(nz) - nz[::-1].argmax(0), 0).astype(np.int64)
    return lo, hi


@numba.njit(nogil=True, cache=True, inline="always")
def _fused4(s0, s1, s2, s3, w, acc, count):
    """Four taps of every frame's chain, in order (fused)."""
    for t in range(count):
        acc[t] = fma32(s3[t], w[3], fma32(s2[t], w[2], fma32(s1[t], w[1], fma32(s0[t], w[0], acc[t]))))


@numba.njit(nogil=True, cache=True, inline="always")
def _plain4(s0, s1, s2, s3, w, acc, count):
    """Four taps of every frame's chain, in order (each product rounded, then added)."""
    for t in range(count):
        acc[t] = (((acc[t] + s0[t] * w[0]) + s1[t] * w[1]) + s2[t] * w[2]) + s3[t] * w[3]


@numba.njit(nogil=True, cache=True, inline="always")
def _fused1(s0, w, acc, count):
    for t in range(count):
        acc[t] = fma32(s0[t], w, acc[t])


@numba.njit(nogil=True, cache=True, inline="always")
def _plain1(s0, w, acc, count):
    for t in range(count):
        acc[t] = acc[t] + s0[t] * w


@numba.njit(nogil=True, cache=True)
def _chains(by_phase, taps_by_phase, rows, shifts, k0, k1, lo, hi, fused, t0, count, acc):
    """Taps k0..k1 of every phase's chain over the frames t0..t0+count, into ``acc``; phase
    ``j``'s taps outside ``[lo[j], hi[j])`` are skipped (zeros: adding ``s * 0`` to a
    chain changes nothing), four taps a pass."""
    phases = taps_by_phase.shape[1]
    for j in range(phases):
        k, end = max(k0, lo[j]), min(k1, hi[j])
        while k + 4 <= end:
            s0 = by_phase[rows[k], shifts[k] + t0:shifts[k] + t0 + count]
            s1 = by_phase[rows[k + 1], shifts[k + 1] + t0:shifts[k + 1] + t0 + count]
            s2 = by_phase[rows[k + 2], shifts[k + 2] + t0:shifts[k + 2] + t0 + count]
            s3 = by_phase[rows[k + 3], shifts[k + 3] + t0:shifts[k + 3] + t0 + count]
            if fused:
                _fused4(s0, s1, s2, s3, taps_by_phase[k:k + 4, j], acc[j], count)
            else:
                _plain4(s0, s1, s2, s3, taps_by_phase[k:k + 4, j], acc[j], count)
            k += 4
        while k < end:
            s0 = by_phase[rows[k], shifts[k] + t0:shifts[k] + t0 + count]
            if fused:
                _fused1(s0, taps_by_phase[k, j], acc[j], count)
            else:
                _plain1(s0, taps_by_phase[k, j], acc[j], count)
            k += 1


@numba.njit(nogil=True, cache=True)
def convolve(by_phase, taps_by_phase, rows, shifts, cuts, lo, hi, fused, frames, tile, out):
    """out[f * phases + j] = kernel row j's dot product with the padded samples from
    frame f (tap k's sample is ``by_phase[rows[k], f + shifts[k]]``), each a chain in tap
    order as MKL sums it (``fused``, over the blocks ``cuts``; see the module), for the
    frames ``out`` holds, phase ``j``'s taps outside ``[lo[j], hi[j])`` skipped (zeros)."""
    phases = taps_by_phase.shape[1]
    acc = np.zeros((phases, tile), np.float32)
    total = np.zeros((phases, tile), np.float32)
    for t0 in range(0, frames, tile):
        count = min(tile, frames - t0)
        for c in range(len(cuts) - 1):
            acc[:, :] = 0.0
            _chains(by_phase, taps_by_phase, rows, shifts, cuts[c], cuts[c + 1], lo, hi, fused, t0, count, acc)
            if c == 0:
                total[:, :] = acc
            else:
                total += acc
        for j in range(phases):
            for t in range(count):
                i = (t0 + t) * phases + j
                if i < out.shape[0]:
                    out[i] = total[j, t]
