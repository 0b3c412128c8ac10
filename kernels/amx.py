"""Intel AMX int8 tiles, where the CPU and the process have them: asking for them, and the tile operations.

A horizontal pass over a band of source columns is a small matrix product: 16 source rows
(as RGBX bytes) times a matrix of weights gives 16 rows of a few outputs. AMX's
``tdpbusd`` multiplies a 16 x 64 byte tile by a 64 x 16 one in one instruction (16K
multiply-adds), where AVX-512 does 64 a cycle. Pillow's 22-bit weights go in as three
signed bytes (``split_weight``); three int32 products recombine exactly (``finish``).
The pass itself (its weight tiles and bands) is ``resample_amx``'s.

Linux hands AMX's large register state to a process only on request
(``arch_prctl(ARCH_REQ_XCOMP_PERM)``), and the request is a setting of the whole process
(its threads' signal frames grow by 8 KB). So importing changes nothing: the server asks
(``request``), and so may a host process that wants the same; the kernels check the
permission on every call (``permitted``) and use AVX-512 without it. Without AMX on the
CPU the intrinsics compile to nothing and ``permitted`` is always false.
"""

from __future__ import annotations

import ctypes
import platform
import sys

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .simd_ir import I1, I8, I32, I64, as_i64, byte_data, clip8, declare, host_features, splat

_SYS_ARCH_PRCTL = 158  # x86-64
_ARCH_GET_XCOMP_PERM = 0x1022
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18

#: Tiles: C (three int32 accumulators, one per weight byte) 0-2, A (source rows) 3, B (weights) 4-6.
_C, _A, _B = (0, 1, 2), 3, (4, 5, 6)
TILE_BYTES = 1024  # 16 rows of 64 bytes


def _has_amx(context) -> bool:
    return {"amx-tile", "amx-int8"} <= host_features(context)


def request() -> bool:
    """Ask Linux for AMX tile data for this whole process; whether the kernels may use it."""
    if sys.platform != "linux" or platform.machine() != "x86_64":  # the syscall number is x86-64's
        return False
    try:
        ctypes.CDLL(None).syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_REQ_XCOMP_PERM),
                                  ctypes.c_long(_XFEATURE_XTILEDATA))
    except (OSError, AttributeError):
        return False
    return granted()


def granted() -> bool:
    """Whether the kernels may use AMX tiles in this process: compiled for a CPU with them
    and the tile data granted. Asked here without compiling anything (a compiled kernel
    would fill the kernel cache, which tells the server whether this is a first start)."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    from numba.core.registry import cpu_target

    if not _has_amx(cpu_target.target_context):
        return False
    mask = ctypes.c_uint64(0)
    try:
        failed = ctypes.CDLL(None).syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_GET_XCOMP_PERM),
                                           ctypes.byref(mask))
    except (OSError, AttributeError):
        return False
    return failed == 0 and bool(mask.value & (1 << _XFEATURE_XTILEDATA))


@intrinsic
def permitted(typingctx):
    """Whether the kernels may run AMX instructions: compiled for a CPU with AMX-INT8, and
    this process granted tile data (``arch_prctl(ARCH_GET_XCOMP_PERM)``, through libc's
    ``syscall``)."""

    def codegen(context, builder, signature, args):
        if not _has_amx(context):
            return ir.Constant(I1, 0)
        mask = cgutils.alloca_once_value(builder, ir.Constant(I64, 0))
        syscall = declare(builder, "syscall", I64, [I64], var_arg=True)
        rax = builder.call(syscall, [ir.Constant(I64, _SYS_ARCH_PRCTL), ir.Constant(I64, _ARCH_GET_XCOMP_PERM),
                                     builder.ptrtoint(mask, I64)])
        bit = builder.and_(builder.load(mask), ir.Constant(I64, 1 << _XFEATURE_XTILEDATA))
        return builder.and_(builder.icmp_signed("==", rax, ir.Constant(I64, 0)),
                            builder.icmp_unsigned("!=", bit, ir.Constant(I64, 0)))

    return types.boolean(), codegen


def _void(builder, name, argtypes):
    return declare(builder, name, ir.VoidType(), argtypes)


@intrinsic
def configure(typingctx, cfg):
    """Load the tile configuration (``tile_config``) for this thread."""

    def codegen(context, builder, signature, args):
        if _has_amx(context):
            builder.call(_void(builder, "llvm.x86.ldtilecfg", [ir.PointerType(I8)]),
                         [byte_data(context, builder, signature.args[0], args[0])])
        return context.get_dummy_value()

    return types.none(cfg), codegen


@intrinsic
def release(typingctx):
    """Drop this thread's tile state (so context switches stop saving it)."""

    def codegen(context, builder, signature, args):
        if _has_amx(context):
            builder.call(_void(builder, "llvm.x86.tilerelease", []), [])
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def zero_sums(typingctx):
    """C tiles = 0."""

    def codegen(context, builder, signature, args):
        if _has_amx(context):
            fn = _void(builder, "llvm.x86.tilezero", [I8])
            for t in _C:
                builder.call(fn, [ir.Constant(I8, t)])
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def accumulate(typingctx, src, si, pitch, weights, wi):
    """C[p] += A x B[p] for the three weight bytes p: A is 16 rows of 64 bytes at
    ``src[si + r * pitch]``, B[p] the 16 x 64 tile at ``weights[wi + p * 1024]`` (VNNI
    layout). No bounds check."""

    def codegen(context, builder, signature, args):
        if not _has_amx(context):
            return context.get_dummy_value()
        load = _void(builder, "llvm.x86.tileloadd64", [I8, ir.PointerType(I8), I64])
        dot = _void(builder, "llvm.x86.tdpbusd", [I8, I8, I8])
        s = byte_data(context, builder, signature.args[0], args[0])
        w = byte_data(context, builder, signature.args[3], args[3])
        builder.call(load, [ir.Constant(I8, _A), builder.gep(s, [as_i64(builder, args[1])]), as_i64(builder, args[2])])
        for p in range(3):
            at = builder.add(as_i64(builder, args[4]), ir.Constant(I64, p * TILE_BYTES))
            builder.call(load, [ir.Constant(I8, _B[p]), builder.gep(w, [at]), ir.Constant(I64, 64)])
            builder.call(dot, [ir.Constant(I8, _C[p]), ir.Constant(I8, _A), ir.Constant(I8, _B[p])])
        return context.get_dummy_value()

    return types.none(src, si, pitch, weights, wi), codegen


@intrinsic
def store_sums(typingctx, scratch):
    """The C tiles to ``scratch`` (int32 [3 * 256]), one after the other."""

    def codegen(context, builder, signature, args):
        if _has_amx(context):
            fn = _void(builder, "llvm.x86.tilestored64", [I8, ir.PointerType(I8), I64])
            d = byte_data(context, builder, signature.args[0], args[0])
            for p in range(3):
                builder.call(fn, [ir.Constant(I8, _C[p]), builder.gep(d, [ir.Constant(I64, p * TILE_BYTES)]),
                                  ir.Constant(I64, 64)])
        return context.get_dummy_value()

    return types.none(scratch), codegen


@intrinsic
def finish(typingctx, scratch, dst, di, pitch, count, half, bits):
    """For each of the 16 rows r: ``dst[di + r * pitch + j]`` = clip8((S0 + (S1 << 8) +
    (S2 << 16) + half) >> bits) for j < count (<= 16), S_p being lane j of row r of the
    p-th sum in ``scratch``. The int32 arithmetic wraps as one int32 sum of the whole
    weights would. No bounds check."""

    def codegen(context, builder, signature, args):
        if not _has_amx(context):
            return context.get_dummy_value()
        w16, b16 = ir.VectorType(I32, 16), ir.VectorType(I8, 16)
        const = lambda c: ir.Constant(w16, [c] * 16)  # noqa: E731
        s = builder.bitcast(byte_data(context, builder, signature.args[0], args[0]), ir.PointerType(w16))
        d = byte_data(context, builder, signature.args[1], args[1])
        mask = builder.icmp_signed("<", ir.Constant(w16, list(range(16))), splat(builder, args[4]))
        half, bits = splat(builder, args[5]), splat(builder, args[6])
        # the typed-pointer name, which LLVMs with opaque pointers remangle as they read it
        store = declare(builder, "llvm.masked.store.v16i8.p0v16i8", ir.VoidType(),
                        [b16, ir.PointerType(b16), I32, ir.VectorType(I1, 16)])
        for r in range(16):
            sums = [builder.load(builder.gep(s, [ir.Constant(I64, 16 * p + r)]), align=4) for p in range(3)]
            v = builder.add(builder.add(sums[0], builder.shl(sums[1], const(8))), builder.shl(sums[2], const(16)))
            v = clip8(builder, builder.add(v, half), bits)
            at = builder.add(as_i64(builder, args[2]), builder.mul(as_i64(builder, args[3]), ir.Constant(I64, r)))
            builder.call(store, [v, builder.bitcast(builder.gep(d, [at]), ir.PointerType(b16)), ir.Constant(I32, 1),
                                 mask])
        return context.get_dummy_value()

    return types.none(scratch, dst, di, pitch, count, half, bits), codegen


@numba.njit(nogil=True, cache=True)
def tile_config():
    """The 64-byte configuration: palette 1, every tile 16 rows of 64 bytes."""
    cfg = np.zeros(64, np.uint8)
    cfg[0] = 1
    for t in range(7):
        cfg[16 + 2 * t] = 64
        cfg[48 + t] = 16
    return cfg


@numba.njit(nogil=True, cache=True, inline="always")
def split_weight(k):
    """(b0, b1, b2) signed bytes with k = b0 + (b1 << 8) + (b2 << 16), or ok=False when
    b2 does not fit a signed byte (|k| >= ~2**23; resampling weights stay below 2**23)."""
    b0 = ((k + 128) & 255) - 128
    k1 = (k - b0) >> 8
    b1 = ((k1 + 128) & 255) - 128
    b2 = (k1 - b1) >> 8
    return b0, b1, b2, -128 <= b2 <= 127
