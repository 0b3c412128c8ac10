"""Rescale + normalize as 256-entry per-channel lookup tables, and the writers' row step.

A uint8 input has only 256 values per channel, so computing the HF arithmetic once per
value and looking it up is exact by construction. The lookup is a scalar load per
element, though, which LLVM cannot vectorize; a few float32 operations can be. Because
the output depends only on (channel, value), arithmetic that reproduces all 256 entries
of each channel's table is exact for every image: ``arithmetic`` searches for such
constants once per table and the writers use them, keeping the lookup for tables no
candidate reproduces (e.g. bf16-rounded ones). A writer's uint8 output (raw pixels, for
engines that normalize on the device) gets the bytes themselves (``normalize_row``).
"""

from __future__ import annotations

import functools
import platform

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from .bf16 import round_bf16
from .simd_ir import declare, fma32, wide_vectors

#: float32 outputs at least this large are written with streaming stores (``stream_run``):
#: they do not fit the caches anyway, and ordinary stores would first read every line they
#: write (a tensor written once costs three times its size in memory traffic).
STREAM_MIN_BYTES = 1 << 21
_LINE = 64  # bytes per cache line
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")


def pil_backend_lut(
    mean, std, rescale_factor: float = 1 / 255, do_rescale: bool = True, do_normalize: bool = True
) -> np.ndarray:
    """float32 [C, 256]: the HF PIL backend's ``rescale`` then ``normalize`` of each value.

    ``rescale`` is ``(x.astype(float64) * factor).astype(float32)``; ``normalize`` is
    ``(x - float32(mean)) / float32(std)`` in float32 (uint8 is first cast to float32).
    """
    mean = np.atleast_1d(np.asarray(mean, dtype=np.float64))
    std = np.atleast_1d(np.asarray(std, dtype=np.float64))
    channels = max(len(mean), len(std), 3) if do_normalize else 3
    values = np.arange(256, dtype=np.uint8)
    x = (values.astype(np.float64) * rescale_factor).astype(np.float32) if do_rescale else values.astype(np.float32)
    lut = np.empty((channels, 256), dtype=np.float32)
    for c in range(channels):
        if do_normalize:
            m = np.float32(mean[c % len(mean)])
            s = np.float32(std[c % len(std)])
            lut[c] = (x - m) / s
        else:
            lut[c] = x
    return lut


def torchvision_backend_lut(
    mean, std, rescale_factor: float = 1 / 255, do_rescale: bool = True, do_normalize: bool = True
) -> np.ndarray:
    """float32 [C, 256]: the HF torchvision backend's fused rescale+normalize.

    With both steps on, transformers folds the rescale into the statistics:
    ``mean' = float32(mean) * (1/factor)`` and ``std'`` likewise (float32 products), then
    ``(float32(x) - mean') / std'``. One of them alone is applied as is.
    """
    return torchvision_backend_values(np.arange(256, dtype=np.float32), mean, std, rescale_factor, do_rescale,
                                      do_normalize)


def torchvision_backend_values(
    x, mean, std, rescale_factor: float = 1 / 255, do_rescale: bool = True, do_normalize: bool = True
) -> np.ndarray:
    """float32 [3, len(x)]: ``torchvision_backend_lut``'s arithmetic applied to any float32
    inputs ``x`` (e.g. a padding value outside 0..255 that is normalized with the image)."""
    mean = np.atleast_1d(np.asarray(mean, dtype=np.float64))
    std = np.atleast_1d(np.asarray(std, dtype=np.float64))
    x = np.atleast_1d(np.asarray(x, dtype=np.float32))
    out = np.empty((3, x.shape[0]), dtype=np.float32)
    inv = np.float32(1.0 / rescale_factor)
    for c in range(3):
        m = np.float32(mean[c % len(mean)])
        s = np.float32(std[c % len(std)])
        if do_rescale and do_normalize:
            out[c] = (x - np.float32(m * inv)) / np.float32(s * inv)
        elif do_normalize:
            out[c] = (x - m) / s
        elif do_rescale:
            out[c] = x * np.float32(rescale_factor)
        else:
            out[c] = x
    return out


# Rescale factors tried when fitting: the HF default as a float64 product (PIL backend,
# ToTensor's division gives the same values) and as a float32 one (torchvision backend),
# and none. A table made with another factor is served by lookup.
_RESCALES = (1 / 255, float(np.float32(1 / 255)), 1.0)
_ULPS = 6  # neighbours tried on each side of the estimated mean and std


def _split(factor: float) -> tuple[np.float32, np.float32]:
    """``factor`` as ``hi + lo`` where ``hi`` keeps 16 significant bits, so ``v * hi`` is
    exact in float32 for a byte ``v`` and ``v * hi + v * lo`` rounds ``v * factor`` once
    (more or less: the fit checks every value)."""
    hi = np.array([factor], np.float32).view(np.uint32) & np.uint32(0xFFFFFF00)
    hi = hi.view(np.float32)[0]
    return hi, np.float32(factor - np.float64(hi))


def _around(x: float) -> np.ndarray:
    """float32 ``x`` and its ``_ULPS`` float32 neighbours on each side."""
    up = down = np.float32(x)
    out = [up]
    for _ in range(_ULPS):
        up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(-np.inf))
        out += [up, down]
    return np.array(out, np.float32)


def _fit_channel(table: np.ndarray):
    """(hi, lo, mean, std) float32 with ``((v*hi + v*lo) - mean) / std`` in float32 equal
    to ``table[v]`` bit for bit for every byte ``v``, or None."""
    if not np.isfinite(table).all():
        return None
    v = np.arange(256, dtype=np.float32)
    want = table.view(np.uint32)
    for factor in _RESCALES:
        hi, lo = _split(factor)
        x = v * hi + v * lo
        # the slope is well determined by all 256 values; the mean by table[0] = -mean/std
        slope = np.polyfit(x.astype(np.float64), table.astype(np.float64), 1)[0]
        if not np.isfinite(slope) or slope == 0:
            continue
        stds = _around(1 / slope)
        means = _around(-np.float64(table[0]) / slope)
        with np.errstate(all="ignore"):
            got = (x[None, None, :] - means[None, :, None]) / stds[:, None, None]
        hits = np.argwhere((got.view(np.uint32) == want).all(axis=2))
        if len(hits):
            i, j = hits[0]
            return hi, lo, means[j], stds[i]
    return None


def _bf16_around(x: float, steps: int = 4) -> np.ndarray:
    """bfloat16 ``x`` (rounded) and its ``steps`` bfloat16 neighbours on each side, as float32."""
    bits = int(round_bf16(np.float32(x)).view(np.uint32)) >> 16
    near = np.array([(bits + k) & 0xFFFF for k in range(-steps, steps + 1)], np.uint32) << np.uint32(16)
    return near.view(np.float32)


def _fit_bf16_channel(table: np.ndarray):
    """(factor, mean, multiplier) float32 with ``bf16(bf16(bf16(v * factor) - mean) *
    multiplier)`` (each operation in float32, then rounded to bfloat16 as torch does)
    equal to ``table[v]`` for every byte ``v``, or None. The tables of processors that
    compute in bfloat16 (``bf16.bf16_backend_lut``): their ``/ std`` becomes a
    multiplication by a float32 near ``1 / std`` (exact for a power of two; otherwise the
    final bfloat16 rounding usually hides the difference, and all 256 values are checked),
    since a division per value would cost as much as looking it up."""
    if not np.isfinite(table).all():
        return None
    v = np.arange(256, dtype=np.float32)
    want = table.view(np.uint32)
    for factor in _RESCALES:
        f = np.float32(factor)
        r = round_bf16(v * f)
        slope = np.polyfit(r.astype(np.float64), table.astype(np.float64), 1)[0]
        if not np.isfinite(slope) or slope == 0:
            continue
        stds = _bf16_around(1 / slope)
        means = _bf16_around(-np.float64(table[0]) / slope)
        with np.errstate(all="ignore"):
            for std in stds:
                inv = np.float32(1) / std
                for mean in means:
                    if np.array_equal(round_bf16(round_bf16(r - mean) * inv).view(np.uint32), want):
                        return f, mean, inv
    return None


_NO_FIT = np.empty((0, 4), np.float32)


@functools.lru_cache(maxsize=64)
def _fit(table_bytes: bytes) -> np.ndarray:
    table = np.frombuffer(table_bytes, np.float32).reshape(3, 256)
    rows = [_fit_channel(table[c]) for c in range(3)]
    if any(r is None for r in rows):
        rows = [_fit_bf16_channel(table[c]) for c in range(3)]
        if any(r is None for r in rows):
            return _NO_FIT
    coef = np.array(rows, np.float32)
    if not _reproduces(coef, table):
        return _NO_FIT
    if coef.shape[1] == 4:  # the division as a corrected multiplication (``_recip_run``), where exact
        recip = np.concatenate([coef, np.float32(1) / coef[:, 3:]], axis=1)
        if _reproduces(recip, table):
            return recip
    return coef


def _reproduces(coef: np.ndarray, table: np.ndarray) -> bool:
    """Whether the compiled row loops themselves (RGB and RGBX) give ``table`` for every
    byte, on a row long enough for their vector bodies and tails."""
    n = 256 + 7
    for step in (3, 4):
        src = np.repeat(np.arange(n) % 256, step).astype(np.uint8)
        got = np.empty((3, n), np.float32)
        normalize_row(src, n, coef, table, got[0], got[1], got[2], step)
        if not np.array_equal(got.view(np.uint32), table.view(np.uint32)[:, np.arange(n) % 256]):
            return False
    return True


def arithmetic(lut: np.ndarray) -> np.ndarray:
    """float32 [3, 4]: per channel (hi, lo, mean, std) such that
    ``((v*hi + v*lo) - mean) / std`` in float32 is ``lut[c, v]`` for every byte; or
    float32 [3, 5]: the same with ``1 / std`` as a fifth column, when the division done
    as a corrected multiplication (``_recip_run``) gives every value too (the row loops
    then use it; code reading four columns divides); or
    float32 [3, 3]: per channel (factor, mean, multiplier) such that the bfloat16 chain
    ``bf16(bf16(bf16(v * factor) - mean) * multiplier)`` is (tables computed in bfloat16,
    ``_fit_bf16_channel``); or an
    empty [0, 4] array when some channel has neither (the writers then look values up).
    Depends only on the table's first three rows; cached per table."""
    return _fit(np.ascontiguousarray(lut[:3], dtype=np.float32).tobytes())


@numba.njit(nogil=True, cache=True, inline="always")
def _arith_run(src, n, step, h0, l0, m0, s0, h1, l1, m1, s1, h2, l2, m2, s2, d0, d1, d2):
    for i in range(n):
        v0 = np.float32(src[step * i])
        v1 = np.float32(src[step * i + 1])
        v2 = np.float32(src[step * i + 2])
        d0[i] = (v0 * h0 + v0 * l0 - m0) / s0
        d1[i] = (v1 * h1 + v1 * l1 - m1) / s1
        d2[i] = (v2 * h2 + v2 * l2 - m2) / s2


@numba.njit(nogil=True, cache=True, inline="always")
def _recip_run(src, n, step, h0, l0, m0, s0, r0, h1, l1, m1, s1, r1, h2, l2, m2, s2, r2, d0, d1, d2):
    """``_arith_run`` with each division ``x / s`` as ``q = x * r`` (``r`` = 1 / s in
    float32) corrected by its residual, ``q + (x - q * s) * r`` with two fused
    multiply-adds: three vector operations where a division costs about ten of them
    (the writers were division-bound). Used only where it gives the table's value for
    all 256 bytes (``_fit``)."""
    for i in range(n):
        x0 = np.float32(src[step * i])
        x1 = np.float32(src[step * i + 1])
        x2 = np.float32(src[step * i + 2])
        x0 = x0 * h0 + x0 * l0 - m0
        x1 = x1 * h1 + x1 * l1 - m1
        x2 = x2 * h2 + x2 * l2 - m2
        q0 = x0 * r0
        q1 = x1 * r1
        q2 = x2 * r2
        d0[i] = fma32(fma32(-q0, s0, x0), r0, q0)
        d1[i] = fma32(fma32(-q1, s1, x1), r1, q1)
        d2[i] = fma32(fma32(-q2, s2, x2), r2, q2)


@intrinsic
def _bf16(typingctx, x):
    """float32 -> float32 rounded to bfloat16 (nearest, ties to even) for a value that is
    not NaN: the bf16 chains a fit accepts have none (a NaN would reach the table). In
    32-bit LLVM IR, so the loops around it vectorize."""
    sig = types.float32(types.float32)

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        u = builder.bitcast(args[0], i32)
        odd = builder.and_(builder.lshr(u, ir.Constant(i32, 16)), ir.Constant(i32, 1))
        u = builder.add(builder.add(u, ir.Constant(i32, 0x7FFF)), odd)
        return builder.bitcast(builder.and_(u, ir.Constant(i32, 0xFFFF0000)), ir.FloatType())

    return sig, codegen


@numba.njit(nogil=True, cache=True, inline="always")
def _bf16_run(src, n, step, f0, m0, r0, f1, m1, r1, f2, m2, r2, d0, d1, d2):
    for i in range(n):
        v0 = np.float32(src[step * i])
        v1 = np.float32(src[step * i + 1])
        v2 = np.float32(src[step * i + 2])
        d0[i] = _bf16(_bf16(_bf16(v0 * f0) - m0) * r0)
        d1[i] = _bf16(_bf16(_bf16(v1 * f1) - m1) * r1)
        d2[i] = _bf16(_bf16(_bf16(v2 * f2) - m2) * r2)


@numba.njit(nogil=True, cache=True, inline="always")
def _split_run(src, n, step, d0, d1, d2):
    for i in range(n):
        d0[i] = src[step * i]
        d1[i] = src[step * i + 1]
        d2[i] = src[step * i + 2]


@numba.njit(nogil=True, cache=True, inline="always")
def _split_row(src, n, d0, d1, d2, step):
    """``normalize_row`` into uint8 rows: the bytes de-interleaved, once per constant step
    (LLVM vectorizes it with byte shuffles)."""
    wide_vectors()
    if step == 4:
        _split_run(src, n, 4, d0, d1, d2)
    else:
        _split_run(src, n, 3, d0, d1, d2)


@numba.njit(nogil=True, cache=True)
def _normalize_row(src, n, coef, lut, d0, d1, d2, step):
    """``normalize_row`` into float32 rows. Called, not inlined: its seven loops compile
    once for all the writers that call it (a call per row costs nothing beside it)."""
    wide_vectors()
    if coef.shape[0] == 3 and coef.shape[1] == 3:
        f0, m0, r0 = coef[0, 0], coef[0, 1], coef[0, 2]
        f1, m1, r1 = coef[1, 0], coef[1, 1], coef[1, 2]
        f2, m2, r2 = coef[2, 0], coef[2, 1], coef[2, 2]
        if step == 4:
            _bf16_run(src, n, 4, f0, m0, r0, f1, m1, r1, f2, m2, r2, d0, d1, d2)
        else:
            _bf16_run(src, n, 3, f0, m0, r0, f1, m1, r1, f2, m2, r2, d0, d1, d2)
    elif coef.shape[0] == 3 and coef.shape[1] == 5:
        h0, l0, m0, s0, r0 = coef[0, 0], coef[0, 1], coef[0, 2], coef[0, 3], coef[0, 4]
        h1, l1, m1, s1, r1 = coef[1, 0], coef[1, 1], coef[1, 2], coef[1, 3], coef[1, 4]
        h2, l2, m2, s2, r2 = coef[2, 0], coef[2, 1], coef[2, 2], coef[2, 3], coef[2, 4]
        if step == 4:
            _recip_run(src, n, 4, h0, l0, m0, s0, r0, h1, l1, m1, s1, r1, h2, l2, m2, s2, r2, d0, d1, d2)
        else:
            _recip_run(src, n, 3, h0, l0, m0, s0, r0, h1, l1, m1, s1, r1, h2, l2, m2, s2, r2, d0, d1, d2)
    elif coef.shape[0] == 3:
        h0, l0, m0, s0 = coef[0, 0], coef[0, 1], coef[0, 2], coef[0, 3]
        h1, l1, m1, s1 = coef[1, 0], coef[1, 1], coef[1, 2], coef[1, 3]
        h2, l2, m2, s2 = coef[2, 0], coef[2, 1], coef[2, 2], coef[2, 3]
        if step == 4:
            _arith_run(src, n, 4, h0, l0, m0, s0, h1, l1, m1, s1, h2, l2, m2, s2, d0, d1, d2)
        else:
            _arith_run(src, n, 3, h0, l0, m0, s0, h1, l1, m1, s1, h2, l2, m2, s2, d0, d1, d2)
    else:
        t0, t1, t2 = lut[0], lut[1], lut[2]
        for i in range(n):
            d0[i] = t0[src[step * i]]
            d1[i] = t1[src[step * i + 1]]
            d2[i] = t2[src[step * i + 2]]


def normalize_row(src, n, coef, lut, d0, d1, d2, step=3):
    """``d_c[i] = lut[c, src[step*i + c]]`` for ``i < n``: ``src`` an interleaved uint8
    row, RGB (``step`` 3) or Pillow's RGBX (4); ``coef`` from ``arithmetic(lut)``. The
    arithmetic loop reads the three channels together, so LLVM vectorizes it (shuffled
    byte loads, float32 math, contiguous stores), once per constant step; the lookup
    loop stays scalar. A [3, 3] ``coef`` is the bfloat16 chain. Rows ``d_c`` of uint8
    get the raw bytes, ``d_c[i] = src[step*i + c]`` (``coef`` and ``lut`` not read).
    The dtype picks the loop when numba types the call (``_normalize_row_numba``), so the
    float32 code has no branch for uint8."""
    if d0.dtype == np.uint8:
        _split_row(src, n, d0, d1, d2, step)
    else:
        _normalize_row(src, n, coef, lut, d0, d1, d2, step)


# A test in the body on a constant (as ``_c_typed``) leaves the dead branch to LLVM,
# which then compiled the float32 writers differently; choosing at typing does not.
@overload(normalize_row, inline="always")
def _normalize_row_numba(src, n, coef, lut, d0, d1, d2, step=3):
    if d0.dtype == types.uint8:
        def split(src, n, coef, lut, d0, d1, d2, step=3):
            _split_row(src, n, d0, d1, d2, step)

        return split

    def normalized(src, n, coef, lut, d0, d1, d2, step=3):
        _normalize_row(src, n, coef, lut, d0, d1, d2, step)

    return normalized


@intrinsic
def copy_run(typingctx, dst, i, src, j, n):
    """``dst[i:i+n] = src[j:j+n]`` for 1-D arrays whose elements are adjacent in memory
    (unit stride, even if typed non-contiguous), as one ``llvm.memcpy``. LLVM expands a
    short one into a few vector moves; the equivalent loop stays scalar because numba
    cannot tell LLVM that the two arrays do not overlap."""
    def codegen(context, builder, sig, args):
        d = context.make_array(sig.args[0])(context, builder, args[0])
        s = context.make_array(sig.args[2])(context, builder, args[2])
        itemsize = context.get_abi_sizeof(context.get_data_type(sig.args[0].dtype))
        cgutils.raw_memcpy(builder, builder.gep(d.data, [args[1]]), builder.gep(s.data, [args[3]]), args[4], itemsize)
        return context.get_dummy_value()

    return types.void(dst, i, src, j, n), codegen


@intrinsic
def _line_offset(typingctx, arr, i):
    """The byte offset of ``arr[i]`` (1-D, from its data pointer) within its cache line."""
    def codegen(context, builder, sig, args):
        a = context.make_array(sig.args[0])(context, builder, args[0])
        address = builder.ptrtoint(builder.gep(a.data, [args[1]]), ir.IntType(64))
        return builder.and_(address, ir.Constant(ir.IntType(64), _LINE - 1))

    return types.int64(arr, i), codegen


def _itemsize(context, arr_type) -> int:
    return context.get_abi_sizeof(context.get_data_type(arr_type.dtype))


@intrinsic
def _elem_bytes(typingctx, arr):
    """The size of ``arr``'s elements in bytes (a constant)."""
    def codegen(context, builder, sig, args):
        return ir.Constant(ir.IntType(64), _itemsize(context, sig.args[0]))

    return types.int64(arr), codegen


@intrinsic
def _stream_line(typingctx, dst, i, src, j):
    """``dst[i:i+k] = src[j:j+k]``, ``k`` the elements of a 64-byte line (16 float32, 64
    uint8), stored as one non-temporal 64-byte store (``dst[i]`` must start a cache
    line); no bounds check."""
    def codegen(context, builder, sig, args):
        d = context.make_array(sig.args[0])(context, builder, args[0])
        s = context.make_array(sig.args[2])(context, builder, args[2])
        size = _itemsize(context, sig.args[0])
        line = ir.VectorType(ir.IntType(8 * size), _LINE // size)
        value = builder.load(builder.bitcast(builder.gep(s.data, [args[3]]), ir.PointerType(line)), align=size)
        store = builder.store(value, builder.bitcast(builder.gep(d.data, [args[1]]), ir.PointerType(line)), align=64)
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return types.void(dst, i, src, j), codegen


@intrinsic
def store_fence(typingctx):
    """Order the streaming stores before whatever follows (``sfence`` on x86), so another
    thread handed the tensor sees every element."""
    def codegen(context, builder, sig, args):
        if _X86:
            builder.call(declare(builder, "llvm.x86.sse.sfence", ir.VoidType(), []), [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


@numba.njit(nogil=True, cache=True, inline="always")
def stream_run(dst, i, src, j, n):
    """``dst[i:i+n] = src[j:j+n]`` for 1-D arrays of one element type (4 or 1 bytes)
    adjacent in memory: the whole cache lines of ``dst`` with streaming (non-temporal)
    stores, which write memory without reading it first and leave the caches alone; the
    partial lines at either end with ``copy_run``. Call ``store_fence`` once after the
    last one."""
    size = _elem_bytes(dst)
    per_line = _LINE // size
    head = min(((_LINE - _line_offset(dst, i)) % _LINE) // size, n)
    if head > 0:
        copy_run(dst, i, src, j, head)
    k = head
    while k + per_line <= n:
        _stream_line(dst, i + k, src, j + k)
        k += per_line
    if k < n:
        copy_run(dst, i + k, src, j + k, n - k)


def streams(out: np.ndarray) -> bool:
    """Whether a writer should stream ``out``: float32 from ``STREAM_MIN_BYTES`` on; uint8
    (raw pixels) never, as streaming it measured slower at every size (2-93 MiB)."""
    return out.dtype != np.uint8 and out.nbytes >= STREAM_MIN_BYTES


#: The writers' output dtypes: float32 (each value through the table) or uint8 (the raw
#: resized pixels, for engines that rescale and normalize themselves).
OUT_DTYPES = (np.dtype(np.float32), np.dtype(np.uint8))
_RAW_TABLES = (np.zeros((0, 4), np.float32), np.zeros((3, 256), np.float32))


def tables(lut, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(coef, lut) to hand a writer whose output is ``dtype``: for float32 the table as
    float32 and ``arithmetic`` of it; for uint8 placeholders (no table is read; ``lut``
    may be None)."""
    if np.dtype(dtype) == np.uint8:
        return _RAW_TABLES
    lut = np.ascontiguousarray(lut, dtype=np.float32)
    return arithmetic(lut), lut


def _c_typed(a) -> bool:
    """Whether numba typed ``a`` as C-contiguous (a compile-time constant)."""
    return a.flags.c_contiguous


@overload(_c_typed)
def _c_typed_numba(a):
    c_typed = a.layout == "C"
    return lambda a: c_typed


@numba.njit(nogil=True, cache=True, inline="always")
def normalize_into(src, n, coef, lut, line, out, y, x, step=3):
    """``out[c, y, x:x+n] = lut[c, src[step*i + c]]`` (``step`` 4: Pillow's RGBX, read in
    place), or the raw bytes ``src[step*i + c]`` for a uint8 ``out`` (``normalize_row``).
    A C-contiguous ``out`` is written directly; any other (a slot of a padded batch,
    whose rows are still contiguous) gets the row through ``line`` ([3, >= n] of
    ``out``'s dtype) and ``copy_run``, since LLVM would turn stores of unknown stride
    into slow scatters."""
    if _c_typed(out):
        normalize_row(src, n, coef, lut, out[0, y, x:x + n], out[1, y, x:x + n], out[2, y, x:x + n], step)
    else:
        normalize_row(src, n, coef, lut, line[0], line[1], line[2], step)
        for c in range(3):
            copy_run(out[c, y], x, line[c], 0, n)
