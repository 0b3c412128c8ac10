"""float32 tensors written into a destination buffer as float32, bfloat16 or float16
(and raw uint8 pixel tensors copied as they are).

One pass: each element is read once and its little-endian bytes written once, so
narrowing a tensor costs no more than copying it. The destination is a byte buffer
(a serialized message or a shared-memory segment) at any offset: the kernels write its
uint16 / uint32 views element by element, plain stores that x86-64 and aarch64 allow at
any address (the tests write at every offset).

Rounding is to nearest, ties to even, on the bit pattern, as torch's ``.to(bfloat16)``
and numpy's ``astype(float16)`` round:

* bfloat16 is the top half of the float32 word after adding ``0x7FFF + lsb``; overflow
  goes to inf; NaN becomes 0xFFFF (torch's vectorized CPU conversion, as ``bf16.py``).
* float16: values of 65520 and more round to inf, values under 2**-14 to subnormals
  (and at most 2**-25 to zero); NaN stays a quiet NaN (0x7E00 with the top payload bits).

The loops are branch-free selects so LLVM vectorizes them.
"""

from __future__ import annotations

import numba
import numpy as np

#: Wire dtype name -> bytes per element.
WIDTHS = {"float32": 4, "bfloat16": 2, "float16": 2, "uint8": 1}
BF16_NAN = 0xFFFF


@numba.njit(nogil=True, cache=True)
def copy_words(src, dst):
    """dst[i] = src[i] for uint32 arrays (dst may be unaligned)."""
    for i in range(src.shape[0]):
        dst[i] = src[i]


@numba.njit(nogil=True, cache=True)
def to_bf16(src, dst):
    """float32 bit patterns (uint32) -> bfloat16 bit patterns (uint16), nearest-even."""
    for i in range(src.shape[0]):
        x = src[i]
        r = (x + np.uint32(0x7FFF) + ((x >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
        nan = (x & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
        dst[i] = np.uint16(np.uint32(BF16_NAN) if nan else r)


@numba.njit(nogil=True, cache=True, inline="always")
def f16_bits(x):
    """One float32 bit pattern -> its float16 bit pattern, nearest-even."""
    sign = (x >> np.uint32(16)) & np.uint32(0x8000)
    a = x & np.uint32(0x7FFFFFFF)
    # normal halves: rebias the exponent (127 -> 15), then round 13 bits away
    m = a - np.uint32(0x38000000)
    normal = (m + np.uint32(0x0FFF) + ((m >> np.uint32(13)) & np.uint32(1))) >> np.uint32(13)
    # subnormal halves (a < 2**-14): the significand in units of 2**-24, nearest-even
    e = a >> np.uint32(23)
    shift = np.uint32(126) - min(e, np.uint32(112))  # 14..24 where it is used
    shift = min(shift, np.uint32(31))
    mant = (a & np.uint32(0x7FFFFF)) | np.uint32(0x800000)
    q = mant >> shift
    rem = mant & ((np.uint32(1) << shift) - np.uint32(1))
    half = np.uint32(1) << (shift - np.uint32(1))
    sub = q + np.uint32((rem > half) | ((rem == half) & ((q & np.uint32(1)) == np.uint32(1))))
    r = np.uint32(0)
    if a > np.uint32(0x7F800000):
        r = np.uint32(0x7E00) | ((a >> np.uint32(13)) & np.uint32(0x1FF))
    elif a >= np.uint32(0x477FF000):  # 65520 and up (inf included)
        r = np.uint32(0x7C00)
    elif a >= np.uint32(0x38800000):  # 2**-14, the smallest normal half
        r = normal
    elif a > np.uint32(0x33000000):  # over 2**-25: at least the smallest subnormal
        r = sub
    return np.uint16(sign | r)


@numba.njit(nogil=True, cache=True)
def to_f16(src, dst):
    """float32 bit patterns (uint32) -> float16 bit patterns (uint16), nearest-even."""
    for i in range(src.shape[0]):
        dst[i] = f16_bits(src[i])


@numba.njit(nogil=True, cache=True)
def copy_bytes(src, dst):
    """dst[:] = src for uint8 arrays (a memcpy, without the GIL)."""
    dst[:] = src


def cast_into(src: np.ndarray, dst: np.ndarray, dtype: str) -> None:
    """Write the float32 array ``src`` (C order) into the uint8 buffer ``dst`` (exactly
    ``src.size * WIDTHS[dtype]`` bytes, any alignment) as ``dtype``, little-endian; a
    uint8 ``src`` (raw pixels) only as "uint8", copied."""
    if dtype == "uint8" or src.dtype == np.uint8:
        if src.dtype != np.uint8 or dtype != "uint8":
            raise ValueError(f"raw uint8 pixels go on the wire as uint8 only, not {src.dtype} as {dtype}")
        if dst.dtype != np.uint8 or dst.ndim != 1 or dst.size != src.size:
            raise ValueError(f"destination of {dst.size} bytes for {src.size} bytes")
        if src.size:
            copy_bytes(np.ascontiguousarray(src).reshape(-1), dst)
        return
    s = np.ascontiguousarray(src, dtype=np.float32).reshape(-1).view(np.uint32)
    if dst.dtype != np.uint8 or dst.ndim != 1 or dst.size != s.size * WIDTHS[dtype]:
        raise ValueError(f"destination of {dst.size} bytes for {s.size} elements of {dtype}")
    if not s.size:
        return
    if dtype == "float32":
        copy_words(s, dst.view(np.uint32))
    elif dtype == "bfloat16":
        to_bf16(s, dst.view(np.uint16))
    else:
        to_f16(s, dst.view(np.uint16))


def warmup() -> None:
    """Compile each kernel (destinations at even and odd offsets alike)."""
    src = np.linspace(-2.0, 2.0, 16, dtype=np.float32)
    buf = np.zeros(src.size * 4 + 1, np.uint8)
    for dtype, width in WIDTHS.items():
        values = src.view(np.uint8)[: src.size] if dtype == "uint8" else src
        cast_into(values, buf[: src.size * width], dtype)
        cast_into(values, buf[1 : 1 + src.size * width], dtype)
