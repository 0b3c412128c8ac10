"""LLVM IR building blocks for the kernels' numba intrinsics.

Some loops are only fast when written in LLVM IR directly: numba widens 32-bit integer
arithmetic to int64 (LLVM then vectorises at half the width), has no vector shuffles, no
x86 multiply-add instructions and no way to keep a copy a plain move. These helpers and
intrinsic factories say those things once. They know no resampling filter and no image
format: a fixed-point width, a pixel size, a tap layout are their parameters.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
W16 = ir.VectorType(I32, 16)  # 16 int32 lanes: one 512-bit register

# -- helpers for codegen functions -------------------------------------------------------


def host_features(context) -> frozenset:
    """The CPU features the kernels are compiled for (numba's target machine), for
    intrinsics that emit an instruction only where the CPU has it."""
    return frozenset(f[1:] for f in context.codegen()._tm_features.split(",") if f.startswith("+"))


def declare(builder, name: str, ret, args, var_arg: bool = False):
    """The function ``name`` (an LLVM intrinsic or a libc symbol) in the builder's module."""
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, args, var_arg=var_arg), name)


def array_data(context, builder, ty, value):
    """The data pointer of the numba array ``value`` of type ``ty``."""
    return context.make_array(ty)(context, builder, value).data


def byte_data(context, builder, ty, value):
    """``array_data`` as an i8*."""
    return builder.bitcast(array_data(context, builder, ty, value), ir.PointerType(I8))


def as_i64(builder, value):
    """An integer argument sign-extended to i64 (numba may hand an int32 or an intp)."""
    return builder.sext(value, I64) if value.type.width < 64 else value


def vector_at(builder, ptr, offset, vector):
    """``ptr + offset`` (in ``ptr``'s elements) as a pointer to ``vector``."""
    return builder.bitcast(builder.gep(ptr, [offset]), ir.PointerType(vector))


def splat(builder, value):
    """<16 x i32> of the integer ``value`` (truncated to i32) in every lane."""
    value = builder.trunc(value, I32) if value.type.width > 32 else value
    return builder.shuffle_vector(builder.insert_element(ir.Constant(W16, None), value, ir.Constant(I32, 0)),
                                  ir.Constant(W16, None), ir.Constant(W16, [0] * 16))


def _like(ty, c):
    return ir.Constant(ty, [c] * ty.count) if isinstance(ty, ir.VectorType) else ir.Constant(ty, c)


def clip8(builder, value, shift):
    """i32 (or <n x i32>) ``value`` shifted right arithmetically by ``shift`` (same type),
    clamped to 0..255 and truncated to bytes: Resample.c's ``clip8``."""
    ty = value.type
    v = builder.ashr(value, shift)
    v = builder.select(builder.icmp_signed(">", v, _like(ty, 255)), _like(ty, 255), v)
    v = builder.select(builder.icmp_signed("<", v, _like(ty, 0)), _like(ty, 0), v)
    narrow = ir.VectorType(I8, ty.count) if isinstance(ty, ir.VectorType) else I8
    return builder.trunc(v, narrow)


# -- scalar intrinsics -------------------------------------------------------------------


@intrinsic
def fma32(typingctx, a, b, c):
    """Fused ``a * b + c`` in float32, rounded once (``llvm.fma.f32``: one instruction
    where the CPU has FMA, which the loops around it vectorise)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        f32 = ir.FloatType()
        return builder.call(declare(builder, "llvm.fma.f32", f32, [f32, f32, f32]), args)

    return sig, codegen


def clip8_shifted(bits: int):
    """An intrinsic ``int32 -> uint8``: ``clip8`` of its argument shifted right by
    ``bits``. In 32-bit IR, as numba would widen the shift to int64 and LLVM then
    vectorise at half the width."""

    @intrinsic
    def clip(typingctx, acc):
        sig = types.uint8(types.int32)

        def codegen(context, builder, signature, args):
            return clip8(builder, args[0], ir.Constant(I32, bits))

        return sig, codegen

    return clip


@intrinsic
def mac(typingctx, acc, v, k):
    """int32 ``acc + v * k`` for a uint8 ``v``, wrapping like C's ``int``. In 32-bit IR:
    numba's own arithmetic widens to int64, which LLVM then vectorises at half the width."""
    sig = types.int32(types.int32, v, types.int32)

    def codegen(context, builder, signature, args):
        return builder.add(args[0], builder.mul(builder.zext(args[1], I32), args[2]))

    return sig, codegen


@intrinsic
def wide_vectors(typingctx):
    """Let LLVM vectorise the calling kernel's loops with the widest vectors the CPU has.

    On CPUs with 512-bit vectors LLVM prefers 256-bit ones by default (a tuning choice
    for mixed workloads); these kernels are long integer multiply-add and load/store
    loops that run about twice as fast at full width. Sets the calling function's
    ``prefer-vector-width`` attribute (no effect where vectors are narrower)."""
    def codegen(context, builder, sig, args):
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')  # a string attribute llvmlite has no name for
        return context.get_dummy_value()

    return types.void(), codegen


# -- moving bytes ------------------------------------------------------------------------


@intrinsic
def copy4(typingctx, dst, di, src, si):
    """dst[di:di+4] = src[si:si+4] for flat uint8 arrays, as one unaligned 4-byte move.
    No bounds check. Volatile, so LLVM keeps it a plain move: it otherwise vectorises
    these strided copy loops into gathers and scatters, which are slower."""
    sig = types.none(dst, di, src, si)

    def codegen(context, builder, signature, args):
        dty, _, sty, _ = signature.args
        d = context.make_array(dty)(context, builder, args[0])
        s = context.make_array(sty)(context, builder, args[2])
        memcpy = builder.module.declare_intrinsic("llvm.memcpy", [d.data.type, s.data.type, I64])
        builder.call(memcpy, [builder.gep(d.data, [args[1]]), builder.gep(s.data, [args[3]]),
                              ir.Constant(I64, 4), ir.Constant(I1, 1)])
        return context.get_dummy_value()

    return sig, codegen


def transposer(src_bytes: int, dst_bytes: int):
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
            words, bytes48, bytes64 = ir.VectorType(I32, 16), ir.VectorType(I8, 48), ir.VectorType(I8, 64)

            def at(array, base, pitch, k, vector):
                offset = builder.add(base, builder.mul(pitch, ir.Constant(I64, k)))
                return vector_at(builder, array.data, offset, vector)

            rows = []
            for r in range(16):
                if src_bytes == 4:
                    rows.append(builder.load(at(s, args[4], args[5], r, words), align=1))
                else:
                    v = builder.load(at(s, args[4], args[5], r, bytes48), align=1)
                    v = builder.shuffle_vector(v, ir.Constant(bytes48, None),
                                               ir.Constant(ir.VectorType(I32, 64), widen))
                    rows.append(builder.bitcast(v, words))
            for bit in (1, 2, 4, 8):
                keep = ir.Constant(ir.VectorType(I32, 16), [c if not c & bit else 16 + (c ^ bit) for c in range(16)])
                take = ir.Constant(ir.VectorType(I32, 16), [16 + c if c & bit else c ^ bit for c in range(16)])
                for r in range(16):
                    if not r & bit:
                        a, b = rows[r], rows[r | bit]
                        rows[r], rows[r | bit] = builder.shuffle_vector(a, b, keep), builder.shuffle_vector(a, b, take)
            for c in range(16):
                if dst_bytes == 4:
                    builder.store(rows[c], at(d, args[1], args[2], c, words), align=1)
                else:
                    v = builder.shuffle_vector(builder.bitcast(rows[c], bytes64), ir.Constant(bytes64, None),
                                               ir.Constant(ir.VectorType(I32, 48), narrow))
                    builder.store(v, at(d, args[1], args[2], c, bytes48), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return transpose16


# -- int16 pairs: two taps per pairwise multiply-add -------------------------------------
#
# Samples of two taps side by side as int16 (``interleave_pairs``) and the taps' two int16
# weights packed in one int32 (the first in the low half): one pairwise multiply-add
# (x86 ``pmaddwd``) does two taps of 16 lanes. How weights split into such pairs is the
# caller's (``convolve_u8``); here ``pair_bits`` and ``bits`` are parameters.


def pair_madd(builder, v, k32, features):
    """<16 x i32>: per lane v[2i] * k.lo16 + v[2i+1] * k.hi16 (``v`` <32 x i16>, ``k32``
    the two int16 coefficients packed in an i32): ``pmaddwd`` where the CPU has it, else
    the same arithmetic spelled out."""
    w32 = ir.VectorType(I16, 32)
    kv = builder.bitcast(splat(builder, k32), w32)
    if "avx512bw" in features:
        return builder.call(declare(builder, "llvm.x86.avx512.pmaddw.d.512", W16, [w32, w32]), [v, kv])
    if "avx2" in features or "sse2" in features:
        width = 16 if "avx2" in features else 8
        name = "llvm.x86.avx2.pmadd.wd" if width == 16 else "llvm.x86.sse2.pmadd.wd"
        fn = declare(builder, name, ir.VectorType(I32, width // 2), [ir.VectorType(I16, width)] * 2)
        parts = []
        for lo in range(0, 32, width):
            pick = ir.Constant(ir.VectorType(I32, width), list(range(lo, lo + width)))
            parts.append(builder.call(fn, [builder.shuffle_vector(v, v, pick), builder.shuffle_vector(kv, kv, pick)]))
        while len(parts) > 1:
            n = parts[0].type.count
            both = ir.Constant(ir.VectorType(I32, 2 * n), list(range(2 * n)))
            parts = [builder.shuffle_vector(parts[i], parts[i + 1], both) for i in range(0, len(parts), 2)]
        return parts[0]
    even = ir.Constant(W16, list(range(0, 32, 2)))
    odd = ir.Constant(W16, list(range(1, 32, 2)))
    total = None
    for pick in (even, odd):
        a = builder.sext(builder.shuffle_vector(v, v, pick), W16)
        b = builder.sext(builder.shuffle_vector(kv, kv, pick), W16)
        total = builder.mul(a, b) if total is None else builder.add(total, builder.mul(a, b))
    return total


def accumulate_pairs(builder, acc_ptr, v, k32, features):
    """``*acc_ptr += pair_madd(v, k32)``: one ``vpdpwssd`` (multiply-add into the int32
    sums, wrapping as the separate add does) where the CPU has AVX512-VNNI."""
    if "avx512vnni" in features:
        w32 = ir.VectorType(I16, 32)
        kv = splat(builder, k32)
        fn = declare(builder, "llvm.x86.avx512.vpdpwssd.512", W16, [W16, w32, w32])
        builder.store(builder.call(fn, [builder.load(acc_ptr), v, builder.bitcast(kv, w32)]), acc_ptr)
        return
    builder.store(builder.add(builder.load(acc_ptr), pair_madd(builder, v, k32, features)), acc_ptr)


@intrinsic
def interleave_pairs(typingctx, dst, di, src, si):
    """``dst[di + 2j] = src[si + j]``, ``dst[di + 2j + 1] = src[si + 64 + j]`` for j < 64:
    two adjacent 64-byte columns of samples, side by side as int16. No bounds check."""
    sig = types.none(dst, di, src, si)

    def codegen(context, builder, signature, args):
        d = context.make_array(signature.args[0])(context, builder, args[0])
        s = context.make_array(signature.args[2])(context, builder, args[2])
        b16, w32 = ir.VectorType(I8, 16), ir.VectorType(I16, 32)
        zip16 = ir.Constant(ir.VectorType(I32, 32), [j // 2 + 16 * (j % 2) for j in range(32)])

        def at(array, base, k, vector):
            return vector_at(builder, array.data, builder.add(base, ir.Constant(I64, k)), vector)

        for g in range(4):
            a = builder.load(at(s, args[3], 16 * g, b16), align=1)
            b = builder.load(at(s, args[3], 64 + 16 * g, b16), align=1)
            builder.store(builder.zext(builder.shuffle_vector(a, b, zip16), w32), at(d, args[1], 32 * g, w32), align=2)
        return context.get_dummy_value()

    return sig, codegen


def _finish_pairs(builder, sums, single, shift, out_ptr, pair_bits, bits):
    """Store clip8 of the 64 lanes' ``2**(bits-1) + (H << pair_bits) + L`` (or, ``single``,
    of ``2**(bits-1) + (S << shift)``), shifted right by ``bits``, as bytes at ``out_ptr``."""
    const = lambda c: ir.Constant(W16, [c] * 16)  # noqa: E731
    if single:
        sh = splat(builder, shift)
    for g in range(4):
        if single:
            ss = builder.shl(builder.load(sums[g]), sh)
        else:
            ss = builder.add(builder.shl(builder.load(sums[g]), const(pair_bits)), builder.load(sums[4 + g]))
        ss = clip8(builder, builder.add(ss, const(1 << (bits - 1))), const(bits))
        builder.store(ss, vector_at(builder, out_ptr, ir.Constant(I64, 16 * g), ir.VectorType(I8, 16)), align=1)


def pairs_dot(single: bool, pair_bits: int, bits: int):
    """An intrinsic ``(pairs, base, count, khi, klo, kbase, out, oi)``: ``out[oi:oi+64]`` =
    clip8 of 64 lanes' ``(2**(bits-1) + (H << pair_bits) + L) >> bits``, where H and L sum
    ``count`` pairwise multiply-adds of ``pairs[base + 256 p : + 128]`` (int16, as
    ``interleave_pairs`` lays them) with the packed coefficient pairs ``khi[kbase + p]``
    and ``klo[kbase + p]``. ``single``: weights that are int16 values shifted left by a
    common amount, one multiply-add a pair, ``klo`` being that shift. No bounds check."""

    @intrinsic
    def dot(typingctx, pairs, base, count, khi, klo, kbase, out, oi):
        sig = types.none(pairs, base, count, khi, klo, kbase, out, oi)

        def codegen(context, builder, signature, args):
            features = host_features(context)
            pa = context.make_array(signature.args[0])(context, builder, args[0])
            kh = context.make_array(signature.args[3])(context, builder, args[3])
            kl = None if single else context.make_array(signature.args[4])(context, builder, args[4])
            o = context.make_array(signature.args[6])(context, builder, args[6])
            base, kbase, count = as_i64(builder, args[1]), as_i64(builder, args[5]), as_i64(builder, args[2])
            sums = [cgutils.alloca_once_value(builder, ir.Constant(W16, [0] * 16)) for _ in range(4 if single else 8)]
            with cgutils.for_range(builder, count) as loop:
                p = loop.index
                row = builder.add(base, builder.mul(p, ir.Constant(I64, 256)))
                k_hi = builder.load(builder.gep(kh.data, [builder.add(kbase, p)]))
                k_lo = None if kl is None else builder.load(builder.gep(kl.data, [builder.add(kbase, p)]))
                for g in range(4):
                    offset = builder.add(row, ir.Constant(I64, 32 * g))
                    v = builder.load(vector_at(builder, pa.data, offset, ir.VectorType(I16, 32)), align=2)
                    accumulate_pairs(builder, sums[g], v, k_hi, features)
                    if not single:
                        accumulate_pairs(builder, sums[4 + g], v, k_lo, features)
            _finish_pairs(builder, sums, single, args[4], builder.gep(o.data, [as_i64(builder, args[7])]),
                          pair_bits, bits)
            return context.get_dummy_value()

        return sig, codegen

    return dot


def rows_dot(single: bool, pair_bits: int, bits: int):
    """``pairs_dot`` with the pairs read straight from rows: an intrinsic ``(src, first,
    pitch, count, last, khi, klo, kbase, out, oi)`` where pair p is the 64 samples at
    ``first + 2p * pitch`` and at ``first + (2p + 1) * pitch`` (but never past ``last``: a
    pair's missing second tap has weight 0), interleaved in registers. No bounds check."""

    @intrinsic
    def dot(typingctx, src, first, pitch, count, last, khi, klo, kbase, out, oi):
        sig = types.none(src, first, pitch, count, last, khi, klo, kbase, out, oi)

        def codegen(context, builder, signature, args):
            features = host_features(context)
            sa = context.make_array(signature.args[0])(context, builder, args[0])
            kh = context.make_array(signature.args[5])(context, builder, args[5])
            kl = None if single else context.make_array(signature.args[6])(context, builder, args[6])
            o = context.make_array(signature.args[8])(context, builder, args[8])
            b16 = ir.VectorType(I8, 16)
            zip16 = ir.Constant(ir.VectorType(I32, 32), [j // 2 + 16 * (j % 2) for j in range(32)])
            first, pitch, count, last, kbase = (as_i64(builder, args[i]) for i in (1, 2, 3, 4, 7))
            sums = [cgutils.alloca_once_value(builder, ir.Constant(W16, [0] * 16)) for _ in range(4 if single else 8)]
            with cgutils.for_range(builder, count) as loop:
                p = loop.index
                r1 = builder.add(first, builder.mul(builder.mul(p, ir.Constant(I64, 2)), pitch))
                r2 = builder.add(r1, pitch)
                r2 = builder.select(builder.icmp_signed(">", r2, last), last, r2)
                k_hi = builder.load(builder.gep(kh.data, [builder.add(kbase, p)]))
                k_lo = None if kl is None else builder.load(builder.gep(kl.data, [builder.add(kbase, p)]))
                for g in range(4):
                    def row(r):
                        return builder.load(vector_at(builder, sa.data, builder.add(r, ir.Constant(I64, 16 * g)), b16),
                                            align=1)
                    v = builder.zext(builder.shuffle_vector(row(r1), row(r2), zip16), ir.VectorType(I16, 32))
                    accumulate_pairs(builder, sums[g], v, k_hi, features)
                    if not single:
                        accumulate_pairs(builder, sums[4 + g], v, k_lo, features)
            _finish_pairs(builder, sums, single, args[6], builder.gep(o.data, [as_i64(builder, args[9])]),
                          pair_bits, bits)
            return context.get_dummy_value()

        return sig, codegen

    return dot
