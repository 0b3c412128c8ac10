"""``float32(log10(x))`` and ``float32(log(x))`` of many positive float64s, equal element
for element to rounding libm's ``math.log10`` / ``math.log``, in a loop LLVM vectorizes.

A scalar libm call per element is most of a log-mel's time (a call LLVM cannot
vectorize). Here: fdlibm's ``log`` (``e_log.c``: the exponent split off, the mantissa
``m`` in ``[sqrt(2)/2, sqrt(2))``, ``log(m) = f - hfsq + s (hfsq + R(s^2))``, under one
float64 ulp), times ``1 / ln 10`` for ``log10``, and the float32 rounding of that. Both
it and libm are within a few float64 ulps of the true value, so they round to different
float32s only where the value lies that close to a float32 rounding boundary: wherever
it lies within ``GUARD`` (relative, about 2^12 float64 ulps) of one, the element is
computed again with libm. On float64 values that are not close to a boundary, both
round to the same float32, so every element equals libm's, not just nearly.

The inputs must be positive, finite and normal (a log-mel's floored energies are).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_LG1, _LG2, _LG3, _LG4 = 6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01, \
    2.222219843214978396e-01
_LG5, _LG6, _LG7 = 1.818357216161805012e-01, 1.531383769920937332e-01, 1.479819860511658591e-01
_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
_INV_LN10 = 0.43429448190325182765
#: The relative distance from a float32 rounding boundary within which libm decides.
GUARD = 2.0 ** -40
_MANTISSA = (1 << 52) - 1
_SQRT2_MANTISSA = 0x6A09E667F3BCD  # the mantissa bits of sqrt(2)
_ONE = 1023 << 52  # the exponent bits of [1, 2)


@intrinsic
def _bits(typingctx, x):
    """The float64's bits as an int64."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _from_bits(typingctx, b):
    """The int64's bits as a float64."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@numba.njit(nogil=True, cache=True, inline="always", error_model="numpy")
def _log(x):
    """fdlibm's ``log`` of a positive normal float64 (no call, no branch)."""
    b = _bits(x)
    mant = b & _MANTISSA
    big = np.int64(mant >= _SQRT2_MANTISSA)  # m >= sqrt(2): m / 2, and one more in the exponent
    k = np.float64((b >> 52) - 1023 + big)
    f = _from_bits(mant | (_ONE - (big << 52))) - 1.0
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (_LG2 + w * (_LG4 + w * _LG6))
    t2 = z * (_LG1 + w * (_LG3 + w * (_LG5 + w * _LG7)))
    hfsq = 0.5 * f * f
    return k * _LN2_HI - ((hfsq - (s * (hfsq + t2 + t1) + k * _LN2_LO)) - f)


@numba.njit(nogil=True, cache=True, inline="always", error_model="numpy")
def _rounded(y, out, i, near):
    """``out[i] = float32(y)``; ``near[i]``: whether ``y`` is within GUARD of a boundary."""
    r = np.float32(y)
    out[i] = r
    near[i] = (np.float32(y * (1.0 + GUARD)) != r) | (np.float32(y * (1.0 - GUARD)) != r)


@numba.njit(nogil=True, cache=True, error_model="numpy")  # no zero-division branch: vectorized
def log10_f32(x, out, near):
    """``out[i] = float32(math.log10(x[i]))`` (``near``: a bool scratch as long as ``x``)."""
    n = x.shape[0]
    for i in range(n):
        _rounded(_log(x[i]) * _INV_LN10, out, i, near)
    for i in range(n):
        if near[i]:
            out[i] = np.float32(math.log10(x[i]))


@numba.njit(nogil=True, cache=True, error_model="numpy")  # no zero-division branch: vectorized
def log_f32(x, out, near):
    """``out[i] = float32(math.log(x[i]))`` (``near``: a bool scratch as long as ``x``)."""
    n = x.shape[0]
    for i in range(n):
        _rounded(_log(x[i]), out, i, near)
    for i in range(n):
        if near[i]:
            out[i] = np.float32(math.log(x[i]))
