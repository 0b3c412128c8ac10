"""bfloat16 as torch's CPU makes it, for processors that compute in bf16.

A bf16 value is the top half of a float32. torch rounds float32 -> bf16 to nearest,
ties to even, on the bit pattern (``(bits + 0x7FFF + lsb) >> 16``), so overflow goes
to inf and subnormals round like any other value. NaN becomes 0xFFFF: that is what
torch's vectorized CPU conversion writes (its scalar fallback would write 0x7FC0; both
are NaN). Values are handed around as float32 arrays holding bf16 values (exact) or as
the uint16 bit patterns.
"""

from __future__ import annotations

import numba
import numpy as np

NAN_BITS = 0xFFFF


@numba.njit(nogil=True, cache=True, inline="always")
def bf16_bits(v):
    """float32 scalar -> its bf16 bit pattern (uint16); callable from other kernels."""
    if v != v:
        return np.uint16(NAN_BITS)
    u = np.uint32(np.float32(v).view(np.uint32))
    return np.uint16((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))


@numba.njit(nogil=True, cache=True, inline="always")
def bf16_round(v):
    """float32 scalar -> the float32 holding its bf16 rounding."""
    return np.uint32(np.uint32(bf16_bits(v)) << np.uint32(16)).view(np.float32)


def to_bf16_bits(x) -> np.ndarray:
    """float32 array -> uint16 bf16 bit patterns, as ``t.to(torch.bfloat16)``."""
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    bits = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(NAN_BITS), bits)


def from_bf16_bits(bits) -> np.ndarray:
    """uint16 bf16 bit patterns -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_bf16(x) -> np.ndarray:
    """float32 array -> float32 array of its bf16 roundings."""
    return from_bf16_bits(to_bf16_bits(x))


def bf16_backend_lut(
    mean, std, rescale_factor: float = 1 / 255, do_rescale: bool = True, do_normalize: bool = True
) -> np.ndarray:
    """float32 [3, 256]: bfloat16 rescale+normalize of each uint8 value as torch's CPU
    computes it (transformers' torchvision-backend ``rescale_and_normalize`` in bf16).

    With both steps on, every op rounds to bf16 (the values are bf16; the HF output dtype
    is bfloat16): ``r = bf16(float(bf16(x)) * float32(factor))`` (torch multiplies a bf16
    tensor by a Python scalar in float32), then ``tvF.normalize`` with its statistics cast
    to bf16: ``bf16(bf16(r - mean) / std)``. With only the rescale, HF multiplies the uint8
    tensor by the factor and the result is float32 ``x * float32(factor)``. With neither,
    the values stay uint8 (returned as float32). Normalize alone raises in HF (uint8 is not
    a float tensor), so it raises here too.
    """
    mean = np.atleast_1d(np.asarray(mean, dtype=np.float64))
    std = np.atleast_1d(np.asarray(std, dtype=np.float64))
    x = np.arange(256, dtype=np.float32)
    lut = np.empty((3, 256), dtype=np.float32)
    if do_normalize and not do_rescale:
        raise ValueError("normalize without rescale is not supported in bfloat16 (a uint8 input is not a float tensor)")
    for c in range(3):
        if do_rescale and do_normalize:
            m = round_bf16(np.float32(mean[c % len(mean)]))
            s = round_bf16(np.float32(std[c % len(std)]))
            r = round_bf16(x * np.float32(rescale_factor))
            lut[c] = round_bf16(round_bf16(r - m) / s)
        elif do_rescale:
            lut[c] = x * np.float32(rescale_factor)
        else:
            lut[c] = x
    return lut
