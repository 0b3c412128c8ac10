"""Bit-exact numba reimplementation of Pillow 13's ``Image.resize`` for 8-bit images.

HF image processors resize with Pillow, so model inputs are only identical if the resize is
identical down to the last bit. This module reproduces Pillow 13.0's ``libImaging/Resample.c``
(separable convolution with 22-bit fixed-point coefficients, two passes, each pass rounding
to uint8) and, for NEAREST, the affine scale path of ``libImaging/Geometry.c``.

Images are HWC uint8 arrays. Supported channel counts:

* C=1 (mode "L") and C=3 (mode "RGB"): exact for all six filters.
* C=2 ("LA") and C=4 ("RGBA"): exact too; like ``Image.resize``, non-NEAREST filters
  premultiply colour by alpha, resample, then un-premultiply with Pillow's integer formulas.

The coefficient layout (``bounds[i] = (first source index, tap count)``,
``kk[i, :tap count]`` = int32 weights summing to about ``1 << 22``) is shared with fused
writers that run ``resample_horizontal`` and then do the second pass themselves.
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import amx
from .pixels import host_features, pack_into, packed, rgb_or_rgbx, wide_vectors

NEAREST, LANCZOS, BILINEAR, BICUBIC, BOX, HAMMING = 0, 1, 2, 3, 4, 5

_CONVOLUTION_FILTERS = frozenset((LANCZOS, BILINEAR, BICUBIC, BOX, HAMMING))

PRECISION_BITS = 22  # 32 - 8 - 2 in Resample.c
_HALF = 1 << (PRECISION_BITS - 1)
_ONE = float(1 << PRECISION_BITS)
# Resample.c writes the Hamming constants as float literals (0.54f, 0.46f) that C promotes
# to double; the promoted values differ from the double literals 0.54/0.46.
_HAMMING_A = float(np.float32(0.54))
_HAMMING_B = float(np.float32(0.46))


@numba.njit(nogil=True, cache=True)
def sinc(x):
    if x == 0.0:
        return 1.0
    x = x * math.pi
    return math.sin(x) / x


@numba.njit(nogil=True, cache=True)
def _filter_weight(f, x):
    """The filter functions of Resample.c, with their exact comparison boundaries."""
    if f == BICUBIC:
        if x < 0.0:
            x = -x
        if x < 1.0:
            return ((-0.5 + 2.0) * x - (-0.5 + 3.0)) * x * x + 1
        if x < 2.0:
            return (((x - 5) * x + 8) * x - 4) * -0.5
        return 0.0
    if f == BILINEAR:
        if x < 0.0:
            x = -x
        if x < 1.0:
            return 1.0 - x
        return 0.0
    if f == LANCZOS:
        if -3.0 <= x and x < 3.0:
            return sinc(x) * sinc(x / 3)
        return 0.0
    if f == BOX:
        if x > -0.5 and x <= 0.5:
            return 1.0
        return 0.0
    # HAMMING
    if x < 0.0:
        x = -x
    if x == 0.0:
        return 1.0
    if x >= 1.0:
        return 0.0
    x = x * math.pi
    return math.sin(x) / x * (_HAMMING_A + _HAMMING_B * math.cos(x))


@numba.njit(nogil=True, cache=True)
def _support(f):
    if f == BOX:
        return 0.5
    if f == BICUBIC:
        return 2.0
    if f == LANCZOS:
        return 3.0
    return 1.0  # BILINEAR, HAMMING


@numba.njit(nogil=True, cache=True)
def _coeffs_nb(in_size, out_size, f):
    """precompute_coeffs + normalize_coeffs_8bpc for the box (0, in_size)."""
    # The box is float[4] in C: in1 - in0 is a float subtraction, then widened.
    in0 = np.float32(0.0)
    in1 = np.float32(in_size)
    scale = np.float64(in1 - in0) / out_size
    filterscale = scale
    if filterscale < 1.0:
        filterscale = 1.0
    support = _support(f) * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    bounds = np.empty((out_size, 2), np.int32)
    kk = np.zeros((out_size, ksize), np.int32)
    w = np.empty(ksize, np.float64)
    inv_filterscale = 1.0 / filterscale
    c0 = np.float64(in0)
    for xx in range(out_size):
        center = c0 + (xx + 0.5) * scale
        ww = 0.0
        xmin = int(center - support + 0.5)  # C (int) cast: truncation toward zero
        if xmin < 0:
            xmin = 0
        xmax = int(center + support + 0.5)
        if xmax > in_size:
            xmax = in_size
        xmax -= xmin
        for x in range(xmax):
            v = _filter_weight(f, (np.float64(x + xmin) - center + 0.5) * inv_filterscale)
            w[x] = v
            ww += v
        if ww != 0.0:
            for x in range(xmax):
                w[x] /= ww
        for x in range(xmax):
            v = w[x]
            if v < 0:
                kk[xx, x] = np.int32(int(-0.5 + v * _ONE))
            else:
                kk[xx, x] = np.int32(int(0.5 + v * _ONE))
        bounds[xx, 0] = xmin
        bounds[xx, 1] = xmax
    return bounds, kk


@functools.lru_cache(maxsize=64)
def _cached_coeffs(in_size: int, out_size: int, filter: int) -> tuple[np.ndarray, np.ndarray]:
    # Lanczos costs two libm sin() calls per tap (~0.5 ms for a 4000-pixel axis) and
    # requests repeat a handful of sizes. Callers of this cache must not mutate the arrays.
    return _coeffs_nb(in_size, out_size, filter)


def _check_axis(in_size: int, out_size: int, filter: int) -> None:
    if filter not in _CONVOLUTION_FILTERS:
        raise ValueError(f"no convolution coefficients for filter {filter!r}")
    if in_size < 1 or out_size < 1:
        raise ValueError(f"sizes must be positive, got {in_size} -> {out_size}")


def coeffs(in_size: int, out_size: int, filter: int) -> tuple[np.ndarray, np.ndarray]:
    """bounds int32[out_size, 2] = (xmin, n) and kk int32[out_size, ksize]: Pillow's 22-bit
    fixed-point coefficients for one axis (box = whole axis); taps past n are zero.
    Returns fresh arrays that the caller may modify."""
    in_size, out_size, filter = int(in_size), int(out_size), int(filter)
    _check_axis(in_size, out_size, filter)
    bounds, kk = _cached_coeffs(in_size, out_size, filter)
    return bounds.copy(), kk.copy()


def horizontal_first(in_h: int, in_w: int, out_h: int, out_w: int) -> bool:
    """Pillow 13's pass-order rule: vertical first only when height shrinks by more than
    twice as many pixels as width does."""
    return not ((in_h - out_h) > 0 and (in_h - out_h) > (in_w - out_w) * 2)


@intrinsic
def _clip8(typingctx, acc):
    """Resample.c's clip8 of an int32: arithmetic shift, then its lookup table, which
    clamps to 0..255. In 32-bit LLVM IR, as numba would widen the shift to int64 and
    LLVM then vectorise at half the width."""
    sig = types.uint8(types.int32)

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        v = builder.ashr(args[0], ir.Constant(i32, PRECISION_BITS))
        v = builder.select(builder.icmp_signed(">", v, ir.Constant(i32, 255)), ir.Constant(i32, 255), v)
        v = builder.select(builder.icmp_signed("<", v, ir.Constant(i32, 0)), ir.Constant(i32, 0), v)
        return builder.trunc(v, ir.IntType(8))

    return sig, codegen


@intrinsic
def _copy4(typingctx, dst, di, src, si):
    """dst[di:di+4] = src[si:si+4] for flat uint8 arrays, as one unaligned 4-byte move.
    No bounds check. Volatile, so LLVM keeps it a plain move: it otherwise vectorises
    these strided copy loops into gathers and scatters, which are slower."""
    sig = types.none(dst, di, src, si)

    def codegen(context, builder, signature, args):
        dty, _, sty, _ = signature.args
        d = context.make_array(dty)(context, builder, args[0])
        s = context.make_array(sty)(context, builder, args[2])
        i64 = ir.IntType(64)
        memcpy = builder.module.declare_intrinsic("llvm.memcpy", [d.data.type, s.data.type, i64])
        builder.call(memcpy, [builder.gep(d.data, [args[1]]), builder.gep(s.data, [args[3]]),
                              ir.Constant(i64, 4), ir.Constant(ir.IntType(1), 1)])
        return context.get_dummy_value()

    return sig, codegen


def _transposer(src_bytes: int, dst_bytes: int):
    """An intrinsic ``(dst, di, dpitch, src, si, spitch)`` that reads 16 rows of 16 pixels
    (``src_bytes`` each, at ``src[si + r * spitch]``) and writes them transposed: 16 rows
    of those 16 rows' pixels (``dst_bytes`` each, at ``dst[di + c * dpitch]``). No bounds
    check. A pixel is one 32-bit lane (a 3-byte pixel gets a copy of its last byte as the
    fourth, dropped again when stored as 3 bytes); the transpose is LLVM vector shuffles
    in four stages, each swapping one bit of the row index with the same bit of the column
    index. Per 256 pixels that is 16 loads, 64 shuffles and 16 stores where the scalar
    loop makes 256 loads and 256 stores."""
    widen = [3 * (i // 4) + min(i % 4, 2) for i in range(64)]
    narrow = [4 * (i // 3) + i % 3 for i in range(48)]

    @intrinsic
    def transpose16(typingctx, dst, di, dpitch, src, si, spitch):
        sig = types.none(dst, di, dpitch, src, si, spitch)

        def codegen(context, builder, signature, args):
            dty, _, _, sty, _, _ = signature.args
            d = context.make_array(dty)(context, builder, args[0])
            s = context.make_array(sty)(context, builder, args[3])
            i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
            words, bytes48, bytes64 = ir.VectorType(i32, 16), ir.VectorType(i8, 48), ir.VectorType(i8, 64)

            def at(array, base, pitch, k, vector):
                offset = builder.add(base, builder.mul(pitch, ir.Constant(i64, k)))
                return builder.bitcast(builder.gep(array.data, [offset]), ir.PointerType(vector))

            rows = []
            for r in range(16):
                if src_bytes == 4:
                    rows.append(builder.load(at(s, args[4], args[5], r, words), align=1))
                else:
                    v = builder.load(at(s, args[4], args[5], r, bytes48), align=1)
                    v = builder.shuffle_vector(v, ir.Constant(bytes48, None), ir.Constant(ir.VectorType(i32, 64), widen))
                    rows.append(builder.bitcast(v, words))
            for bit in (1, 2, 4, 8):
                keep = ir.Constant(ir.VectorType(i32, 16), [c if not c & bit else 16 + (c ^ bit) for c in range(16)])
                take = ir.Constant(ir.VectorType(i32, 16), [16 + c if c & bit else c ^ bit for c in range(16)])
                for r in range(16):
                    if not r & bit:
                        a, b = rows[r], rows[r | bit]
                        rows[r], rows[r | bit] = builder.shuffle_vector(a, b, keep), builder.shuffle_vector(a, b, take)
            for c in range(16):
                if dst_bytes == 4:
                    builder.store(rows[c], at(d, args[1], args[2], c, words), align=1)
                else:
                    v = builder.shuffle_vector(builder.bitcast(rows[c], bytes64), ir.Constant(bytes64, None),
                                               ir.Constant(ir.VectorType(i32, 48), narrow))
                    builder.store(v, at(d, args[1], args[2], c, bytes48), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return transpose16


_transpose_4to4 = _transposer(4, 4)
_transpose_3to4 = _transposer(3, 4)
_transpose_4to3 = _transposer(4, 3)


@intrinsic
def _mac(typingctx, acc, v, k):
    """int32 ``acc + v * k`` for a uint8 ``v``, wrapping like Resample.c's ``int ss``.
    Spelled out in 32-bit LLVM IR: numba's own arithmetic widens to int64, which LLVM
    then vectorises at half the width."""
    sig = types.int32(types.int32, v, types.int32)

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        return builder.add(args[0], builder.mul(builder.zext(args[1], i32), args[2]))

    return sig, codegen


@numba.njit(nogil=True, cache=True, inline="always")
def _dot4(s, v0, v1, v2, v3, k0, k1, k2, k3):
    """s + four taps, in int32."""
    return _mac(_mac(_mac(_mac(s, v0, k0), v1, k1), v2, k2), v3, k3)


@numba.njit(nogil=True, cache=True, inline="always")
def _convolve(src, pitch, lanes, bounds, kk, shift, acc, out, out_pitch, count):
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
                out[o + j] = _clip8(np.int32(_HALF))
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
                    out[o + j] = _clip8(_dot4(np.int32(_HALF), src[s0 + j], src[s1 + j], src[s2 + j], src[s3 + j], k0, k1, k2, k3))
            elif i == 0:
                for j in range(np.uint64(lanes)):
                    acc[j] = _dot4(np.int32(_HALF), src[s0 + j], src[s1 + j], src[s2 + j], src[s3 + j], k0, k1, k2, k3)
            elif last:
                for j in range(np.uint64(lanes)):
                    out[o + j] = _clip8(_dot4(acc[j], src[s0 + j], src[s1 + j], src[s2 + j], src[s3 + j], k0, k1, k2, k3))
            else:
                for j in range(np.uint64(lanes)):
                    acc[j] = _dot4(acc[j], src[s0 + j], src[s1 + j], src[s2 + j], src[s3 + j], k0, k1, k2, k3)
            if last:
                break
            i += 4


# -- the horizontal pass's taps in int16 pairs ------------------------------------------
#
# A 22-bit coefficient k is hi * 2**11 + lo with hi = k >> 11 and lo = k & 2047, both
# int16, so sum(v * k) = (sum(v * hi) << 11) + sum(v * lo) exactly (v a byte; the low
# parts' sum fits int32 below ``_PAIR_TAPS_MAX`` taps, and in int32 arithmetic, which
# wraps like Resample.c's ``int ss``, the recombination equals the direct sum whatever
# the weights, as long as each high part fits int16: ``_pairable``).
# With two taps' samples side by side as int16 (``_interleave_pairs``), one pairwise
# multiply-add (x86 ``pmaddwd``) does two taps of 16 lanes: half the multiplies of the
# int32 path and none of its slow 32-bit products.

_PAIR_BITS = 11
#: Beyond this many taps per output (a shrink by ~1000x) the int32 path is used: the
#: low parts' sum could leave int32.
_PAIR_TAPS_MAX = 2048


def _pair_madd(builder, v, k32, features):
    """<16 x i32>: per lane v[2i] * k.lo16 + v[2i+1] * k.hi16 (``v`` <32 x i16>, ``k32``
    the two int16 coefficients packed in an i32): ``pmaddwd`` where the CPU has it, else
    the same arithmetic spelled out."""
    i16, i32 = ir.IntType(16), ir.IntType(32)
    w16, w32 = ir.VectorType(i32, 16), ir.VectorType(i16, 32)
    splat = builder.shuffle_vector(builder.insert_element(ir.Constant(w16, None), k32, ir.Constant(i32, 0)),
                                   ir.Constant(w16, None), ir.Constant(w16, [0] * 16))
    kv = builder.bitcast(splat, w32)
    if "avx512bw" in features:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(w16, [w32, w32]),
                                            "llvm.x86.avx512.pmaddw.d.512")
        return builder.call(fn, [v, kv])
    if "avx2" in features or "sse2" in features:
        width = 16 if "avx2" in features else 8
        name = "llvm.x86.avx2.pmadd.wd" if width == 16 else "llvm.x86.sse2.pmadd.wd"
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VectorType(i32, width // 2), [ir.VectorType(i16, width)] * 2), name)
        parts = []
        for lo in range(0, 32, width):
            pick = ir.Constant(ir.VectorType(i32, width), list(range(lo, lo + width)))
            parts.append(builder.call(fn, [builder.shuffle_vector(v, v, pick), builder.shuffle_vector(kv, kv, pick)]))
        while len(parts) > 1:
            n = parts[0].type.count
            both = ir.Constant(ir.VectorType(i32, 2 * n), list(range(2 * n)))
            parts = [builder.shuffle_vector(parts[i], parts[i + 1], both) for i in range(0, len(parts), 2)]
        return parts[0]
    even = ir.Constant(w16, list(range(0, 32, 2)))
    odd = ir.Constant(w16, list(range(1, 32, 2)))
    total = None
    for pick in (even, odd):
        a = builder.sext(builder.shuffle_vector(v, v, pick), w16)
        b = builder.sext(builder.shuffle_vector(kv, kv, pick), w16)
        total = builder.mul(a, b) if total is None else builder.add(total, builder.mul(a, b))
    return total


def _accumulate_pairs(builder, acc_ptr, v, k32, features):
    """``*acc_ptr += _pair_madd(v, k32)``: one ``vpdpwssd`` (multiply-add into the int32
    sums, wrapping as the separate add does) where the CPU has AVX512-VNNI."""
    if "avx512vnni" in features:
        i16, i32 = ir.IntType(16), ir.IntType(32)
        w16, w32 = ir.VectorType(i32, 16), ir.VectorType(i16, 32)
        splat = builder.shuffle_vector(builder.insert_element(ir.Constant(w16, None), k32, ir.Constant(i32, 0)),
                                       ir.Constant(w16, None), ir.Constant(w16, [0] * 16))
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(w16, [w16, w32, w32]),
                                            "llvm.x86.avx512.vpdpwssd.512")
        builder.store(builder.call(fn, [builder.load(acc_ptr), v, builder.bitcast(splat, w32)]), acc_ptr)
        return
    builder.store(builder.add(builder.load(acc_ptr), _pair_madd(builder, v, k32, features)), acc_ptr)


@intrinsic
def _interleave_pairs(typingctx, dst, di, src, si):
    """``dst[di + 2j] = src[si + j]``, ``dst[di + 2j + 1] = src[si + 64 + j]`` for j < 64:
    two adjacent 64-byte columns of samples, side by side as int16. No bounds check."""
    sig = types.none(dst, di, src, si)

    def codegen(context, builder, signature, args):
        d = context.make_array(signature.args[0])(context, builder, args[0])
        s = context.make_array(signature.args[2])(context, builder, args[2])
        i8, i16, i32, i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
        b16, w32 = ir.VectorType(i8, 16), ir.VectorType(i16, 32)
        zip16 = ir.Constant(ir.VectorType(i32, 32), [j // 2 + 16 * (j % 2) for j in range(32)])

        def at(array, base, k, vector):
            return builder.bitcast(builder.gep(array.data, [builder.add(base, ir.Constant(i64, k))]),
                                   ir.PointerType(vector))

        for g in range(4):
            a = builder.load(at(s, args[3], 16 * g, b16), align=1)
            b = builder.load(at(s, args[3], 64 + 16 * g, b16), align=1)
            builder.store(builder.zext(builder.shuffle_vector(a, b, zip16), w32), at(d, args[1], 32 * g, w32), align=2)
        return context.get_dummy_value()

    return sig, codegen


def _finish_pairs(builder, sums, single, shift, out_ptr):
    """Store clip8 of the 64 lanes' ``2**21 + (H << 11) + L`` (or, ``single``, of
    ``2**21 + (S << shift)``) as bytes at ``out_ptr`` (an i8*)."""
    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    w16, b16 = ir.VectorType(i32, 16), ir.VectorType(i8, 16)
    splat = lambda c: ir.Constant(w16, [c] * 16)  # noqa: E731
    if single:
        sh = builder.trunc(shift, i32) if shift.type.width > 32 else shift
        sh = builder.shuffle_vector(builder.insert_element(ir.Constant(w16, None), sh, ir.Constant(i32, 0)),
                                    ir.Constant(w16, None), ir.Constant(w16, [0] * 16))
    for g in range(4):
        if single:
            ss = builder.shl(builder.load(sums[g]), sh)
        else:
            ss = builder.add(builder.shl(builder.load(sums[g]), splat(_PAIR_BITS)), builder.load(sums[4 + g]))
        ss = builder.ashr(builder.add(ss, splat(_HALF)), splat(PRECISION_BITS))
        ss = builder.select(builder.icmp_signed(">", ss, splat(255)), splat(255), ss)
        ss = builder.select(builder.icmp_signed("<", ss, splat(0)), splat(0), ss)
        ptr = builder.gep(out_ptr, [ir.Constant(i64, 16 * g)])
        builder.store(builder.trunc(ss, b16), builder.bitcast(ptr, ir.PointerType(b16)), align=1)


def _pairs_dot(single: bool):
    """``_dot_pairs`` (``single``: ``_dot_pairs_single``)."""

    @intrinsic
    def dot(typingctx, pairs, base, count, khi, klo, kbase, out, oi):
        sig = types.none(pairs, base, count, khi, klo, kbase, out, oi)

        def codegen(context, builder, signature, args):
            features = host_features(context)
            pa = context.make_array(signature.args[0])(context, builder, args[0])
            kh = context.make_array(signature.args[3])(context, builder, args[3])
            kl = None if single else context.make_array(signature.args[4])(context, builder, args[4])
            o = context.make_array(signature.args[6])(context, builder, args[6])
            i16, i32, i64 = ir.IntType(16), ir.IntType(32), ir.IntType(64)
            w16 = ir.VectorType(i32, 16)
            wide = lambda a: builder.sext(a, i64) if a.type.width < 64 else a  # noqa: E731
            base, kbase, count = wide(args[1]), wide(args[5]), wide(args[2])
            sums = [cgutils.alloca_once_value(builder, ir.Constant(w16, [0] * 16)) for _ in range(4 if single else 8)]
            with cgutils.for_range(builder, count) as loop:
                p = loop.index
                row = builder.add(base, builder.mul(p, ir.Constant(i64, 256)))
                k_hi = builder.load(builder.gep(kh.data, [builder.add(kbase, p)]))
                k_lo = None if single else builder.load(builder.gep(kl.data, [builder.add(kbase, p)]))
                for g in range(4):
                    ptr = builder.gep(pa.data, [builder.add(row, ir.Constant(i64, 32 * g))])
                    v = builder.load(builder.bitcast(ptr, ir.PointerType(ir.VectorType(i16, 32))), align=2)
                    _accumulate_pairs(builder, sums[g], v, k_hi, features)
                    if not single:
                        _accumulate_pairs(builder, sums[4 + g], v, k_lo, features)
            _finish_pairs(builder, sums, single, args[4], builder.gep(o.data, [wide(args[7])]))
            return context.get_dummy_value()

        return sig, codegen

    return dot


_dot_pairs = _pairs_dot(False)
_dot_pairs.__doc__ = """``out[oi:oi+64]`` = clip8 of 64 lanes' ``2**21 + (H << 11) + L``, where H and L sum
    ``count`` pairwise multiply-adds of ``pairs[base + 256 p : + 128]`` (int16, as
    ``_interleave_pairs`` lays them) with the packed coefficient pairs ``khi[kbase + p]``
    and ``klo[kbase + p]``. No bounds check."""
#: ``_dot_pairs`` for weights that are whole int16 values shifted left (``_split_pairs``'s
#: single mode): one multiply-add a pair, ``klo`` being the shift.
_dot_pairs_single = _pairs_dot(True)


def _rows_dot(single: bool):
    """``_dot_rows`` (``single``: ``_dot_rows_single``)."""

    @intrinsic
    def dot(typingctx, src, first, pitch, count, last, khi, klo, kbase, out, oi):
        sig = types.none(src, first, pitch, count, last, khi, klo, kbase, out, oi)

        def codegen(context, builder, signature, args):
            features = host_features(context)
            sa = context.make_array(signature.args[0])(context, builder, args[0])
            kh = context.make_array(signature.args[5])(context, builder, args[5])
            kl = None if single else context.make_array(signature.args[6])(context, builder, args[6])
            o = context.make_array(signature.args[8])(context, builder, args[8])
            i8, i16, i32, i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
            w16, b16 = ir.VectorType(i32, 16), ir.VectorType(i8, 16)
            zip16 = ir.Constant(ir.VectorType(i32, 32), [j // 2 + 16 * (j % 2) for j in range(32)])
            first, pitch, count, last, kbase = (builder.sext(a, i64) if a.type.width < 64 else a
                                                for a in (args[1], args[2], args[3], args[4], args[7]))
            sums = [cgutils.alloca_once_value(builder, ir.Constant(w16, [0] * 16)) for _ in range(4 if single else 8)]
            with cgutils.for_range(builder, count) as loop:
                p = loop.index
                r1 = builder.add(first, builder.mul(builder.mul(p, ir.Constant(i64, 2)), pitch))
                r2 = builder.add(r1, pitch)
                r2 = builder.select(builder.icmp_signed(">", r2, last), last, r2)
                k_hi = builder.load(builder.gep(kh.data, [builder.add(kbase, p)]))
                k_lo = None if single else builder.load(builder.gep(kl.data, [builder.add(kbase, p)]))
                for g in range(4):
                    def row(r):
                        ptr = builder.gep(sa.data, [builder.add(r, ir.Constant(i64, 16 * g))])
                        return builder.load(builder.bitcast(ptr, ir.PointerType(b16)), align=1)
                    v = builder.zext(builder.shuffle_vector(row(r1), row(r2), zip16), ir.VectorType(i16, 32))
                    _accumulate_pairs(builder, sums[g], v, k_hi, features)
                    if not single:
                        _accumulate_pairs(builder, sums[4 + g], v, k_lo, features)
            oi = builder.sext(args[9], i64) if args[9].type.width < 64 else args[9]
            _finish_pairs(builder, sums, single, args[6], builder.gep(o.data, [oi]))
            return context.get_dummy_value()

        return sig, codegen

    return dot


_dot_rows = _rows_dot(False)
_dot_rows.__doc__ = """``_dot_pairs`` with the pairs read straight from rows of ``src``: pair p is the 64
    samples at ``first + 2p * pitch`` and at ``first + (2p + 1) * pitch`` (but never past
    ``last``: a pair's missing second tap has weight 0), interleaved in registers. No
    bounds check."""
_dot_rows_single = _rows_dot(True)


@numba.njit(nogil=True, cache=True, inline="always")
def _convolve_rows_pairs(src, rowlen, rows, bounds, khi, klo, shift, out, out_pitch, count):
    """``_convolve`` over whole rows (``src`` holds ``rows`` rows of ``rowlen`` >= 64
    samples; tap i of output y is row ``bounds[y, 0] + i``) in int16 pairs, 64 lanes at a
    time; a last partial run is done as the 64 lanes ending the row (its overlap with the
    previous run is written twice, with the same values). ``shift`` >= 0: single mode
    (``_split_pairs``)."""
    width = khi.shape[1]
    last = (rows - 1) * rowlen
    for y in range(count):
        n = bounds[y, 1]
        o = y * out_pitch
        if n < 1:
            for j in range(rowlen):
                out[o + j] = _clip8(np.int32(_HALF))
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
def _pairable(kk):
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
def _split_pairs(bounds, kk):
    """(khi, klo, shift): each output's taps (2p, 2p+1) as two int16 packed in an int32
    (the first in the low half; a tap past the output's count is 0), int32 [out, pairs].
    When every weight is an int16 shifted left by a common ``shift`` (torch's int16
    weights in 22 bits), ``khi`` holds those int16 and one multiply-add a pair does (single
    mode; ``klo`` empty); else ``khi`` and ``klo`` hold hi = k >> 11 and lo = k & 2047 and
    ``shift`` is -1. For ``_pairable`` coefficients."""
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
    """``_convolve`` of a 64-lane block ``t`` (``t[x * 64 + j]``, one spare column at
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
            _interleave_pairs(pairs, (x - lo) * 128, t, (x - xlo) * 64)
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
    block is 64 lanes and the weights allow (``_pairable``), else the int32 path."""
    out_w = bounds.shape[0]
    paired = lanes == 64 and _pairable(kk)
    shift = -1
    if paired:
        khi, klo, shift = _split_pairs(bounds, kk)
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
                    _copy4(t, to + x * lanes, sflat, so + x * sp)
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
                    _copy4(dflat, do + x * nc, res, x * lanes + r * slot)
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
        _convolve(t, lanes, lanes, bounds, kk, xlo, acc, res, lanes, bounds.shape[0])


@numba.njit(nogil=True, cache=True, inline="always")
def _horizontal_blocked(sflat, dflat, in_w, bounds, kk, nc, sp, slot, rb):
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
def _horizontal_blocked_two(sflat, dflat_a, dflat_b, in_w, bounds_a, kk_a, bounds_b, kk_b, nc, sp, slot, rb):
    """``_horizontal_blocked`` of the same source rows to two widths at once: each block
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


# -- the horizontal pass on AMX tiles (``amx``), RGBX in, RGB out ---------------------------
#
# Outputs go in bands of five: a tile row of 16 int32 holds five RGB pixels (15 sums).
# A band reads the 16-pixel (64-byte) runs of source columns its taps span; the weight
# tile of a run has a row per source pixel and, for output j and channel c, the weight
# at column 4 * (3j + c) + c (the channel's own byte of the pixel; the padding byte X
# gets 0).

_BAND = 5
#: The fewest taps an output must have for AMX to be used (``_amx_pays``)
_AMX_TAPS = 5
#: The fewest rows a call must have for AMX to be used: its plan (``amx_plan``) costs
#: about as much as 3-5 blocks of 16 rows, so the passes over a few rows at a time of the
#: fused resize-and-patchify writers keep to int16 pairs
_AMX_ROWS = 128


@numba.njit(nogil=True, cache=True)
def _band_span(bounds, o0, o1):
    lo = bounds[o0, 0]
    hi = lo + 1
    for o in range(o0, o1):
        lo = min(lo, bounds[o, 0])
        hi = max(hi, bounds[o, 0] + bounds[o, 1])
    return lo, hi


@numba.njit(nogil=True, cache=True)
def amx_plan(bounds, kk, in_w):
    """(runs, starts, weights) for ``horizontal_amx``: per band, how many 16-pixel source
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
def horizontal_amx(sflat, in_row, out_h, dflat, out_w, runs, starts, weights):
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
            amx.finish(sums, dflat, (y0 * out_w + o) * 3, out_w * 3, 3 * min(_BAND, out_w - o), _HALF,
                       PRECISION_BITS)
    amx.release()


@numba.njit(nogil=True, cache=True, inline="always")
def _amx_pays(bounds):
    """AMX wins where outputs have 5 taps or more (any bicubic shrink; measured on whole
    1080p rows, caches cold as after a decode); on an upscale its mostly empty tiles lose
    to the int16-pair path, whose cost grows with the taps where AMX's does not."""
    most = 0
    for x in range(bounds.shape[0]):
        most = max(most, bounds[x, 1])
    return most >= _AMX_TAPS


@numba.njit(nogil=True, cache=True, inline="always")
def _on_amx(sflat, in_w, out_h, dflat, bounds, kk):
    """``horizontal_amx`` of RGBX rows into RGB ones where it pays and a plan exists (the
    caller checked ``amx.permitted()`` and ``out_h`` >= ``_AMX_ROWS``); whether it ran."""
    if not _amx_pays(bounds):
        return False
    runs, starts, weights = amx_plan(bounds, kk, in_w)
    if not runs.size:
        return False
    horizontal_amx(sflat, in_w * 4, out_h, dflat, bounds.shape[0], runs, starts, weights)
    return True


@numba.njit(nogil=True, cache=True)
def horizontal_pass(src, dst, row0, bounds, kk):
    """``resample_horizontal`` for C-contiguous arrays, callable from other kernels.
    (Numba compiles a function once per array layout it is given, and this one takes
    ~15 s to compile: the Python entries hand it C-contiguous arrays only.)"""
    wide_vectors()
    out_h, out_w, nc = dst.shape
    if out_h == 0 or out_w == 0:
        return
    in_w = src.shape[1]
    s = np.ascontiguousarray(src[row0:row0 + out_h])  # a view: the rows used
    sflat = s.reshape(s.size)
    dflat = dst.reshape(dst.size)
    # 64 int32 lanes per block.
    sp = src.shape[2]
    if nc == 3 and sp == 4 and out_h >= _AMX_ROWS and amx.permitted() and _on_amx(sflat, in_w, out_h, dflat, bounds, kk):
        return
    if nc == 3 and sp == 4:
        _horizontal_blocked(sflat, dflat, in_w, bounds, kk, 3, 4, 4, 16)
    elif nc == 3:
        _horizontal_blocked(sflat, dflat, in_w, bounds, kk, 3, 3, 4, 16)
    elif nc == 1:
        _horizontal_blocked(sflat, dflat, in_w, bounds, kk, 1, 1, 1, 64)
    elif nc == 4:
        _horizontal_blocked(sflat, dflat, in_w, bounds, kk, 4, 4, 4, 16)
    else:
        _horizontal_blocked(sflat, dflat, in_w, bounds, kk, 2, 2, 2, 32)


@numba.njit(nogil=True, cache=True)
def horizontal_pass_two(src, dst_a, dst_b, row0, bounds_a, kk_a, bounds_b, kk_b):
    """``horizontal_pass`` into ``dst_a`` and ``dst_b`` (as many rows, the same channels)
    from the same source rows, each block of them read once."""
    wide_vectors()
    out_h, out_wa, nc = dst_a.shape
    if out_h == 0 or out_wa == 0 or dst_b.shape[1] == 0:
        return
    in_w = src.shape[1]
    s = np.ascontiguousarray(src[row0:row0 + out_h])
    sflat = s.reshape(s.size)
    fa = dst_a.reshape(dst_a.size)
    fb = dst_b.reshape(dst_b.size)
    sp = src.shape[2]
    if nc == 3 and sp == 4 and out_h >= _AMX_ROWS and amx.permitted():
        # one width after the other (both sets of weight tiles would not stay in L2
        # together); a width AMX does not pay for goes the int16-pair way alone
        on_a = _on_amx(sflat, in_w, out_h, fa, bounds_a, kk_a)
        on_b = _on_amx(sflat, in_w, out_h, fb, bounds_b, kk_b)
        if on_a and not on_b:
            _horizontal_blocked(sflat, fb, in_w, bounds_b, kk_b, 3, 4, 4, 16)
        elif on_b and not on_a:
            _horizontal_blocked(sflat, fa, in_w, bounds_a, kk_a, 3, 4, 4, 16)
        if on_a or on_b:
            return
    if nc == 3 and sp == 4:
        _horizontal_blocked_two(sflat, fa, fb, in_w, bounds_a, kk_a, bounds_b, kk_b, 3, 4, 4, 16)
    elif nc == 3:
        _horizontal_blocked_two(sflat, fa, fb, in_w, bounds_a, kk_a, bounds_b, kk_b, 3, 3, 4, 16)
    elif nc == 1:
        _horizontal_blocked_two(sflat, fa, fb, in_w, bounds_a, kk_a, bounds_b, kk_b, 1, 1, 1, 64)
    elif nc == 4:
        _horizontal_blocked_two(sflat, fa, fb, in_w, bounds_a, kk_a, bounds_b, kk_b, 4, 4, 4, 16)
    else:
        _horizontal_blocked_two(sflat, fa, fb, in_w, bounds_a, kk_a, bounds_b, kk_b, 2, 2, 2, 32)


@numba.njit(nogil=True, cache=True)
def vertical_pass(src, dst, bounds, kk):
    """``resample_vertical`` for C-contiguous arrays, callable from other kernels."""
    wide_vectors()
    out_h, out_w, nc = dst.shape
    if out_h == 0 or out_w == 0:
        return
    # Rows are processed as flat runs of out_w * channels samples, so each tap is a
    # contiguous SIMD multiply-add.
    sflat = src.reshape(src.size)
    rowlen = out_w * src.shape[2]
    in_rows = src.shape[0]
    acc = np.empty(rowlen, np.int32)
    # int16 pairs (``_dot_rows``) for rows of at least 64 samples
    paired = rowlen >= 64 and _pairable(kk)
    shift = -1
    if paired:
        khi, klo, shift = _split_pairs(bounds, kk)
    else:
        khi = klo = np.empty((0, 1), np.int32)
    if src.shape[2] == nc:
        if paired:
            _convolve_rows_pairs(sflat, rowlen, in_rows, bounds, khi, klo, shift, dst.reshape(dst.size), rowlen, out_h)
        else:
            _convolve(sflat, rowlen, rowlen, bounds, kk, 0, acc, dst.reshape(dst.size), rowlen, out_h)
        return
    # RGBX: a few RGBX rows at a time (L1/L2-sized), each block packed into dst.
    rows = max(1, 32768 // rowlen)
    block = np.empty((rows, out_w, src.shape[2]), np.uint8)
    bflat = block.reshape(block.size)
    for y0 in range(0, out_h, rows):
        k = min(rows, out_h - y0)
        if paired:
            _convolve_rows_pairs(sflat, rowlen, in_rows, bounds[y0:y0 + k], khi[y0:y0 + k], klo[y0:y0 + k], shift,
                                 bflat, rowlen, k)
        else:
            _convolve(sflat, rowlen, rowlen, bounds[y0:y0 + k], kk[y0:y0 + k], 0, acc, bflat, rowlen, k)
        pack_into(block[:k], dst[y0:y0 + k])


def resample_horizontal(src, dst, row0, bounds, kk) -> None:
    """dst[y, x, c] = clip8(sum_i src[y + row0, bounds[x,0] + i, c] * kk[x, i]) for y in
    range(dst.shape[0]). A 4-channel ``src`` with a 3-channel ``dst`` is RGBX: its fourth
    byte is padding, never read into the result. Any array layouts."""
    d = np.ascontiguousarray(dst)
    horizontal_pass(np.ascontiguousarray(src), d, np.int64(row0), np.ascontiguousarray(bounds),
                    np.ascontiguousarray(kk))
    if d is not dst:
        dst[...] = d


def resample_vertical(src, dst, bounds, kk) -> None:
    """dst[y, x, c] = clip8(sum_i src[bounds[y,0] + i, x, c] * kk[y, i]). A 4-channel
    ``src`` with a 3-channel ``dst`` is RGBX: its fourth byte is dropped. Any array
    layouts."""
    d = np.ascontiguousarray(dst)
    vertical_pass(np.ascontiguousarray(src), d, np.ascontiguousarray(bounds), np.ascontiguousarray(kk))
    if d is not dst:
        dst[...] = d


@numba.njit(nogil=True, cache=True)
def separable(img, out_h, out_w, bh, kh, bv, kv, nc, h_first):
    """Both passes into a new [out_h, out_w, nc] (``nc`` fewer than ``img`` has only for
    RGBX): an axis that keeps its size is skipped (its coefficients are not read); with
    both, horizontal first (over only the source rows the vertical pass reads) when
    ``h_first``, else vertical first. Pillow decides the order by ``horizontal_first``;
    torchvision always goes horizontal first."""
    in_h, in_w, sp = img.shape
    out = np.empty((out_h, out_w, nc), np.uint8)
    if out_w == in_w and out_h == in_h:
        if sp == nc:
            out[...] = img
        else:
            pack_into(img, out)
    elif out_w == in_w:
        vertical_pass(img, out, bv, kv)
    elif out_h == in_h:
        horizontal_pass(img, out, np.int64(0), bh, kh)
    elif h_first:
        first = bv[0, 0]
        last = first
        for y in range(out_h):
            last = max(last, bv[y, 0] + bv[y, 1])
        tmp = np.empty((last - first, out_w, nc), np.uint8)
        horizontal_pass(img, tmp, np.int64(first), bh, kh)
        shifted = bv.copy()
        for y in range(out_h):
            shifted[y, 0] -= first
        vertical_pass(tmp, out, shifted, kv)
    else:
        tmp = np.empty((out_h, in_w, sp), np.uint8)
        vertical_pass(img, tmp, bv, kv)
        horizontal_pass(tmp, out, np.int64(0), bh, kh)
    return out


@numba.njit(nogil=True, cache=True)
def separable_two(img, first, last, oh_a, ow_a, bh_a, kh_a, bv_a, kv_a, oh_b, ow_b, bh_b, kh_b, bv_b, kv_b, nc):
    """``separable`` to two sizes at once, both horizontal first with both axes resized
    and both reading source rows [first, last): the horizontal passes share each block of
    those rows (``horizontal_pass_two``)."""
    tmp_a = np.empty((last - first, ow_a, nc), np.uint8)
    tmp_b = np.empty((last - first, ow_b, nc), np.uint8)
    horizontal_pass_two(img, tmp_a, tmp_b, np.int64(first), bh_a, kh_a, bh_b, kh_b)
    out_a = np.empty((oh_a, ow_a, nc), np.uint8)
    out_b = np.empty((oh_b, ow_b, nc), np.uint8)
    shifted = bv_a.copy()
    for y in range(oh_a):
        shifted[y, 0] -= first
    vertical_pass(tmp_a, out_a, shifted, kv_a)
    shifted = bv_b.copy()
    for y in range(oh_b):
        shifted[y, 0] -= first
    vertical_pass(tmp_b, out_b, shifted, kv_b)
    return out_a, out_b


def rows_read(bounds: np.ndarray) -> tuple[int, int]:
    """The source rows [first, last) an axis's coefficients read."""
    return int(bounds[:, 0].min()), int((bounds[:, 0] + bounds[:, 1]).max())


def resample_two(pixels: np.ndarray, size_a, size_b, coeffs_of, h_first_of) -> tuple[np.ndarray, np.ndarray] | None:
    """Both resizes of ``pixels`` (RGB or RGBX -> RGB) through ``separable_two`` when they
    can share their horizontal pass (both horizontal first, both axes resized, the same
    source rows read), else None. ``coeffs_of(in, out)`` gives an axis's coefficients,
    ``h_first_of(in_h, in_w, out_h, out_w)`` the pass order."""
    in_h, in_w = pixels.shape[:2]
    (ha, wa), (hb, wb) = size_a, size_b
    if in_h in (ha, hb) or in_w in (wa, wb) or not (h_first_of(in_h, in_w, ha, wa) and h_first_of(in_h, in_w, hb, wb)):
        return None
    bv_a, kv_a = coeffs_of(in_h, ha)
    bv_b, kv_b = coeffs_of(in_h, hb)
    rows = rows_read(bv_a)
    if rows != rows_read(bv_b):
        return None
    bh_a, kh_a = coeffs_of(in_w, wa)
    bh_b, kh_b = coeffs_of(in_w, wb)
    return separable_two(np.ascontiguousarray(pixels), *rows, ha, wa, bh_a, kh_a, bv_a, kv_a, hb, wb, bh_b, kh_b,
                         bv_b, kv_b, 3)


def resize_rgb_two(pixels: np.ndarray, size_a, size_b, filter: int) -> tuple[np.ndarray, np.ndarray]:
    """``(resize_rgb(pixels, *size_a, filter), resize_rgb(pixels, *size_b, filter))``, the
    source read once by both horizontal passes where their rows coincide (a model's tiles
    and its thumbnail from one image)."""
    pixels = rgb_or_rgbx(pixels, "resize_rgb_two")
    (ha, wa), (hb, wb) = (_checked_target(filter, *size_a)[1:], _checked_target(filter, *size_b)[1:])
    if filter != NEAREST:
        both = resample_two(pixels, (ha, wa), (hb, wb), lambda i, o: _cached_coeffs(i, o, filter), horizontal_first)
        if both is not None:
            return both
    return resize_rgb(pixels, ha, wa, filter), resize_rgb(pixels, hb, wb, filter)


@numba.njit(nogil=True, cache=True)
def _nearest_nb(img, out_h, out_w):
    """ImagingScaleAffine: positions accumulate in double (xo += a0), not x * a0."""
    in_h, in_w, nc = img.shape
    out = np.zeros((out_h, out_w, nc), np.uint8)  # fill=1: uncovered pixels stay 0
    a0 = np.float64(np.float32(in_w) - np.float32(0.0)) / out_w
    a4 = np.float64(np.float32(in_h) - np.float32(0.0)) / out_h
    xo = 0.0 + a0 * 0.5
    yo = 0.0 + a4 * 0.5
    xintab = np.zeros(out_w, np.int64)
    xmin = out_w
    xmax = 0
    for x in range(out_w):
        xin = -1 if xo < 0.0 else int(xo)
        if xin >= 0 and xin < in_w:
            xmax = x + 1
            if x < xmin:
                xmin = x
            xintab[x] = xin
        xo += a0
    for y in range(out_h):
        yi = -1 if yo < 0.0 else int(yo)
        if yi >= 0 and yi < in_h:
            for x in range(xmin, xmax):
                sx = xintab[x]
                for c in range(nc):
                    out[y, x, c] = img[yi, sx, c]
        yo += a4
    return out


@numba.njit(nogil=True, cache=True)
def _premultiply(img):
    """RGBA -> RGBa / LA -> La (Convert.c): c * a / 255 via MULDIV255; alpha is last."""
    h, w, nc = img.shape
    out = np.empty_like(img)
    for y in range(h):
        for x in range(w):
            a = np.uint32(img[y, x, nc - 1])
            for c in range(nc - 1):
                t = np.uint32(img[y, x, c]) * a + np.uint32(128)
                out[y, x, c] = np.uint8(((t >> 8) + t) >> 8)
            out[y, x, nc - 1] = img[y, x, nc - 1]
    return out


@numba.njit(nogil=True, cache=True)
def _unpremultiply(img):
    """RGBa -> RGBA / La -> LA (Convert.c): CLIP8(255 * c / a) unless a is 0 or 255."""
    h, w, nc = img.shape
    for y in range(h):
        for x in range(w):
            a = np.uint32(img[y, x, nc - 1])
            if a == 255 or a == 0:
                continue
            for c in range(nc - 1):
                v = (np.uint32(255) * np.uint32(img[y, x, c])) // a
                img[y, x, c] = np.uint8(255 if v > 255 else v)
    return img


_NO_COEFFS = (np.zeros((0, 2), np.int32), np.zeros((0, 1), np.int32))


def _resample(img: np.ndarray, out_h: int, out_w: int, filter: int, nc: int) -> np.ndarray:
    in_h, in_w = img.shape[:2]
    bh, kh = _cached_coeffs(in_w, out_w, filter) if out_w != in_w else _NO_COEFFS
    bv, kv = _cached_coeffs(in_h, out_h, filter) if out_h != in_h else _NO_COEFFS
    return separable(img, out_h, out_w, bh, kh, bv, kv, nc, horizontal_first(in_h, in_w, out_h, out_w))


def _checked_target(filter, out_h, out_w) -> tuple[int, int, int]:
    if filter not in (NEAREST, LANCZOS, BILINEAR, BICUBIC, BOX, HAMMING):
        raise ValueError(f"unknown resampling filter {filter!r}")
    out_h, out_w = int(out_h), int(out_w)
    if out_h < 1 or out_w < 1:
        raise ValueError("height and width must be > 0")
    return int(filter), out_h, out_w


def resize(img: np.ndarray, out_h: int, out_w: int, filter: int) -> np.ndarray:
    """uint8 HWC (C-contiguous) -> uint8 [out_h, out_w, C], equal to Pillow 13's
    ``Image.fromarray(img).resize((out_w, out_h), filter)`` (C=1 as mode "L", 2 "LA",
    3 "RGB", 4 "RGBA"). A 2-D array is treated as C=1 and gives a 2-D result."""
    if not isinstance(img, np.ndarray) or img.dtype != np.uint8:
        raise ValueError("resize expects a uint8 numpy array")
    squeeze = img.ndim == 2
    if squeeze:
        img = img[:, :, None]
    if img.ndim != 3:
        raise ValueError(f"resize expects an HWC array, got shape {img.shape}")
    nc = img.shape[2]
    if nc < 1 or nc > 4:
        raise ValueError(f"unsupported channel count {nc} (1..4 supported)")
    filter, out_h, out_w = _checked_target(filter, out_h, out_w)
    in_h, in_w = img.shape[:2]
    if in_h < 1 or in_w < 1:
        raise ValueError("input image is empty")
    img = np.ascontiguousarray(img)
    if (in_h, in_w) == (out_h, out_w):
        out = img.copy()
    elif filter == NEAREST:
        out = _nearest_nb(img, out_h, out_w)
    elif nc in (2, 4):
        out = _unpremultiply(_resample(_premultiply(img), out_h, out_w, filter, nc))
    else:
        out = _resample(img, out_h, out_w, filter, nc)
    return out[:, :, 0] if squeeze else out


def resize_rgb(pixels: np.ndarray, out_h: int, out_w: int, filter: int) -> np.ndarray:
    """``resize`` of an RGB image held as uint8 [H, W, 3], or as [H, W, 4] RGBX (Pillow's
    own layout, read without copying; the fourth byte is padding) -> [out_h, out_w, 3]."""
    pixels = rgb_or_rgbx(pixels, "resize_rgb")
    if pixels.shape[2] == 3 or filter == NEAREST:
        return resize(packed(pixels), out_h, out_w, filter)
    filter, out_h, out_w = _checked_target(filter, out_h, out_w)
    return _resample(pixels, out_h, out_w, filter, 3)


def warmup() -> None:
    """Compile (or load from the on-disk cache) every kernel, so no request pays for it:
    all channel counts and filters through ``resize``, and the pass kernels' entries
    (which give them C-contiguous arrays whatever the caller has)."""
    for nc in (1, 2, 3, 4):
        a = (np.arange(5 * 7 * nc, dtype=np.int64) * 37 % 256).astype(np.uint8).reshape(5, 7, nc)
        for f in (NEAREST, LANCZOS, BILINEAR, BICUBIC, BOX, HAMMING):
            resize(a, 3, 4, f)
            resize(a, 9, 2, f)
    bounds, kk = coeffs(7, 4, BICUBIC)
    a = np.zeros((5, 7, 3), np.uint8)
    resample_horizontal(a[:, :6], np.empty((5, 4, 3), np.uint8), 0, bounds, kk)
    bounds, kk = coeffs(5, 3, BICUBIC)
    resample_vertical(a[:, :6], np.empty((3, 6, 3), np.uint8), bounds, kk)
    for c in (3, 4):
        resize_rgb_two(np.zeros((40, 60, c), np.uint8), (9, 13), (20, 21), BICUBIC)
