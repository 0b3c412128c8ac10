"""Bit-exact numba ports of torch's CPU uint8 resize kernels, as torchvision and HF call them.

Processors whose HF reference is a torchvision one resize with
``tvF.resize(uint8, antialias=True)``, which on an x86 CPU with AVX2/AVX-512 runs torch's
native uint8 path (``UpSampleKernel.cpp``, a Pillow-SIMD port). It differs from Pillow in
ways that show in the pixels:

* weights are computed like Pillow's (double, same centre and bounds; antialiased
  bicubic uses a = -0.5) but quantized to int16 with a per-axis precision ``p``:
  the first p >= 0 with ``(int)(0.5 + wmax * 2**(p+1)) >= 32768``, capped at 22;
* the accumulator starts at ``1 << (p-1)`` and each pass writes ``clamp(acc >> p)``;
* the horizontal pass always runs first (uint8 intermediate); an axis that keeps its
  size is skipped.

Scaling torch's int16 weights by ``2**(22-p)`` turns them into exactly the 22-bit layout
of ``resample_pil`` (``(2**21 + sum(k * 2**(22-p) * x)) >> 22`` equals
``(2**(p-1) + sum(k * x)) >> p``), so the Pillow pass kernels run them unchanged.

``resize_nearest_exact_u8`` is ``tvF.resize(uint8, NEAREST_EXACT)`` (HF's mapping of PIL's
NEAREST). Its source index is ``fma(scale, i + 0.5, -0.5)`` rounded once, as torch's x86
builds (AVX2 / AVX-512 dispatch) compile it (``bicubic_f32.source_index``); at a few
sizes an unfused index picks another pixel. The antialiased paths are integer and agree
on every build.

All kernels are nopython, ``nogil=True``, ``cache=True``; images are HWC uint8 numpy
arrays (C = 1..4, each channel independent, as torch treats a contiguous CHW tensor).
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np

from . import resample_pil
from .bicubic_f32 import source_index
from .pixels import packed, rgb_or_rgbx

#: How HF's torchvision backend resizes for each PIL resample code (its
#: pil_torch_interpolation_mapping); BOX and HAMMING map too, but torch then fails on tensors.
PIL_FILTER_MODES = {
    resample_pil.NEAREST: "nearest-exact",
    resample_pil.LANCZOS: "lanczos",
    resample_pil.BILINEAR: "bilinear",
    resample_pil.BICUBIC: "bicubic",
}

__all__ = ["MODES", "coeffs", "coeffs_int16", "resize_aa_u8", "resize_nearest_exact_u8", "warmup"]

#: mode name -> torch's interp_size (the filter support is half of it).
MODES = {"bilinear": 2, "bicubic": 4, "lanczos": 6}
_KIND = {"bilinear": 0, "bicubic": 1, "lanczos": 2}
_PIL_BITS = resample_pil.PRECISION_BITS  # 22


# -- the antialiased uint8 path ---------------------------------------------------------


@numba.njit(nogil=True, cache=True)
def _aa_filter(kind, x):
    """torch's ``aa_filter`` of HelperInterpLinear / Cubic (a = -0.5) / Lanczos."""
    if kind == 0:
        x = abs(x)
        return 1.0 - x if x < 1.0 else 0.0
    if kind == 1:
        a = -0.5
        x = abs(x)
        if x < 1.0:
            return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        if x < 2.0:
            return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
        return 0.0
    if -3.0 <= x and x < 3.0:
        return resample_pil.sinc(x) * resample_pil.sinc(x / 3.0)
    return 0.0


@numba.njit(nogil=True, cache=True)
def _int16_coeffs_nb(in_size, out_size, kind):
    """``_compute_index_ranges_int16_weights`` (antialias=True, align_corners=False).

    Returns bounds int32[out, 2] = (xmin, n), kk int32[out, ksize] (int16 values) and
    the precision p.
    """
    interp_size = 2 * (kind + 1)
    scale = np.float64(in_size) / out_size
    if scale >= 1.0:
        support = (interp_size * 0.5) * scale
        invscale = 1.0 / scale
    else:
        support = interp_size * 0.5
        invscale = 1.0
    ksize = int(math.ceil(support)) * 2 + 1
    bounds = np.empty((out_size, 2), np.int32)
    w = np.zeros((out_size, ksize), np.float64)
    wt_max = 0.0
    for i in range(out_size):
        center = scale * (i + 0.5)
        xmin = max(int(center - support + 0.5), 0)  # C casts truncate toward zero
        xsize = min(int(center + support + 0.5), in_size) - xmin
        xsize = min(max(xsize, 0), ksize)
        total = 0.0
        for j in range(xsize):
            v = _aa_filter(kind, (j + xmin - center + 0.5) * invscale)
            w[i, j] = v
            total += v
        if total != 0.0:
            for j in range(xsize):
                w[i, j] /= total
                wt_max = max(wt_max, w[i, j])
        bounds[i, 0] = xmin
        bounds[i, 1] = xsize
    precision = 0
    while precision < 22:
        if int(0.5 + wt_max * (1 << (precision + 1))) >= (1 << 15):
            break
        precision += 1
    kk = np.zeros((out_size, ksize), np.int32)
    one = np.float64(1 << precision)
    for i in range(out_size):
        for j in range(ksize):
            v = w[i, j] * one
            k = int(-0.5 + v) if v < 0 else int(0.5 + v)
            # stored as int16_t in torch
            kk[i, j] = np.int32(np.int16(k))
    return bounds, kk, precision


@functools.lru_cache(maxsize=64)
def _cached(in_size: int, out_size: int, kind: int):
    bounds, kk, p = _int16_coeffs_nb(in_size, out_size, kind)
    return bounds, kk, p, kk << (_PIL_BITS - p)


def _check(in_size: int, out_size: int, mode: str) -> int:
    if mode not in _KIND:
        raise ValueError(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
    if in_size < 1 or out_size < 1:
        raise ValueError(f"sizes must be positive, got {in_size} -> {out_size}")
    return _KIND[mode]


def coeffs_int16(in_size: int, out_size: int, mode: str) -> tuple[np.ndarray, np.ndarray, int]:
    """torch's own weights for one axis: bounds int32[out, 2] = (xmin, n), kk int32[out,
    ksize] holding the int16 values, and the precision p (fresh arrays)."""
    bounds, kk, p, _ = _cached(int(in_size), int(out_size), _check(int(in_size), int(out_size), mode))
    return bounds.copy(), kk.copy(), p


def coeffs(in_size: int, out_size: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """The same weights in ``resample_pil``'s 22-bit layout (``kk << (22 - p)``), ready for
    ``resample_pil.resample_horizontal`` / ``resample_vertical`` and fused writers built
    on them (fresh arrays)."""
    bounds, _, _, kk22 = _cached(int(in_size), int(out_size), _check(int(in_size), int(out_size), mode))
    return bounds.copy(), kk22.copy()


_NO_COEFFS = (np.zeros((0, 2), np.int32), np.zeros((0, 1), np.int32))


def _as_hwc(img: np.ndarray, what: str) -> tuple[np.ndarray, bool]:
    if not isinstance(img, np.ndarray) or img.dtype != np.uint8:
        raise ValueError(f"{what} expects a uint8 numpy array")
    squeeze = img.ndim == 2
    if squeeze:
        img = img[:, :, None]
    if img.ndim != 3 or not 1 <= img.shape[2] <= 4:
        raise ValueError(f"{what} expects an HWC array with 1..4 channels, got shape {img.shape}")
    if img.shape[0] < 1 or img.shape[1] < 1:
        raise ValueError("input image is empty")
    return np.ascontiguousarray(img), squeeze


def _out_size(out_h, out_w) -> tuple[int, int]:
    out_h, out_w = int(out_h), int(out_w)
    if out_h < 1 or out_w < 1:
        raise ValueError("height and width must be > 0")
    return out_h, out_w


def resize_aa_u8(img: np.ndarray, out_h: int, out_w: int, mode: str = "bicubic") -> np.ndarray:
    """uint8 HWC -> uint8 [out_h, out_w, C], equal to torchvision's
    ``tvF.resize(chw_uint8, [out_h, out_w], interpolation=mode, antialias=True)`` on the
    CPU (``mode``: "bilinear", "bicubic" or "lanczos"). A 2-D array is one channel and
    gives a 2-D result. Same size in and out returns a copy."""
    img, squeeze = _as_hwc(img, "resize_aa_u8")
    out = _resize_aa(img, out_h, out_w, mode, img.shape[2])
    return out[:, :, 0] if squeeze else out


def resize_rgb(pixels: np.ndarray, out_h: int, out_w: int, mode: str = "bicubic") -> np.ndarray:
    """torchvision's resize (``mode``: "bilinear", "bicubic", "lanczos" antialiased, or
    "nearest-exact") of an RGB image held as uint8 [H, W, 3], or as [H, W, 4] RGBX
    (Pillow's own layout, read without copying; the fourth byte is padding) ->
    [out_h, out_w, 3]."""
    pixels = rgb_or_rgbx(pixels, "resize_rgb")
    if mode == "nearest-exact":
        return resize_nearest_exact_u8(packed(pixels), out_h, out_w)
    return _resize_aa(pixels, out_h, out_w, mode, 3)


def _resize_aa(img: np.ndarray, out_h: int, out_w: int, mode: str, nc: int) -> np.ndarray:
    out_h, out_w = _out_size(out_h, out_w)
    in_h, in_w = img.shape[:2]
    kind = _check(in_w, out_w, mode)
    bh, _, _, kh = _cached(in_w, out_w, kind) if out_w != in_w else (*_NO_COEFFS, 0, _NO_COEFFS[1])
    bv, _, _, kv = _cached(in_h, out_h, kind) if out_h != in_h else (*_NO_COEFFS, 0, _NO_COEFFS[1])
    return resample_pil.separable(img, out_h, out_w, bh, kh, bv, kv, nc, True, *resample_pil.any_channels(nc))


def resize_rgb_two(pixels: np.ndarray, size_a: tuple[int, int], size_b: tuple[int, int], mode: str = "bicubic") -> tuple[np.ndarray, np.ndarray]:
    """``(resize_rgb(pixels, *size_a, mode), resize_rgb(pixels, *size_b, mode))``, the
    source read once by both horizontal passes where their rows coincide."""
    pixels = rgb_or_rgbx(pixels, "resize_rgb_two")
    if mode != "nearest-exact":
        kind = _check(pixels.shape[1], _out_size(*size_a)[1], mode)
        both = resample_pil.resample_two(pixels, _out_size(*size_a), _out_size(*size_b),
                                         lambda i, o: _cached(i, o, kind)[::3], lambda *_: True)
        if both is not None:
            return both
    return resize_rgb(pixels, *size_a, mode), resize_rgb(pixels, *size_b, mode)


# -- nearest-exact (uint8) ------------------------------------------------------------------


@numba.njit(nogil=True, cache=True)
def _nearest_exact_index(in_size, out_size):
    scale = np.float32(in_size) / np.float32(out_size)
    idx = np.empty(out_size, np.int64)
    for i in range(out_size):
        real = source_index(scale, i)
        if real < np.float32(0.0):
            real = np.float32(0.0)
        idx[i] = min(int(math.floor(real + np.float32(0.5))), in_size - 1)
    return idx


@numba.njit(nogil=True, cache=True)
def _nearest_nb(img, iy, ix):
    out = np.empty((iy.shape[0], ix.shape[0], img.shape[2]), np.uint8)
    for y in range(iy.shape[0]):
        src = img[iy[y]]
        dst = out[y]
        for x in range(ix.shape[0]):
            dst[x] = src[ix[x]]
    return out


def resize_nearest_exact_u8(img: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """uint8 HWC -> uint8 [out_h, out_w, C], equal to ``tvF.resize(...,
    InterpolationMode.NEAREST_EXACT)`` (what HF maps PIL's NEAREST to)."""
    img, squeeze = _as_hwc(img, "resize_nearest_exact_u8")
    out_h, out_w = _out_size(out_h, out_w)
    in_h, in_w = img.shape[:2]
    if (in_h, in_w) == (out_h, out_w):
        out = img.copy()
    else:
        out = _nearest_nb(img, _nearest_exact_index(in_h, out_h), _nearest_exact_index(in_w, out_w))
    return out[:, :, 0] if squeeze else out


def warmup() -> None:
    """Compile (or load from the on-disk cache) every kernel a request can reach, so none
    pays: those of RGB images (``resize_aa_u8`` of other channel counts compiles on first
    use, as ``resample_pil.resize``'s does)."""
    resample_pil.warmup()
    a = (np.arange(5 * 7 * 3, dtype=np.int64) * 37 % 256).astype(np.uint8).reshape(5, 7, 3)
    for mode in MODES:
        resize_aa_u8(a, 3, 4, mode)
        resize_aa_u8(a, 9, 7, mode)
        resize_aa_u8(a, 5, 2, mode)
    resize_nearest_exact_u8(a, 3, 9)


def warmup_two_sizes() -> None:
    """``resize_rgb_two``'s kernels, for the families that resize to two sizes at once."""
    for c in (3, 4):
        resize_rgb_two(np.zeros((40, 60, c), np.uint8), (9, 13), (20, 21), "bilinear")
