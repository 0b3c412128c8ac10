"""Log-mel spectrogram frames and their dMel bins, as torch computes them in float32,
here in float64.

The pipeline (one mono float32 clip, ``T = ceil(len / hop)`` frames): frame ``t`` is
``n_fft`` samples from ``t * hop - left`` (zeros outside the clip: the left pad, and the
right pad to a multiple of ``hop``), times the window in float32 (``frame * window``
rounds to float32 before the FFT, as torch's ``stft`` does), its real FFT (``n_fft / 2 +
1`` bins), the magnitude ``sqrt(max(re^2 + im^2, floor))``, the mel filters (sparse:
each bin touches at most two triangles), ``max(mel, mel_floor)``, ``log10``. The log-mel
is rounded to float32 once, at the end; a dMel bin is the argmin over
``|clamp(v, lo, hi) - centers|`` in float32, the first on a tie (torch's ``argmin``).

Why float64: the reference (torch's ``stft`` on MKL's float32 FFT, a float32 matmul and
``log10``) cannot be reproduced bit for bit without MKL's own algorithm. Computed in
float64, the result is the exact value of the reference's inputs up to ~1e-15; the
reference's own float32 rounding is what remains (about an ulp of the log-mel where a
band's energy is not far below the frame's; much more in bands far below the loudest,
where the float32 FFT's error, ~1e-7 of the frame's norm, is not small against them).

How: 8 frames at a time, one per float64 lane of ``f64x8`` (a numba type for LLVM's
``<8 x double>``: explicit vector loads, stores and arithmetic, so nothing depends on
LLVM proving that arrays do not alias). A frame's ``n_fft`` real samples are packed as
``M = n_fft / 2`` complex ones (even samples real, odd imaginary), ``gather16`` loading 16
samples of each of the 8 frames and transposing them into lanes; a Stockham FFT of
``M`` (radix 5, 3, any odd prime, then 8, 4, 2) in ping-pong buffers; the real
spectrum unpacked from ``Z[k]`` and ``Z[M - k]``; the magnitude by AVX-512's reciprocal
square root and two Newton steps (``sqrt`` elsewhere). The spectrum is computed doubled
(``2 X``) and the mel weights halved, exactly (powers of two); with ``power`` 2 (the power
spectrum ``|X|^2``, no square root) the spectrum is ``4 |X|^2`` and the weights quartered.
The ``log10`` is libm's, rounded to float32, many at a time (``fastlog``).

Centered frames (``log_mel_centered``): ``torch.stft(center=True)``
pads the clip by ``n_fft / 2`` on each side by reflection; the padded clip goes through the
same frames with no left pad, ``len // hop`` of them (the STFT's last frame dropped).

dMel bins without the logarithm: ``bin(mel)`` (the float32 log-mel quantized) never
decreases as ``mel`` grows, so it is the number of thresholds ``taus[j] <= mel``, where
``taus[j]`` is the least float64 mel whose bin exceeds ``j`` (found once per
configuration by bisection over the float64 values, with this module's own ``log10`` and
quantizer: the fused kernel's bins equal ``quantize`` of its log-mel).

``mel_filter_bank`` is transformers' ``audio_utils.mel_filter_bank`` (htk, kaldi and
slaney scales, slaney norm) operation for operation; ``hann_window`` and
``linspace_f32`` are torch's ``hann_window`` and ``linspace(float64).to(float32)``.
"""

from __future__ import annotations

import math
import operator
from fractions import Fraction
from typing import NamedTuple

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, overload, register_model

from . import fastlog
from .simd_ir import array_data, declare, host_features

L = 8  # frames per vector, one float64 lane each
F32, F64, I8, I32, I64 = ir.FloatType(), ir.DoubleType(), ir.IntType(8), ir.IntType(32), ir.IntType(64)
V8 = ir.VectorType(F64, L)
#: LLVM may fuse a multiply into the add that uses it (one rounding instead of two).
CONTRACT = ("contract",)

# -- f64x8: 8 float64 lanes as one value --------------------------------------------------


class F64x8(types.Type):
    """LLVM's ``<8 x double>``: made by ``vload`` / ``vsplat``, combined with + - * (with
    each other or with scalars), written by ``vstore``."""

    def __init__(self) -> None:
        super().__init__(name="f64x8")


f64x8 = F64x8()


@register_model(F64x8)
class _F64x8Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, V8)


def _splat(builder, x, vty=V8):
    v = builder.insert_element(ir.Constant(vty, ir.Undefined), x, ir.Constant(I32, 0))
    return builder.shuffle_vector(v, ir.Constant(vty, ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, vty.count), [0] * vty.count))


def _vec(context, builder, ty, value):
    """A f64x8 operand as it is; a scalar one cast to float64 in every lane."""
    return value if ty == f64x8 else _splat(builder, context.cast(builder, value, ty, types.float64))


def _vptr(context, builder, aty, arr, idx):
    return builder.bitcast(builder.gep(array_data(context, builder, aty, arr), [idx]), V8.as_pointer())


@intrinsic
def vload(typingctx, arr, idx):
    """``arr[idx:idx + 8]`` (float64, no bounds check)."""
    def codegen(context, builder, sig, args):
        return builder.load(_vptr(context, builder, sig.args[0], args[0], args[1]), align=8)
    return f64x8(arr, idx), codegen


@intrinsic
def vstore(typingctx, arr, idx, v):
    """``arr[idx:idx + 8] = v`` (no bounds check)."""
    def codegen(context, builder, sig, args):
        builder.store(args[2], _vptr(context, builder, sig.args[0], args[0], args[1]), align=8)
        return context.get_dummy_value()
    return types.none(arr, idx, v), codegen


@intrinsic
def vsplat(typingctx, x):
    """``x`` in every lane."""
    def codegen(context, builder, sig, args):
        return _vec(context, builder, sig.args[0], args[0])
    return f64x8(x), codegen


def _binary(op: str):
    @intrinsic
    def vop(typingctx, a, b):
        def codegen(context, builder, sig, args):
            x = _vec(context, builder, sig.args[0], args[0])
            y = _vec(context, builder, sig.args[1], args[1])
            return getattr(builder, op)(x, y, flags=CONTRACT)
        return f64x8(a, b), codegen
    return vop


vadd, vsub, vmul = _binary("fadd"), _binary("fsub"), _binary("fmul")


def _operands(a, b) -> bool:
    scalar = (types.Float, types.Integer)
    return (a == f64x8 and (b == f64x8 or isinstance(b, scalar))) or (b == f64x8 and isinstance(a, scalar))


@overload(operator.add)
def _add(a, b):
    return (lambda a, b: vadd(a, b)) if _operands(a, b) else None


@overload(operator.sub)
def _sub(a, b):
    return (lambda a, b: vsub(a, b)) if _operands(a, b) else None


@overload(operator.mul)
def _mul(a, b):
    return (lambda a, b: vmul(a, b)) if _operands(a, b) else None


@intrinsic
def vmax(typingctx, v, x):
    """``v`` where ``v > x``, else ``x`` (a NaN lane becomes ``x``)."""
    def codegen(context, builder, sig, args):
        s = _vec(context, builder, sig.args[1], args[1])
        return builder.select(builder.fcmp_ordered(">", args[0], s), args[0], s)
    return f64x8(v, x), codegen


@intrinsic
def vge(typingctx, v, x):
    """1.0 where ``v >= x``, else 0.0 (a NaN lane: 0.0)."""
    def codegen(context, builder, sig, args):
        s = _vec(context, builder, sig.args[1], args[1])
        one, zero = _splat(builder, ir.Constant(F64, 1.0)), _splat(builder, ir.Constant(F64, 0.0))
        return builder.select(builder.fcmp_ordered(">=", args[0], s), one, zero)
    return f64x8(v, x), codegen


@intrinsic
def vget(typingctx, v, lane):
    """Lane ``lane`` of ``v``."""
    def codegen(context, builder, sig, args):
        return builder.extract_element(args[0], args[1])
    return types.float64(v, lane), codegen


@intrinsic
def vmag(typingctx, re, im, floor):
    """``sqrt(max(re^2 + im^2, floor))`` per lane, to float64 accuracy (a few ulp): the
    14-bit ``vrsqrt14pd`` and two Newton steps where the CPU has AVX-512, else ``sqrt``."""
    def codegen(context, builder, sig, args):
        r, i = args[0], args[1]
        p = builder.fadd(builder.fmul(r, r, flags=CONTRACT), builder.fmul(i, i, flags=CONTRACT), flags=CONTRACT)
        fl = _vec(context, builder, sig.args[2], args[2])
        p = builder.select(builder.fcmp_ordered(">", p, fl), p, fl)
        if "avx512f" not in host_features(context):
            return builder.call(declare(builder, "llvm.sqrt.v8f64", V8, [V8]), [p])
        y = builder.call(declare(builder, "llvm.x86.avx512.rsqrt14.pd.512", V8, [V8, V8, I8]),
                         [p, ir.Constant(V8, [0.0] * L), ir.Constant(I8, -1)])
        hp = builder.fmul(p, _splat(builder, ir.Constant(F64, 0.5)))
        for _ in range(2):  # y <- y * (1.5 - (p / 2) y^2): 14 -> 28 -> 52+ bits
            t = builder.fsub(_splat(builder, ir.Constant(F64, 1.5)), builder.fmul(builder.fmul(hp, y), y), flags=CONTRACT)
            y = builder.fmul(y, t)
        return builder.fmul(p, y)
    return f64x8(re, im, floor), codegen


def _transpose8(builder, rows):
    """8 vectors of 8 64-bit units -> their transpose (3 rounds of 2-input shuffles)."""
    v = list(rows)
    for b in (4, 2, 1):
        for i in range(8):
            if i & b:
                continue
            lo = ir.Constant(ir.VectorType(I32, 8), [p if not p & b else 8 + p - b for p in range(8)])
            hi = ir.Constant(ir.VectorType(I32, 8), [p + b if not p & b else 8 + p for p in range(8)])
            v[i], v[i + b] = builder.shuffle_vector(v[i], v[i + b], lo), builder.shuffle_vector(v[i], v[i + b], hi)
    return v


@intrinsic
def gather16(typingctx, wave, start, hop, window, c, zr, zi, row):
    """Samples ``[16c, 16c + 16)`` of 8 frames (frame ``l`` at ``wave[start + l * hop]``)
    times ``window[16c:16c + 16]`` in float32, packed as complex (even samples real, odd
    imaginary) into rows ``row .. row + 7`` of (zr, zi), lane ``l`` frame ``l``: 8 loads,
    a transpose of 64-bit pairs, 16 stores. No bounds check."""
    def codegen(context, builder, sig, args):
        wty, _, _, winty, _, zty, _, _ = sig.args
        wave_, start_, hop_, win_, c_, zr_, zi_, row_ = args
        v16 = ir.VectorType(F32, 16)
        off = builder.mul(c_, ir.Constant(I64, 16))
        w = builder.load(builder.bitcast(builder.gep(array_data(context, builder, winty, win_), [off]),
                                         v16.as_pointer()), align=4)
        wp, base = array_data(context, builder, wty, wave_), builder.add(start_, off)
        rows = []
        for l in range(8):
            p = builder.gep(wp, [builder.add(base, builder.mul(hop_, ir.Constant(I64, l)))])
            rows.append(builder.bitcast(builder.fmul(builder.load(builder.bitcast(p, v16.as_pointer()), align=4), w), V8))
        even = ir.Constant(ir.VectorType(I32, 8), list(range(0, 16, 2)))
        odd = ir.Constant(ir.VectorType(I32, 8), list(range(1, 16, 2)))
        zrp, zip_ = array_data(context, builder, zty, zr_), array_data(context, builder, zty, zi_)
        for j, col in enumerate(_transpose8(builder, rows)):
            f = builder.bitcast(col, v16)
            o = builder.mul(builder.add(row_, ir.Constant(I64, j)), ir.Constant(I64, L))
            for ptr, sel in ((zrp, even), (zip_, odd)):
                builder.store(builder.fpext(builder.shuffle_vector(f, f, sel), V8),
                              builder.bitcast(builder.gep(ptr, [o]), V8.as_pointer()), align=8)
        return context.get_dummy_value()
    return types.none(wave, start, hop, window, c, zr, zi, row), codegen


@intrinsic
def put_counts(typingctx, cnt, m0, out, row):
    """``out[row + l, m0 + i] = int(cnt[(m0 + i) * 8 + l])`` for ``i, l < 8``: 8 count
    vectors (a column each, a lane per row) transposed into 8 row stores of int32. No
    bounds check; ``out`` C-contiguous."""
    def codegen(context, builder, sig, args):
        cty, _, oty, _ = sig.args
        cnt_, m0_, out_, row_ = args
        cp = array_data(context, builder, cty, cnt_)
        vi64, vi32 = ir.VectorType(I64, 8), ir.VectorType(I32, 8)
        cols = []
        for i in range(8):
            o = builder.mul(builder.add(m0_, ir.Constant(I64, i)), ir.Constant(I64, L))
            cols.append(builder.fptosi(builder.load(builder.bitcast(builder.gep(cp, [o]), V8.as_pointer()), align=8), vi64))
        oa = context.make_array(oty)(context, builder, out_)
        ncols = cgutils.unpack_tuple(builder, oa.shape, 2)[1]
        for l, vals in enumerate(_transpose8(builder, cols)):
            o = builder.add(builder.mul(builder.add(row_, ir.Constant(I64, l)), ncols), m0_)
            builder.store(builder.trunc(vals, vi32), builder.bitcast(builder.gep(oa.data, [o]), vi32.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.none(cnt, m0, out, row), codegen


# -- the FFT: Stockham passes over 8 lanes ------------------------------------------------
#
# A pass of radix r over length n (m = n / r butterflies, stride s): butterfly (p, q)
# reads rows q + s (p + j m), j < r, and writes its r-point DFT, output t times
# W_n^(p t), to rows q + s (r p + t). Rows are 8 lanes: row i is x[8 i : 8 i + 8].


@numba.njit(nogil=True, cache=True, inline="always")
def _tw(yr, yi, j, br, bi, wr, wi):
    vstore(yr, j, br * wr - bi * wi)
    vstore(yi, j, br * wi + bi * wr)


@numba.njit(nogil=True, cache=True)
def _pass2(xr, xi, yr, yi, m, s, twr, twi, o):
    st = s * m * L
    for p in range(m):
        w1r, w1i = twr[o + 2 * p + 1], twi[o + 2 * p + 1]
        for q in range(s):
            i0 = (q + s * p) * L
            j0 = (q + 2 * s * p) * L
            a0r, a0i, a1r, a1i = vload(xr, i0), vload(xi, i0), vload(xr, i0 + st), vload(xi, i0 + st)
            vstore(yr, j0, a0r + a1r)
            vstore(yi, j0, a0i + a1i)
            _tw(yr, yi, j0 + s * L, a0r - a1r, a0i - a1i, w1r, w1i)


@numba.njit(nogil=True, cache=True)
def _pass3(xr, xi, yr, yi, m, s, twr, twi, o):
    st = s * m * L
    h = math.sqrt(0.75)
    for p in range(m):
        b = o + 3 * p
        for q in range(s):
            i0 = (q + s * p) * L
            j0 = (q + 3 * s * p) * L
            a0r, a0i = vload(xr, i0), vload(xi, i0)
            a1r, a1i = vload(xr, i0 + st), vload(xi, i0 + st)
            a2r, a2i = vload(xr, i0 + 2 * st), vload(xi, i0 + 2 * st)
            tr, ti = a1r + a2r, a1i + a2i
            dr, di = h * (a1r - a2r), h * (a1i - a2i)
            vstore(yr, j0, a0r + tr)
            vstore(yi, j0, a0i + ti)
            ur, ui = a0r - 0.5 * tr, a0i - 0.5 * ti
            _tw(yr, yi, j0 + s * L, ur + di, ui - dr, twr[b + 1], twi[b + 1])
            _tw(yr, yi, j0 + 2 * s * L, ur - di, ui + dr, twr[b + 2], twi[b + 2])


@numba.njit(nogil=True, cache=True)
def _pass4(xr, xi, yr, yi, m, s, twr, twi, o):
    st = s * m * L
    for p in range(m):
        b = o + 4 * p
        w1r, w1i = twr[b + 1], twi[b + 1]
        w2r, w2i = twr[b + 2], twi[b + 2]
        w3r, w3i = twr[b + 3], twi[b + 3]
        for q in range(s):
            i0 = (q + s * p) * L
            j0 = (q + 4 * s * p) * L
            a0r, a0i = vload(xr, i0), vload(xi, i0)
            a1r, a1i = vload(xr, i0 + st), vload(xi, i0 + st)
            a2r, a2i = vload(xr, i0 + 2 * st), vload(xi, i0 + 2 * st)
            a3r, a3i = vload(xr, i0 + 3 * st), vload(xi, i0 + 3 * st)
            s02r, s02i, d02r, d02i = a0r + a2r, a0i + a2i, a0r - a2r, a0i - a2i
            s13r, s13i, d13r, d13i = a1r + a3r, a1i + a3i, a1r - a3r, a1i - a3i
            vstore(yr, j0, s02r + s13r)
            vstore(yi, j0, s02i + s13i)
            _tw(yr, yi, j0 + s * L, d02r + d13i, d02i - d13r, w1r, w1i)
            _tw(yr, yi, j0 + 2 * s * L, s02r - s13r, s02i - s13i, w2r, w2i)
            _tw(yr, yi, j0 + 3 * s * L, d02r - d13i, d02i + d13r, w3r, w3i)


C51, C52 = math.cos(2 * math.pi / 5), math.cos(4 * math.pi / 5)
S51, S52 = math.sin(2 * math.pi / 5), math.sin(4 * math.pi / 5)


@numba.njit(nogil=True, cache=True)
def _pass5(xr, xi, yr, yi, m, s, twr, twi, o):
    st = s * m * L
    for p in range(m):
        b = o + 5 * p
        w1r, w1i = twr[b + 1], twi[b + 1]
        w2r, w2i = twr[b + 2], twi[b + 2]
        w3r, w3i = twr[b + 3], twi[b + 3]
        w4r, w4i = twr[b + 4], twi[b + 4]
        for q in range(s):
            i0 = (q + s * p) * L
            j0 = (q + 5 * s * p) * L
            a0r, a0i = vload(xr, i0), vload(xi, i0)
            a1r, a1i = vload(xr, i0 + st), vload(xi, i0 + st)
            a2r, a2i = vload(xr, i0 + 2 * st), vload(xi, i0 + 2 * st)
            a3r, a3i = vload(xr, i0 + 3 * st), vload(xi, i0 + 3 * st)
            a4r, a4i = vload(xr, i0 + 4 * st), vload(xi, i0 + 4 * st)
            t1r, t1i, t3r, t3i = a1r + a4r, a1i + a4i, a1r - a4r, a1i - a4i
            t2r, t2i, t4r, t4i = a2r + a3r, a2i + a3i, a2r - a3r, a2i - a3i
            vstore(yr, j0, a0r + t1r + t2r)
            vstore(yi, j0, a0i + t1i + t2i)
            u1r, u1i = a0r + C51 * t1r + C52 * t2r, a0i + C51 * t1i + C52 * t2i
            u2r, u2i = a0r + C52 * t1r + C51 * t2r, a0i + C52 * t1i + C51 * t2i
            v1r, v1i = S51 * t3r + S52 * t4r, S51 * t3i + S52 * t4i
            v2r, v2i = S52 * t3r - S51 * t4r, S52 * t3i - S51 * t4i
            _tw(yr, yi, j0 + s * L, u1r + v1i, u1i - v1r, w1r, w1i)
            _tw(yr, yi, j0 + 2 * s * L, u2r + v2i, u2i - v2r, w2r, w2i)
            _tw(yr, yi, j0 + 3 * s * L, u2r - v2i, u2i + v2r, w3r, w3i)
            _tw(yr, yi, j0 + 4 * s * L, u1r - v1i, u1i + v1r, w4r, w4i)


R2 = math.sqrt(0.5)


@numba.njit(nogil=True, cache=True)
def _pass8(xr, xi, yr, yi, m, s, twr, twi, o):
    st = s * m * L
    for p in range(m):
        b = o + 8 * p
        for q in range(s):
            i0 = (q + s * p) * L
            j0 = (q + 8 * s * p) * L
            a0r, a0i, a4r, a4i = vload(xr, i0), vload(xi, i0), vload(xr, i0 + 4 * st), vload(xi, i0 + 4 * st)
            a1r, a1i, a5r, a5i = vload(xr, i0 + st), vload(xi, i0 + st), vload(xr, i0 + 5 * st), vload(xi, i0 + 5 * st)
            a2r, a2i = vload(xr, i0 + 2 * st), vload(xi, i0 + 2 * st)
            a6r, a6i = vload(xr, i0 + 6 * st), vload(xi, i0 + 6 * st)
            a3r, a3i = vload(xr, i0 + 3 * st), vload(xi, i0 + 3 * st)
            a7r, a7i = vload(xr, i0 + 7 * st), vload(xi, i0 + 7 * st)
            s0r, s0i, d0r, d0i = a0r + a4r, a0i + a4i, a0r - a4r, a0i - a4i
            s1r, s1i, d1r, d1i = a1r + a5r, a1i + a5i, a1r - a5r, a1i - a5i
            s2r, s2i, d2r, d2i = a2r + a6r, a2i + a6i, a2r - a6r, a2i - a6i
            s3r, s3i, d3r, d3i = a3r + a7r, a3i + a7i, a3r - a7r, a3i - a7i
            # the odd half's inputs: d0, d1 W8, d2 W8^2 = -i d2, d3 W8^3
            e1r, e1i = R2 * (d1r + d1i), R2 * (d1i - d1r)
            e3r, e3i = R2 * (d3i - d3r), vsub(0.0, R2 * (d3r + d3i))
            # even outputs: the 4-point DFT of s; odd outputs: that of (d0, e1, -i d2, e3)
            p02r, p02i, m02r, m02i = s0r + s2r, s0i + s2i, s0r - s2r, s0i - s2i
            p13r, p13i, m13r, m13i = s1r + s3r, s1i + s3i, s1r - s3r, s1i - s3i
            vstore(yr, j0, p02r + p13r)
            vstore(yi, j0, p02i + p13i)
            _tw(yr, yi, j0 + 2 * s * L, m02r + m13i, m02i - m13r, twr[b + 2], twi[b + 2])
            _tw(yr, yi, j0 + 4 * s * L, p02r - p13r, p02i - p13i, twr[b + 4], twi[b + 4])
            _tw(yr, yi, j0 + 6 * s * L, m02r - m13i, m02i + m13r, twr[b + 6], twi[b + 6])
            q02r, q02i, n02r, n02i = d0r + d2i, d0i - d2r, d0r - d2i, d0i + d2r
            q13r, q13i, n13r, n13i = e1r + e3r, e1i + e3i, e1r - e3r, e1i - e3i
            _tw(yr, yi, j0 + s * L, q02r + q13r, q02i + q13i, twr[b + 1], twi[b + 1])
            _tw(yr, yi, j0 + 3 * s * L, n02r + n13i, n02i - n13r, twr[b + 3], twi[b + 3])
            _tw(yr, yi, j0 + 5 * s * L, q02r - q13r, q02i - q13i, twr[b + 5], twi[b + 5])
            _tw(yr, yi, j0 + 7 * s * L, n02r - n13i, n02i + n13r, twr[b + 7], twi[b + 7])


@numba.njit(nogil=True, cache=True)
def _pass_any(xr, xi, yr, yi, m, s, r, twr, twi, o):
    """Any radix: the r-point DFT summed directly (r^2 complex products)."""
    st = s * m * L
    for p in range(m):
        for q in range(s):
            i0 = (q + s * p) * L
            j0 = (q + r * s * p) * L
            for t in range(r):
                br = vsplat(0.0)
                bi = vsplat(0.0)
                for j in range(r):
                    ang = -2.0 * math.pi * ((j * t) % r) / r
                    cr, ci = math.cos(ang), math.sin(ang)
                    ar, ai = vload(xr, i0 + j * st), vload(xi, i0 + j * st)
                    br = br + ar * cr - ai * ci
                    bi = bi + ar * ci + ai * cr
                _tw(yr, yi, j0 + t * s * L, br, bi, twr[o + r * p + t], twi[o + r * p + t])


@numba.njit(nogil=True, cache=True)
def fft_lanes(zr, zi, wr, wi, rs, offs, twr, twi):
    """The complex FFT of each lane of (zr, zi) (``M`` rows of 8 lanes, flat), by the passes
    ``rs`` with twiddles ``tw[offs[k]:]`` (``fft_plan``), (wr, wi) the other buffer.
    Returns whether the result is in (wr, wi) (else in (zr, zi))."""
    n = zr.shape[0] // L
    s = 1
    flip = False
    for k in range(rs.shape[0]):
        r = rs[k]
        m = n // r
        xr, xi, yr, yi = (wr, wi, zr, zi) if flip else (zr, zi, wr, wi)
        if r == 4:
            _pass4(xr, xi, yr, yi, m, s, twr, twi, offs[k])
        elif r == 8:
            _pass8(xr, xi, yr, yi, m, s, twr, twi, offs[k])
        elif r == 5:
            _pass5(xr, xi, yr, yi, m, s, twr, twi, offs[k])
        elif r == 2:
            _pass2(xr, xi, yr, yi, m, s, twr, twi, offs[k])
        elif r == 3:
            _pass3(xr, xi, yr, yi, m, s, twr, twi, offs[k])
        else:
            _pass_any(xr, xi, yr, yi, m, s, r, twr, twi, offs[k])
        flip = not flip
        n = m
        s *= r
    return flip


# -- frames -> spectrum -> mel ------------------------------------------------------------


@numba.njit(nogil=True, cache=True)
def _gather_lane(wave, start, window, zr, zi, lane):
    """Lane ``lane`` <- the frame at ``wave[start:]`` (zeros outside the clip), windowed in
    float32 and packed as complex."""
    mm = zr.shape[0] // L
    length = wave.shape[0]
    for n in range(mm):
        a = start + 2 * n
        zr[n * L + lane] = np.float32(wave[a] * window[2 * n]) if 0 <= a < length else 0.0
        zi[n * L + lane] = np.float32(wave[a + 1] * window[2 * n + 1]) if 0 <= a + 1 < length else 0.0


@numba.njit(nogil=True, cache=True)
def _gather(wave, first, hop, window, zr, zi):
    """The 8 frames at ``wave[first + l * hop:]``, lane ``l``."""
    nfft = window.shape[0]
    if first >= 0 and first + (L - 1) * hop + nfft <= wave.shape[0] and nfft % 16 == 0:
        for c in range(nfft // 16):
            gather16(wave, first, hop, window, c, zr, zi, 8 * c)
    else:
        for lane in range(L):
            _gather_lane(wave, first + lane * hop, window, zr, zi, lane)


@numba.njit(nogil=True, cache=True, inline="always")
def _spec(re, im, f4, power):
    """``sqrt(max(re^2 + im^2, f4))`` (power 1) or ``max(re^2 + im^2, f4)`` (power 2)."""
    if power == 2:
        return vmax(re * re + im * im, f4)
    return vmag(re, im, f4)


@numba.njit(nogil=True, cache=True)
def _magnitudes(zr, zi, rtr, rti, floor, power, mag):
    """``mag[k] = 2 |X_k|`` (``2 sqrt(max(|X_k|^2, floor))``; power 2: ``4 max(|X_k|^2,
    floor)``), k = 0..M: the real FFT unpacked from the complex one, ``2 X_k = Z_k +
    conj(Z_{M-k}) - i W^k (Z_k - conj(Z_{M-k}))``, ``W^k = (rtr[k], rti[k])``."""
    mm = zr.shape[0] // L
    f4 = 4.0 * floor
    ar, ai = vload(zr, 0), vload(zi, 0)
    zero = vsplat(0.0)
    vstore(mag, 0, _spec(2.0 * (ar + ai), zero, f4, power))
    vstore(mag, mm * L, _spec(2.0 * (ar - ai), zero, f4, power))
    for k in range(1, mm):
        cr, ci = rtr[k], rti[k]
        ar, ai = vload(zr, k * L), vload(zi, k * L)
        br, bi = vload(zr, (mm - k) * L), vload(zi, (mm - k) * L)
        er, ei, orr, oi = ar + br, ai - bi, ai + bi, br - ar
        vstore(mag, k * L, _spec(er + cr * orr - ci * oi, ei + cr * oi + ci * orr, f4, power))


@numba.njit(nogil=True, cache=True)
def _mel(mag, starts, lens, weights, mel_floor, acc):
    """``acc[m] = max(sum_j weights[m, j] mag[starts[m] + j], mel_floor)``."""
    for m in range(starts.shape[0]):
        s = starts[m]
        a = vsplat(0.0)
        for j in range(lens[m]):
            a = a + weights[m, j] * vload(mag, (s + j) * L)
        vstore(acc, m * L, vmax(a, mel_floor))


@numba.njit(nogil=True, cache=True)
def _write_logmel(acc, g, t1, out, logs, near, by_mel):
    """``out[g + l, m]`` (``by_mel``: ``out[m, g + l]``) ``= float32(log10(acc lane l of
    m))`` (``logs``, ``near``: scratch)."""
    fastlog.log10_f32(acc, logs, near)
    nl = min(L, t1 - g)
    for m in range(acc.shape[0] // L):
        for lane in range(nl):
            if by_mel:
                out[m, g + lane] = logs[m * L + lane]
            else:
                out[g + lane, m] = logs[m * L + lane]


@numba.njit(nogil=True, cache=True)
def _write_bins(acc, taus, g, t1, cnt, out):
    """``out[g + l, m]`` = the number of thresholds ``<= acc[m]`` (lane l)."""
    nm = acc.shape[0] // L
    nl = min(L, t1 - g)
    for m in range(nm):
        a = vload(acc, m * L)
        c = vsplat(0.0)
        for j in range(taus.shape[0]):
            c = c + vge(a, taus[j])
        vstore(cnt, m * L, c)
    full = nm - nm % 8 if nl == L else 0
    for m0 in range(0, full, 8):
        put_counts(cnt, m0, out, g)
    for m in range(full, nm):
        c = vload(cnt, m * L)
        for lane in range(nl):
            out[g + lane, m] = np.int32(vget(c, lane))


@numba.njit(nogil=True, cache=True)
def frames(wave, left, hop, t0, t1, window, rs, offs, twr, twi, rtr, rti, floor, power,
           starts, lens, weights, mel_floor, taus, out_lm, out_bins, by_mel):
    """Frames ``[t0, t1)`` of ``wave`` (float32, frame t at ``t * hop - left``): the
    float32 log-mel into ``out_lm[t]`` (``by_mel``: ``out_lm[:, t]``) when ``out_lm`` has
    any, the dMel bins (counts of ``taus``) into ``out_bins[t]`` when it has rows.
    ``weights`` are the mel filters halved (the spectrum is doubled; quartered for
    ``power`` 2, ``|X|^2``); see the module docstring for the rest."""
    mm = window.shape[0] // 2
    nm = starts.shape[0]
    zr, zi, wr, wi = np.empty(mm * L), np.empty(mm * L), np.empty(mm * L), np.empty(mm * L)
    mag = np.empty((mm + 1) * L)
    acc = np.empty(nm * L)
    cnt = np.empty(nm * L)
    logs, near = np.empty(nm * L, np.float32), np.empty(nm * L, np.bool_)
    for g in range(t0, t1, L):
        _gather(wave, g * hop - left, hop, window, zr, zi)
        if fft_lanes(zr, zi, wr, wi, rs, offs, twr, twi):
            _magnitudes(wr, wi, rtr, rti, floor, power, mag)
        else:
            _magnitudes(zr, zi, rtr, rti, floor, power, mag)
        _mel(mag, starts, lens, weights, mel_floor, acc)
        if out_lm.size > 0:
            _write_logmel(acc, g, t1, out_lm, logs, near, by_mel)
        if out_bins.shape[0] > 0:
            _write_bins(acc, taus, g, t1, cnt, out_bins)


# -- dMel bins ----------------------------------------------------------------------------


@numba.njit(nogil=True, cache=True)
def quantize(x, centers, lo, hi, inv_step):
    """``argmin_j |clamp(x, lo, hi) - centers[j]|`` in float32, the first on a tie; 0 for
    NaN (torch's ``argmin`` takes NaN as the least). The distances fall then rise with j,
    so only the centers beside ``x``'s estimated place are compared."""
    if x != x:
        return 0
    n = centers.shape[0]
    v = min(max(x, lo), hi)
    k = int(math.floor((np.float64(v) - np.float64(centers[0])) * inv_step))
    j0 = min(max(k - 1, 0), n - 1)
    best = j0
    bd = abs(v - centers[j0])
    for j in range(j0 + 1, min(k + 2, n - 1) + 1):
        d = abs(v - centers[j])
        if d < bd:
            bd = d
            best = j
    return best


@numba.njit(nogil=True, cache=True)
def quantize_rows(x, centers, lo, hi, inv_step, out):
    """``out[t, m] = quantize(x[t, m])`` for float32 ``x`` [T, n]."""
    for t in range(x.shape[0]):
        for m in range(x.shape[1]):
            out[t, m] = quantize(x[t, m], centers, lo, hi, inv_step)


@numba.njit(nogil=True, cache=True)
def _bin_of(mel, mel_floor, centers, lo, hi, inv_step):
    return quantize(np.float32(math.log10(max(mel, mel_floor))), centers, lo, hi, inv_step)


@numba.njit(nogil=True, cache=True)
def _thresholds(mel_floor, centers, lo, hi, inv_step, out):
    """``out[j]``: the least float64 (positive, by bisection over the bit patterns, which
    order the positive doubles) whose bin is above ``j``."""
    bits = np.empty(1, np.int64)
    val = bits.view(np.float64)
    for j in range(out.shape[0]):
        a, b = 0, 0x7FF0000000000000  # +0.0 and +inf: bin(a) <= j < bin(b)
        while b - a > 1:
            bits[0] = a + (b - a) // 2
            if _bin_of(val[0], mel_floor, centers, lo, hi, inv_step) > j:
                b = bits[0]
            else:
                a = bits[0]
        bits[0] = b
        out[j] = val[0]


def inv_step(centers: np.ndarray) -> float:
    """The reciprocal of the centers' spacing, for ``quantize``'s first guess (0 for one)."""
    n = len(centers)
    return (n - 1) / (float(centers[-1]) - float(centers[0])) if n > 1 and centers[-1] > centers[0] else 0.0


class Bins(NamedTuple):
    """A dMel quantizer: float32 centers and clamp bounds, and its mel thresholds."""

    centers: np.ndarray
    lo: np.float32
    hi: np.float32
    inv_step: float
    taus: np.ndarray


def dmel_bins(centers: np.ndarray, lo: float, hi: float, mel_floor: float) -> Bins:
    """The quantizer of float32 ``centers`` (increasing), clamping to ``[lo, hi]`` (each
    rounded to float32, as torch's ``clamp`` rounds a Python float for a float32 tensor);
    ``mel_floor`` is the log-mel's clamp of the mel (float64)."""
    c = np.ascontiguousarray(centers, dtype=np.float32)
    if c.ndim != 1 or len(c) == 0 or np.any(np.diff(c) <= 0):
        raise ValueError("dMel centers must be a non-empty increasing sequence")
    lo32, hi32, step = np.float32(lo), np.float32(hi), inv_step(c)
    taus = np.empty(len(c) - 1)
    _thresholds(float(mel_floor), c, lo32, hi32, step, taus)
    return Bins(c, lo32, hi32, step, taus)


# -- setup: window, filters, plan (numpy) -------------------------------------------------


def _fma(a: float, b: float, c: float) -> float:
    """``a * b + c`` rounded once (exact rational arithmetic; Python 3.10 has no math.fma)."""
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def linspace_f32(start: float, end: float, steps: int) -> np.ndarray:
    """``torch.linspace(start, end, steps, dtype=float64).to(float32)``: torch's CPU kernel
    computes ``start + step * i`` for the first half and ``end - step * (steps - 1 - i)``
    for the rest, each with one rounding (its x86 builds fuse the multiply-add)."""
    if steps <= 0:
        raise ValueError("steps must be positive")
    if steps == 1:
        return np.array([start], np.float32)
    step = (end - start) / (steps - 1)
    vals = [_fma(step, float(i), start) if i < steps // 2 else _fma(-step, float(steps - 1 - i), end)
            for i in range(steps)]
    return np.array(vals, np.float64).astype(np.float32)


def hann_window(n: int) -> np.ndarray:
    """``torch.hann_window(n, periodic=True)`` (float32): ``arange(n + 1) * (2 pi / n)``
    in float32, its cosine, ``* -0.5 + 0.5`` in float32. The cosine here is correctly
    rounded; torch's vectorized one is not always, so a few values (51 of 1600) are
    one ulp off."""
    ang = np.arange(n, dtype=np.float32) * np.float32(2.0 * math.pi / n)
    c = np.cos(ang.astype(np.float64)).astype(np.float32)
    return (c * np.float32(-0.5) + np.float32(0.5)).astype(np.float32)


def stft_window(window: np.ndarray, n_fft: int) -> np.ndarray:
    """``window`` centered in ``n_fft`` zeros, as ``torch.stft`` pads a shorter window."""
    w = np.asarray(window, np.float32)
    if len(w) > n_fft:
        raise ValueError(f"a window of {len(w)} is longer than n_fft {n_fft}")
    out = np.zeros(n_fft, np.float32)
    left = (n_fft - len(w)) // 2
    out[left:left + len(w)] = w
    return out


def hertz_to_mel(freq, mel_scale: str = "htk"):
    """transformers' ``audio_utils.hertz_to_mel``, the same operations."""
    if mel_scale == "htk":
        return 2595.0 * np.log10(1.0 + (freq / 700.0))
    if mel_scale == "kaldi":
        return 1127.0 * np.log(1.0 + (freq / 700.0))
    if mel_scale != "slaney":
        raise ValueError('mel_scale should be one of "htk", "slaney" or "kaldi".')
    min_log_hertz, min_log_mel, logstep = 1000.0, 15.0, 27.0 / np.log(6.4)
    mels = 3.0 * freq / 200.0
    if isinstance(freq, np.ndarray):
        log_region = freq >= min_log_hertz
        mels[log_region] = min_log_mel + np.log(freq[log_region] / min_log_hertz) * logstep
    elif freq >= min_log_hertz:
        mels = min_log_mel + np.log(freq / min_log_hertz) * logstep
    return mels


def mel_to_hertz(mels, mel_scale: str = "htk"):
    """transformers' ``audio_utils.mel_to_hertz``, the same operations."""
    if mel_scale == "htk":
        return 700.0 * (np.power(10, mels / 2595.0) - 1.0)
    if mel_scale == "kaldi":
        return 700.0 * (np.exp(mels / 1127.0) - 1.0)
    if mel_scale != "slaney":
        raise ValueError('mel_scale should be one of "htk", "slaney" or "kaldi".')
    min_log_hertz, min_log_mel, logstep = 1000.0, 15.0, np.log(6.4) / 27.0
    freq = 200.0 * mels / 3.0
    if isinstance(mels, np.ndarray):
        log_region = mels >= min_log_mel
        freq[log_region] = min_log_hertz * np.exp(logstep * (mels[log_region] - min_log_mel))
    elif mels >= min_log_mel:
        freq = min_log_hertz * np.exp(logstep * (mels - min_log_mel))
    return freq


def mel_filter_bank(num_frequency_bins: int, num_mel_filters: int, min_frequency: float, max_frequency: float,
                    sampling_rate: int, norm: str | None = None, mel_scale: str = "htk",
                    triangularize_in_mel_space: bool = False) -> np.ndarray:
    """transformers' ``audio_utils.mel_filter_bank`` (float64 ``[bins, mels]``), the same
    operations in the same order."""
    if norm is not None and norm != "slaney":
        raise ValueError('norm must be one of None or "slaney"')
    if num_frequency_bins < 2 or min_frequency > max_frequency:
        raise ValueError("need num_frequency_bins >= 2 and min_frequency <= max_frequency")
    mel_min = hertz_to_mel(min_frequency, mel_scale=mel_scale)
    mel_max = hertz_to_mel(max_frequency, mel_scale=mel_scale)
    mel_freqs = np.linspace(mel_min, mel_max, num_mel_filters + 2)
    filter_freqs = mel_to_hertz(mel_freqs, mel_scale=mel_scale)
    if triangularize_in_mel_space:  # the bins' frequencies in Hz, the triangles in mel space
        width = sampling_rate / ((num_frequency_bins - 1) * 2)
        fft_freqs = hertz_to_mel(width * np.arange(num_frequency_bins), mel_scale=mel_scale)
        filter_freqs = mel_freqs
    else:
        fft_freqs = np.linspace(0, sampling_rate // 2, num_frequency_bins)
    filter_diff = np.diff(filter_freqs)
    slopes = np.expand_dims(filter_freqs, 0) - np.expand_dims(fft_freqs, 1)
    down_slopes = -slopes[:, :-2] / filter_diff[:-1]
    up_slopes = slopes[:, 2:] / filter_diff[1:]
    mel_filters = np.maximum(np.zeros(1), np.minimum(down_slopes, up_slopes))
    if norm == "slaney":
        enorm = 2.0 / (filter_freqs[2:num_mel_filters + 2] - filter_freqs[:num_mel_filters])
        mel_filters *= np.expand_dims(enorm, 0)
    return mel_filters


def radices(m: int) -> list[int]:
    """The FFT's passes for length ``m``: 5s, 3s, the other odd primes, then 8s and a 4
    or a 2."""
    twos = 0
    while m > 1 and m % 2 == 0:
        m //= 2
        twos += 1
    out = []
    for p in [5, 3] + list(range(7, math.isqrt(m) + 1, 2)):
        while m % p == 0:
            out.append(p)
            m //= p
    if m > 1:
        out.append(m)
    out += [8] * (twos // 3) + ([4] if twos % 3 == 2 else [2] if twos % 3 == 1 else [])
    return out


class Plan(NamedTuple):
    """Everything ``frames`` needs besides the clip and the outputs."""

    n_fft: int
    hop: int
    left: int
    window: np.ndarray  # float32 [n_fft]
    rs: np.ndarray  # int64: the passes' radices
    offs: np.ndarray  # int64: each pass's first twiddle
    twr: np.ndarray
    twi: np.ndarray
    rtr: np.ndarray  # W_{n_fft}^k, k = 0..n_fft/2: the real FFT's unpacking
    rti: np.ndarray
    floor: float  # the power's clamp
    starts: np.ndarray  # int64 [mels]: each filter's first bin
    lens: np.ndarray  # int64 [mels]: its number of bins
    weights: np.ndarray  # float64 [mels, max len]: its float32 weights, halved (quartered: power 2)
    mel_floor: float  # the mel's clamp
    power: int = 1  # 1: the magnitude |X|; 2: the power |X|^2

    @property
    def n_mels(self) -> int:
        return len(self.starts)


def fft_plan(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``fft_lanes``' plan for complex FFTs of ``m`` points: the passes' radices, each
    pass's first twiddle and the twiddles (real, imaginary)."""
    rs = radices(m)
    return (np.array(rs, np.int64), *_twiddles(m, rs))


def _twiddles(m: int, rs: list[int]):
    offs, re, im = [], [np.zeros(0)], [np.zeros(0)]
    n = m
    for r in rs:
        q = n // r
        k = (np.arange(q)[:, None] * np.arange(r)[None, :]) % n
        re.append(np.cos(2.0 * np.pi * k / n).ravel())
        im.append(-np.sin(2.0 * np.pi * k / n).ravel())
        offs.append(sum(len(x) for x in re[:-1]))
        n = q
    return np.array(offs, np.int64), np.concatenate(re), np.concatenate(im)


def sparse_filters(filters: np.ndarray, scale: float = 0.5):
    """Each row's nonzero span of float32 ``filters`` [mels, bins]: starts, lengths and the
    span's weights (float64, times ``scale``: a power of two, exact)."""
    nz = filters != 0
    starts = np.where(nz.any(1), nz.argmax(1), 0).astype(np.int64)
    ends = np.where(nz.any(1), filters.shape[1] - nz[:, ::-1].argmax(1), 0).astype(np.int64)
    lens = ends - starts
    weights = np.zeros((len(filters), max(int(lens.max(initial=0)), 1)))
    for m in range(len(filters)):
        weights[m, :lens[m]] = scale * filters[m, starts[m]:ends[m]].astype(np.float64)
    return starts, lens, weights


def plan(n_fft: int, hop: int, window: np.ndarray, filters: np.ndarray, floor: float = 1e-10,
         mel_floor: float = 1e-10, power: int = 1, center: bool = False) -> Plan:
    """A plan for frames of ``n_fft`` (even) every ``hop``, the first at ``-(n_fft - hop)``
    (clamped at 0; ``center``: at 0 of the reflect-padded clip, ``log_mel_centered``), the
    float32 ``window`` (``stft_window``-padded to ``n_fft``) and float32 mel ``filters``
    [mels, n_fft / 2 + 1]; the clamps rounded to float32 (torch's ``clamp_min`` of a
    float32 tensor); ``power`` 1 (magnitude) or 2 (power spectrum)."""
    if n_fft < 2 or n_fft % 2 or hop <= 0:
        raise ValueError(f"need an even n_fft >= 2 and a positive hop, got {n_fft}, {hop}")
    if power not in (1, 2):
        raise ValueError(f"power must be 1 or 2, got {power}")
    fb = np.asarray(filters, np.float32)
    if fb.ndim != 2 or fb.shape[1] != n_fft // 2 + 1:
        raise ValueError(f"filters must be [mels, {n_fft // 2 + 1}], got {fb.shape}")
    m = n_fft // 2
    k = np.arange(m + 1)
    starts, lens, weights = sparse_filters(fb, 0.5 if power == 1 else 0.25)
    return Plan(n_fft, hop, 0 if center else max(n_fft - hop, 0), stft_window(window, n_fft), *fft_plan(m),
                np.cos(2.0 * np.pi * k / n_fft), -np.sin(2.0 * np.pi * k / n_fft),
                float(np.float32(floor)), starts, lens, weights, float(np.float32(mel_floor)), power)


# -- entry points ---------------------------------------------------------------------------


def frame_count(samples: int, hop: int) -> int:
    """``ceil(samples / hop)``: the frames of a clip, right-padded to a multiple of hop."""
    return -(-int(samples) // int(hop))


def _clip(wave) -> np.ndarray:
    w = np.ascontiguousarray(wave, dtype=np.float32)
    if w.ndim != 1:
        raise ValueError(f"expected a mono clip (1-D), got shape {w.shape}")
    return w


def _out(out, shape, dtype):
    if out is None:
        return np.empty(shape, dtype)
    if out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous {np.dtype(dtype)} {shape}, got {out.dtype} {out.shape}")
    return out


_NO_LM = np.empty((0, 0), np.float32)
_NO_BINS = np.empty((0, 0), np.int32)


def _run(w: np.ndarray, p: Plan, bins: Bins | None, lm: np.ndarray, out_bins: np.ndarray,
         by_mel: bool = False, t1: int | None = None) -> None:
    taus = bins.taus if bins is not None else np.empty(0)
    if t1 is None:
        t1 = lm.shape[0] if lm.size else out_bins.shape[0]
    frames(w, p.left, p.hop, 0, t1, p.window, p.rs, p.offs, p.twr, p.twi, p.rtr, p.rti,
           p.floor, p.power, p.starts, p.lens, p.weights, p.mel_floor, taus, lm, out_bins, by_mel)


def log_mel(wave, p: Plan, out: np.ndarray | None = None) -> np.ndarray:
    """float32 [frames, mels]: the clip's log10 mel spectrogram."""
    w = _clip(wave)
    lm = _out(out, (frame_count(len(w), p.hop), p.n_mels), np.float32)
    if len(lm):
        _run(w, p, None, lm, _NO_BINS)
    return lm


def log_mel_bins(wave, p: Plan, bins: Bins, out: np.ndarray | None = None) -> np.ndarray:
    """int32 [frames, mels]: the dMel bins of the clip's log-mel, without the log-mel."""
    w = _clip(wave)
    ob = _out(out, (frame_count(len(w), p.hop), p.n_mels), np.int32)
    if len(ob):
        _run(w, p, bins, _NO_LM, ob)
    return ob


def quantize_log_mel(x, bins: Bins, out: np.ndarray | None = None) -> np.ndarray:
    """int32 bins of a float32 log-mel [frames, mels] (the processor's argmin)."""
    a = np.ascontiguousarray(x, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"expected a [frames, mels] log-mel, got shape {a.shape}")
    o = _out(out, a.shape, np.int32)
    quantize_rows(a, bins.centers, bins.lo, bins.hi, bins.inv_step, o)
    return o



# -- centered frames (center=True, reflect), a peak floor and scale ------------------------


def centered_frame_count(samples: int, hop: int) -> int:
    """``samples // hop``: ``torch.stft(center=True)``'s ``1 + samples // hop`` frames, the
    last dropped (``stft[..., :-1]``)."""
    return int(samples) // int(hop)


def log_mel_centered(wave, p: Plan, out: np.ndarray | None = None, by_mel: bool = False) -> np.ndarray:
    """float32 [frames, mels] (``by_mel``: [mels, frames], into the first columns of an
    ``out`` that may have more): the log10 mel of ``torch.stft(wave, center=True,
    pad_mode="reflect")`` without its last frame (``p`` planned with ``center``). The clip
    must be longer than ``n_fft / 2`` (torch's reflection needs it)."""
    w = _clip(wave)
    half = p.n_fft // 2
    if p.left != 0:
        raise ValueError("log_mel_centered needs a plan made with center=True")
    if len(w) <= half:
        raise ValueError(f"a centered STFT needs more than {half} samples, got {len(w)}")
    n = centered_frame_count(len(w), p.hop)
    if by_mel and out is not None:  # more columns than frames: those are left alone
        lm = _out(out, (p.n_mels, max(n, out.shape[1])), np.float32)
    else:
        lm = _out(out, (p.n_mels, n) if by_mel else (n, p.n_mels), np.float32)
    if n:
        _run(np.pad(w, half, mode="reflect"), p, None, lm, _NO_BINS, by_mel, n)
    return lm
